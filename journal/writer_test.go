package journal

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var t0 = time.Date(2024, 5, 1, 12, 0, 0, 123456789, time.UTC)

func intent(batch, item string, attempt int) *Record {
	return &Record{V: Version, Type: TypeIntent, Time: t0.Add(time.Duration(attempt) * time.Second), Batch: batch, Item: item,
		Charge: "ch_" + item, Attempt: attempt, Key: fmt.Sprintf("refundkit:%s:%s:%d", batch, item, attempt), Amount: 500}
}

func refunded(batch, item string) *Record {
	return &Record{V: Version, Type: TypeRefunded, Time: t0.Add(time.Minute), Batch: batch, Item: item,
		Attempt: 1, Refund: "re_" + item, Amount: 500, Currency: "eur", Status: "succeeded", Source: SourceAPI}
}

func failed(batch, item string, attempt, status int, final bool) *Record {
	return &Record{V: Version, Type: TypeFailed, Time: t0.Add(time.Minute), Batch: batch, Item: item,
		Attempt: attempt, HTTPStatus: status, Code: "card_declined", Message: `the "card" was declined`, Final: final}
}

func TestOpenAppendReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	w, st, torn, err := Open(path, Options{})
	if err != nil || torn != nil || st.Len() != 0 {
		t.Fatalf("Open new: %v, %v, len %d", err, torn, st.Len())
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("journal mode: %v %v", info.Mode(), err)
	}
	if err := w.Append(intent("b", "i1", 1), refunded("b", "i1"), intent("b", "i2", 1)); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(failed("b", "i2", 1, 402, true)); err != nil {
		t.Fatal(err)
	}
	if got := w.Stats(); got.Appends != 2 || got.Records != 4 || got.Fsyncs != 2 {
		t.Errorf("Stats = %+v", got)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(intent("b", "i3", 1)); !errors.Is(err, ErrClosed) {
		t.Errorf("Append after Close = %v, want ErrClosed", err)
	}
	w, st, torn, err = Open(path, Options{})
	if err != nil || torn != nil {
		t.Fatalf("reopen: %v %v", err, torn)
	}
	defer w.Close()
	if s, _ := st.Lookup("b", "i1"); s.Status != StatusRefunded || s.Refund != "re_i1" {
		t.Errorf("i1 = %+v", s)
	}
	if s, _ := st.Lookup("b", "i2"); s.Status != StatusFailed || s.Code != "card_declined" {
		t.Errorf("i2 = %+v", s)
	}
}

func TestOpenLockedInProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	w, _, _, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, _, _, err = Open(path, Options{})
	var locked *LockedError
	if !errors.As(err, &locked) || locked.Path != path {
		t.Fatalf("second Open = %v, want *LockedError", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w, _, _, err = Open(path, Options{})
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	w.Close()
}

// TestHelperProcess is not a test: TestLockAcrossProcesses and
// TestKilledWriterLosesNothing run the test binary as a second process
// that holds a journal, through this function.
func TestHelperProcess(t *testing.T) {
	path := os.Getenv("JOURNAL_TEST_HELPER")
	if path == "" {
		t.Skip("run by other tests as a second process")
	}
	w, _, _, err := Open(path, Options{})
	if err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(1)
	}
	fmt.Println("locked")
	if os.Getenv("JOURNAL_TEST_APPEND") != "" {
		// Append for ever, acknowledging each durable record on stdout,
		// until the parent kills us.
		for i := 0; ; i++ {
			if err := w.Append(intent("b", strconv.Itoa(i), 1)); err != nil {
				fmt.Printf("error %v\n", err)
				os.Exit(1)
			}
			fmt.Println(i)
		}
	}
	io.Copy(io.Discard, os.Stdin) // hold the lock until the parent closes stdin
	w.Close()
	os.Exit(0)
}

// startHelper runs TestHelperProcess on path and waits until it holds the
// lock.
func startHelper(t *testing.T, path string, appendForever bool) (*exec.Cmd, io.WriteCloser, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), "JOURNAL_TEST_HELPER="+path)
	if appendForever {
		cmd.Env = append(cmd.Env, "JOURNAL_TEST_APPEND=1")
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	out := bufio.NewScanner(stdout)
	if !out.Scan() || out.Text() != "locked" {
		t.Fatalf("helper said %q, %v; want locked", out.Text(), out.Err())
	}
	return cmd, stdin, out
}

func TestLockAcrossProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	cmd, stdin, _ := startHelper(t, path, false)

	_, _, _, err := Open(path, Options{})
	var locked *LockedError
	if !errors.As(err, &locked) || locked.Path != path {
		t.Fatalf("Open while another process holds it = %v, want *LockedError", err)
	}
	if want := "journal " + path + " is locked by another run"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if _, _, err := Load(path); err != nil {
		t.Errorf("Load takes no lock, yet: %v", err)
	}

	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper: %v", err)
	}
	w, _, _, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("Open after the other process closed: %v", err)
	}
	w.Close()
}

// TestKilledWriterLosesNothing kills a writer process with SIGKILL while it
// appends: every record it acknowledged is in the journal, and the journal
// opens again at once (the kernel drops the lock with the process).
func TestKilledWriterLosesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	cmd, _, out := startHelper(t, path, true)
	acked := -1
	for out.Scan() && acked < 200 {
		n, err := strconv.Atoi(out.Text())
		if err != nil {
			t.Fatalf("helper: %s", out.Text())
		}
		acked = n
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	w, st, _, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("Open after kill: %v", err)
	}
	defer w.Close()
	for i := 0; i <= acked; i++ {
		if s, ok := st.Lookup("b", strconv.Itoa(i)); !ok || s.Status != StatusInDoubt {
			t.Fatalf("acknowledged record %d missing after kill: %+v %v", i, s, ok)
		}
	}
}

func TestConcurrentAppend(t *testing.T) {
	for _, opts := range []Options{{}, {NoGroupCommit: true}} {
		t.Run(fmt.Sprintf("%+v", opts), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "j.jsonl")
			w, _, _, err := Open(path, opts)
			if err != nil {
				t.Fatal(err)
			}
			const goroutines, appends = 16, 40
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					for a := range appends {
						// 1 to 3 records per Append: a group must stay whole.
						var recs []*Record
						for k := range 1 + a%3 {
							recs = append(recs, intent("b", fmt.Sprintf("%d-%d-%d", g, a, k), 1))
						}
						if err := w.Append(recs...); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			stats := w.Stats()
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			want := 0
			seen := map[string]int{}
			for g := range goroutines {
				for a := range appends {
					for k := range 1 + a%3 {
						seen[fmt.Sprintf("%d-%d-%d", g, a, k)] = 0
						want++
					}
				}
			}
			f, _ := os.Open(path)
			defer f.Close()
			sc := NewScanner(f, path)
			for sc.Scan() {
				seen[sc.Record().Item]++
			}
			if sc.Err() != nil || sc.Torn() != nil {
				t.Fatalf("reading back: %v %v", sc.Err(), sc.Torn())
			}
			for item, n := range seen {
				if n != 1 {
					t.Errorf("record %s on disk %d times", item, n)
				}
			}
			if stats.Appends != goroutines*appends || stats.Records != int64(want) || stats.Fsyncs < 1 || stats.Fsyncs > stats.Appends {
				t.Errorf("Stats = %+v, want %d appends, %d records", stats, goroutines*appends, want)
			}
			if opts.NoGroupCommit && stats.Fsyncs != stats.Appends {
				t.Errorf("NoGroupCommit: %d fsyncs for %d appends", stats.Fsyncs, stats.Appends)
			}
		})
	}
}

func TestAppendInvalidWritesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	w, _, _, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	bad := intent("b", "2", 1)
	bad.Key = ""
	if err := w.Append(intent("b", "1", 1), bad); err == nil || !strings.Contains(err.Error(), "without key") {
		t.Fatalf("Append(invalid) = %v", err)
	}
	v2 := intent("b", "3", 1)
	v2.V = 2
	if err := w.Append(v2); !errors.As(err, new(*VersionError)) {
		t.Fatalf("Append(v2) = %v, want a *VersionError", err)
	}
	if data, _ := os.ReadFile(path); len(data) != 0 {
		t.Fatalf("invalid Append wrote %q", data)
	}
	if err := w.Append(intent("b", "1", 1)); err != nil {
		t.Fatalf("Append after a refused one: %v", err)
	}
}

