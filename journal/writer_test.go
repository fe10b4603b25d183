package journal

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var t0 = time.Date(2024, 5, 1, 12, 0, 0, 123456789, time.UTC)

func intent(batch, item string, attempt int) *Record {
	return &Record{V: Version, Type: TypeIntent, Time: t0.Add(time.Duration(attempt) * time.Second), Batch: batch, Item: item,
		Charge: "ch_" + item, Attempt: attempt, Key: fmt.Sprintf("refundkit:%s:%s:%d", batch, item, attempt), Amount: 500}
}

func refunded(batch, item string) *Record {
	return &Record{V: Version, Type: TypeRefunded, Time: t0.Add(time.Minute), Batch: batch, Item: item,
		Charge: "ch_" + item, Attempt: 1, Refund: "re_" + item, Amount: 500, Currency: "eur", Status: "succeeded", Source: SourceAPI}
}

func failed(batch, item string, attempt, status int, final bool) *Record {
	return &Record{V: Version, Type: TypeFailed, Time: t0.Add(time.Minute), Batch: batch, Item: item,
		Charge: "ch_" + item, Attempt: attempt, HTTPStatus: status, Code: "card_declined", Message: `the "card" was declined`, Final: final}
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
// write with ENOSPC: the journal's file is swapped for it once open (Open
// refuses a device as a journal). It covers the real error path of a real
// file; the cut-back of a partial write is covered by TestStickyFailure.
func TestDiskFull(t *testing.T) {
	for _, opts := range []Options{{}, {NoGroupCommit: true}} {
		full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
		if err != nil {
			t.Skipf("no /dev/full: %v", err)
		}
		w, _, _, err := Open(filepath.Join(t.TempDir(), "j.jsonl"), opts)
		if err != nil {
			t.Fatal(err)
		}
		w.f.Close()
		w.f = full
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

// within runs f in a goroutine and fails the test if it has not returned
// after 10 s: some odd paths made Open spin or block for ever, and the test
// must fail rather than hang.
func within[T any](t *testing.T, what string, f func() (T, error)) (T, error) {
	t.Helper()
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s has not returned after 10 s", what)
		panic("unreachable")
	}
}

// TestOddPaths: a journal path that is not a regular file, or a symbolic
// link to nothing, is refused at once with an error that says what it is.
// Nothing is created, through the link or beside it.
func TestOddPaths(t *testing.T) {
	dir := t.TempDir()
	in := func(name string) string { return filepath.Join(dir, name) }
	if err := os.Mkdir(in("sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		setup func(t *testing.T) string // returns the journal path
		want  string                    // after "journal PATH is "
	}{
		{"dangling symlink", func(t *testing.T) string {
			return symlink(t, "missing/y.jsonl", in("dangling.jsonl"))
		}, "a symbolic link to missing/y.jsonl, which does not exist"},
		{"dangling symlink into an existing directory", func(t *testing.T) string {
			return symlink(t, "sub/y.jsonl", in("dangling2.jsonl"))
		}, "a symbolic link to sub/y.jsonl, which does not exist"},
		{"directory", func(t *testing.T) string { return in("sub") }, "a directory, not a file"},
		{"symlink to a directory", func(t *testing.T) string {
			return symlink(t, "sub", in("dirlink.jsonl"))
		}, "a symbolic link to sub, which is a directory, not a file"},
		{"named pipe", func(t *testing.T) string {
			if err := unix.Mkfifo(in("fifo.jsonl"), 0o600); err != nil {
				t.Skipf("mkfifo: %v", err)
			}
			return in("fifo.jsonl")
		}, "a named pipe (FIFO), not a file"},
		{"device", func(t *testing.T) string {
			if _, err := os.Stat("/dev/null"); err != nil {
				t.Skip("no /dev/null")
			}
			return "/dev/null"
		}, "a character device, not a file"},
		{"socket", func(t *testing.T) string {
			l, err := net.Listen("unix", in("s.jsonl"))
			if err != nil {
				t.Skipf("unix socket: %v", err)
			}
			t.Cleanup(func() { l.Close() })
			return in("s.jsonl")
		}, "a socket, not a file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := tt.setup(t)
			want := "journal " + path + " is " + tt.want
			before := listDir(t, dir)
			for _, op := range []struct {
				name string
				f    func() (any, error)
			}{
				{"Open", func() (any, error) {
					w, _, _, err := Open(path, Options{})
					return w, err
				}},
				{"TakeLock", func() (any, error) {
					l, err := TakeLock(path)
					return l, err
				}},
				{"Load", func() (any, error) {
					st, _, err := Load(path)
					return st, err
				}},
			} {
				v, err := within(t, op.name+"("+path+")", op.f)
				var nf *NotFileError
				if !errors.As(err, &nf) || nf.Path != path || err.Error() != want {
					t.Errorf("%s = %T, %v; want the error %q", op.name, v, err, want)
				}
				if w, ok := v.(*Writer); ok && w != nil {
					w.Close()
				}
			}
			if after := listDir(t, dir); after != before {
				t.Errorf("the directory changed:\n%s\nwant\n%s", after, before)
			}
		})
	}
}

func symlink(t *testing.T, target, link string) string {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	return link
}

// listDir names every entry under dir with its type, to show that nothing
// was created.
func listDir(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %v\n", p, d.Type())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestOpenThroughSymlink: a symbolic link to a journal is that journal.
func TestOpenThroughSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "real.jsonl")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := symlink(t, "real.jsonl", filepath.Join(dir, "link.jsonl"))
	for _, opts := range []Options{{}, {NoGroupCommit: true}} {
		w, err := within(t, "Open", func() (*Writer, error) {
			w, _, _, err := Open(link, opts)
			return w, err
		})
		if err != nil {
			t.Fatalf("Open through a symlink: %v", err)
		}
		if err := w.Append(intent("b", fmt.Sprint(opts.NoGroupCommit), 1)); err != nil {
			t.Fatalf("Append through a symlink: %v", err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if st, _, err := Load(target); err != nil || st.Len() != 2 {
		t.Fatalf("the link's target holds %v items (%v), want 2", st, err)
	}
	if info, err := os.Lstat(link); err != nil || info.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("the link is no longer a link: %v %v", info, err)
	}
}

// TestWriterHaltsWhenPathReplaced: a program that ignores the lock removes
// or replaces the journal while a Writer holds it. The Writer's next commit
// finds that its path no longer names its file and fails for good: records
// written to a file nobody will read again must not be acknowledged.
func TestWriterHaltsWhenPathReplaced(t *testing.T) {
	for _, tt := range []struct {
		name    string
		link    bool // the journal path is a symlink to the file
		replace func(t *testing.T, path string)
	}{
		{"removed", false, func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		}},
		{"renamed away", false, func(t *testing.T, path string) {
			if err := os.Rename(path, path+".old"); err != nil {
				t.Fatal(err)
			}
		}},
		{"replaced by a rename", false, func(t *testing.T, path string) {
			// What an unlocked journal-merge -o did: copy, then rename over.
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path+".tmp", data, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(path+".tmp", path); err != nil {
				t.Fatal(err)
			}
		}},
		{"symlink pointed elsewhere", true, func(t *testing.T, path string) {
			if err := os.WriteFile(path+".other", nil, 0o600); err != nil {
				t.Fatal(err)
			}
			symlink(t, filepath.Base(path)+".other", path+".newlink")
			if err := os.Rename(path+".newlink", path); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		for _, opts := range []Options{{}, {NoGroupCommit: true}} {
			t.Run(fmt.Sprintf("%s/%+v", tt.name, opts), func(t *testing.T) {
				dir := t.TempDir()
				path := filepath.Join(dir, "j.jsonl")
				if tt.link {
					if err := os.WriteFile(filepath.Join(dir, "real.jsonl"), nil, 0o600); err != nil {
						t.Fatal(err)
					}
					symlink(t, "real.jsonl", path)
				}
				w, _, _, err := Open(path, opts)
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
				if err := w.Append(intent("b", "before", 1)); err != nil {
					t.Fatal(err)
				}
				tt.replace(t, path)
				newFile, _ := os.ReadFile(path)

				err = w.Append(intent("b", "after", 1))
				var we *WriteError
				if !errors.As(err, &we) || we.Path != path || !errors.Is(err, ErrReplaced) {
					t.Fatalf("Append after the journal was %s = %v, want a *WriteError for ErrReplaced", tt.name, err)
				}
				if !strings.Contains(err.Error(), "journal "+path) || !strings.Contains(err.Error(), "while this run held it") {
					t.Errorf("the error does not say what happened to which journal: %v", err)
				}
				held, err := w.f.(*os.File).Stat()
				if err != nil {
					t.Fatal(err)
				}
				for range 2 {
					if err := w.Append(intent("b", "later", 1)); !errors.As(err, &we) || !errors.Is(err, ErrReplaced) {
						t.Fatalf("Append after the halt = %v, want the same *WriteError", err)
					}
				}
				if again, _ := w.f.(*os.File).Stat(); again.Size() != held.Size() {
					t.Errorf("the writer wrote %d bytes after it halted", again.Size()-held.Size())
				}
				if now, _ := os.ReadFile(path); !bytes.Equal(now, newFile) {
					t.Errorf("the file now at the path changed:\n%q\nwant\n%q", now, newFile)
				}
				if s := w.Stats(); s.Appends != 1 {
					t.Errorf("Stats = %+v, want only the append made before", s)
				}
			})
		}
	}
}

// TestTakeLock: TakeLock takes the lock journal.Open takes: each refuses
// the other with *LockedError. Discard removes a file TakeLock created and
// nothing else.
func TestTakeLock(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.jsonl")
	l, err := TakeLock(path)
	if err != nil {
		t.Fatal(err)
	}
	if !l.Created() {
		t.Error("Created() = false for a new file")
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 || info.Size() != 0 {
		t.Fatalf("the new file: %v %v", info, err)
	}
	var locked *LockedError
	if _, _, _, err := Open(path, Options{}); !errors.As(err, &locked) || locked.Path != path {
		t.Errorf("Open while TakeLock holds = %v, want *LockedError", err)
	}
	if _, err := TakeLock(path); !errors.As(err, &locked) {
		t.Errorf("TakeLock while TakeLock holds = %v, want *LockedError", err)
	}
	if err := l.Discard(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Discard left the file it created: %v", err)
	}

	w, _, _, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Append(intent("b", "1", 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := TakeLock(path); !errors.As(err, &locked) || err.Error() != "journal "+path+" is locked by another run" {
		t.Errorf("TakeLock while Open holds = %v, want *LockedError", err)
	}
	w.Close()
	l, err = TakeLock(path)
	if err != nil {
		t.Fatal(err)
	}
	if l.Created() {
		t.Error("Created() = true for an existing journal")
	}
	if err := l.Discard(); err != nil {
		t.Fatal(err)
	}
	if st, _, err := Load(path); err != nil || st.Len() != 1 {
		t.Errorf("Discard touched a journal it did not create: %v %v", st, err)
	}
	if err := l.Release(); err == nil {
		t.Error("Release after Discard: no error")
	}
}

// TestTakeLockRechecksPath: a lock taken on a file that was replaced
// between the open and the flock (journal-merge renames its output into
// place, then lets go of the old file) is a lock on nothing: TakeLock must
// lock the file the path names once it holds the lock.
func TestTakeLockRechecksPath(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "j.jsonl")
	old, _ := MarshalLine(nil, intent("b", "old", 1))
	if err := os.WriteFile(path, old, 0o600); err != nil {
		t.Fatal(err)
	}
	replaced := false
	testHookBeforeFlock = func() {
		if replaced {
			return
		}
		replaced = true
		if err := os.WriteFile(path+".tmp", nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	defer func() { testHookBeforeFlock = nil }()
	w, st, _, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer w.Close()
	if !replaced || st.Len() != 0 {
		t.Fatalf("the hook did not run (%v) or the old file was loaded (%d items)", replaced, st.Len())
	}
	if err := w.Append(intent("b", "1", 1)); err != nil {
		t.Fatalf("Append to the file the path names: %v", err)
	}
	if st, _, err := Load(path); err != nil || st.Len() != 1 {
		t.Errorf("the path's file: %v %v", st, err)
	}
}

// TestCommitCap: one Append of more than maxCommit bytes of records is
// written as several commits, none over the cap, each with its commit
// line; the journal reads back whole.
func TestCommitCap(t *testing.T) {
	for _, opts := range []Options{{}, {NoGroupCommit: true}} {
		t.Run(fmt.Sprintf("%+v", opts), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "j.jsonl")
			w, _, _, err := Open(path, opts)
			if err != nil {
				t.Fatal(err)
			}
			var recs []*Record
			size := 0
			for i := 0; size <= 2*maxCommit; i++ {
				r := failed("b", strconv.Itoa(i), 1, 402, true)
				r.Message = strings.Repeat("m", 4000)
				line, _ := MarshalLine(nil, r)
				size += len(line)
				recs = append(recs, r)
			}
			if err := w.Append(recs...); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			data, _ := os.ReadFile(path)
			commits, records := 0, 0
			for line := range bytes.Lines(data) {
				n, _, isCommit, ok := parseCommit(line[:len(line)-1])
				switch {
				case isCommit && !ok:
					t.Fatalf("bad commit line %q", line)
				case isCommit:
					if n > 0 {
						commits++
					}
					records = 0
				default:
					if records += len(line); records > maxCommit {
						t.Fatalf("a commit holds more than %d bytes of records", maxCommit)
					}
				}
			}
			if commits < 3 {
				t.Errorf("%d commits for %d bytes of records, want 3 or more", commits, size)
			}
			st, torn, err := Load(path)
			if err != nil || torn != nil || st.Len() != len(recs) {
				t.Fatalf("Load: %v, %v, %d items, want %d", err, torn, lenOf(st), len(recs))
			}
		})
	}
}

// TestAppendRefusesLongLine: a record whose line no reader would take is
// refused before anything is written.
func TestAppendRefusesLongLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	w, _, _, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r := failed("b", "1", 1, 402, true)
	r.Message = strings.Repeat("m", maxLine)
	if err := w.Append(r); err == nil || !strings.Contains(err.Error(), "invalid record") {
		t.Fatalf("Append(long line) = %v", err)
	}
	if data, _ := os.ReadFile(path); len(data) != 0 {
		t.Fatalf("refused Append wrote %d bytes", len(data))
	}
}