// failingFile is the journal file with faults injected: a write that stops
// after some bytes with an error, or an fsync that fails.
type failingFile struct {
	*os.File
	writeBudget int   // bytes the next writes may still write; <0 unlimited
	writeErr    error // returned once the budget is spent
	syncErr     error
	writes      int
}

func (f *failingFile) Write(p []byte) (int, error) {
	f.writes++
	if f.writeBudget < 0 || len(p) <= f.writeBudget {
		if f.writeBudget >= 0 {
			f.writeBudget -= len(p)
		}
		return f.File.Write(p)
	}
	n, _ := f.File.Write(p[:f.writeBudget])
	f.writeBudget = 0
	return n, f.writeErr
}

func (f *failingFile) Sync() error {
	if f.syncErr != nil {
		return f.syncErr
	}
	return f.File.Sync()
}

// TestStickyFailure: a failed write or fsync fails the writer for good,
// leaves no partial record behind, and later Appends write nothing.
func TestStickyFailure(t *testing.T) {
	for _, tt := range []struct {
		name   string
		budget int
		wErr   error
		sErr   error
	}{
		{"disk full mid-record", 20, syscall.ENOSPC, nil},
		{"disk full", 0, syscall.ENOSPC, nil},
		{"I/O error on fsync", -1, nil, syscall.EIO},
	} {
		for _, opts := range []Options{{}, {NoGroupCommit: true}} {
			t.Run(fmt.Sprintf("%s/%+v", tt.name, opts), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "j.jsonl")
				w, _, _, err := Open(path, opts)
				if err != nil {
					t.Fatal(err)
				}
				if err := w.Append(intent("b", "ok", 1)); err != nil {
					t.Fatal(err)
				}
				good, _ := os.ReadFile(path)
				ff := &failingFile{File: w.f.(*os.File), writeBudget: tt.budget, writeErr: tt.wErr, syncErr: tt.sErr}
				w.f = ff

				err = w.Append(intent("b", "lost", 1), refunded("b", "lost"))
				var we *WriteError
				if !errors.As(err, &we) || we.Path != path || !errors.Is(err, cmp.Or(tt.wErr, tt.sErr)) {
					t.Fatalf("Append on a failing disk = %v, want a *WriteError for %v", err, cmp.Or(tt.wErr, tt.sErr))
				}
				if after, _ := os.ReadFile(path); !bytes.Equal(after, good) {
					t.Errorf("journal after the failure:\n%q\nwant it cut back to\n%q", after, good)
				}
				ff.writeBudget, ff.syncErr = -1, nil // the disk recovers: the writer must not
				writes := ff.writes
				for range 2 {
					if err := w.Append(intent("b", "later", 1)); !errors.As(err, &we) {
						t.Fatalf("Append after the failure = %v, want the *WriteError", err)
					}
				}
				if ff.writes != writes {
					t.Errorf("%d writes after the writer failed", ff.writes-writes)
				}
				w.Close()
				st, torn, err := Load(path)
				if err != nil || torn != nil || st.Len() != 1 {
					t.Errorf("Load after failure: %v, %v, %d items", err, torn, st.Len())
				}
			})
		}
	}
}

// TestDiskFull writes to /dev/full, where the kernel itself answers every
// write with ENOSPC. It covers the real error path of the real file; the
// cut-back of a partial write is covered by TestStickyFailure.
func TestDiskFull(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	for _, opts := range []Options{{}, {NoGroupCommit: true}} {
		w, _, _, err := Open("/dev/full", opts)
		if err != nil {
			t.Skipf("cannot open /dev/full as a journal: %v", err)
		}
		var we *WriteError
		if err := w.Append(intent("b", "1", 1)); !errors.As(err, &we) || !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("%+v: Append to a full disk = %v, want *WriteError ENOSPC", opts, err)
		}
		if err := w.Append(intent("b", "2", 1)); !errors.As(err, &we) {
			t.Errorf("%+v: second Append = %v, want the sticky *WriteError", opts, err)
		}
		if s := w.Stats(); s.Records != 0 || s.Appends != 0 {
			t.Errorf("Stats after failures = %+v", s)
		}
		w.Close()
	}
}
