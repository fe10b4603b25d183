package notes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
)

var ctx = context.Background()

func openWriter(t *testing.T, path string) *File {
	t.Helper()
	f, err := OpenFile(path, [][]byte{testKey}, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func mustAdd(t *testing.T, s Store, n wire.Notification, want bool) {
	t.Helper()
	added, err := s.Add(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	if added != want {
		t.Fatalf("Add %s: added %v, want %v", wire.DedupKey(&n.Item), added, want)
	}
}

func lineOf(t *testing.T, n wire.Notification) []byte {
	t.Helper()
	b, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

func TestFileAddDedupReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notes.jsonl")
	w := openWriter(t, path)
	a, b, c := note(wire.EventRefund, "RF1", "PAY1"), note(wire.EventRefundFailed, "RF1", "PAY1"), note(wire.EventRefund, "RF2", "PAY1")
	mustAdd(t, w, a, true)
	mustAdd(t, w, a, false) // Adyen's retry
	mustAdd(t, w, b, true)  // the same refund, another event
	mustAdd(t, w, c, true)
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", info.Mode().Perm())
	}
	want := slices.Concat(lineOf(t, a), lineOf(t, b), lineOf(t, c))
	if got, _ := os.ReadFile(path); !bytes.Equal(got, want) {
		t.Fatalf("file:\n%s\nwant:\n%s", got, want)
	}
	check := func(s Store) {
		t.Helper()
		all, err := s.All(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := pspsOf(all); !slices.Equal(got, []string{"REFUND:RF1", "REFUND_FAILED:RF1", "REFUND:RF2"}) {
			t.Errorf("All: %v", got)
		}
		rf1, err := s.ForRefund(ctx, "RF1")
		if err != nil {
			t.Fatal(err)
		}
		if got := pspsOf(rf1); !slices.Equal(got, []string{"REFUND:RF1", "REFUND_FAILED:RF1"}) {
			t.Errorf("ForRefund RF1: %v", got)
		}
		pay, err := s.ForPayment(ctx, "PAY1")
		if err != nil {
			t.Fatal(err)
		}
		if len(pay) != 3 || !pay[0].Received.Equal(a.Received) || !wire.Verify(&pay[2].Item, testKey) {
			t.Errorf("ForPayment PAY1: %+v", pay)
		}
		if none, err := s.ForRefund(ctx, "PAY1"); err != nil || len(none) != 0 {
			t.Errorf("ForRefund of a payment's id: %v, %v", none, err)
		}
	}
	check(w)
	// A caller that changes what it got changes nothing kept.
	got, _ := w.All(ctx)
	got[0].Item.AdditionalData[wire.SignatureField] = "x"
	check(w)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopened, the file still dedups: a retry after a restart adds no line.
	w2 := openWriter(t, path)
	mustAdd(t, w2, a, false)
	check(w2)
	if got, _ := os.ReadFile(path); !bytes.Equal(got, want) {
		t.Fatalf("after a retry on reopen:\n%s", got)
	}
	r, err := OpenFile(path, [][]byte{testKey}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	check(r)
	if _, err := r.Add(ctx, a); !errors.Is(err, ErrReadOnly) {
		t.Errorf("Add on a reader: %v", err)
	}
}

func TestFileSecondWriterIsLockedOut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notes.jsonl")
	openWriter(t, path)
	_, err := OpenFile(path, [][]byte{testKey}, true)
	var locked *LockedError
	if !errors.As(err, &locked) || locked.Path != path {
		t.Fatalf("second writer: %v", err)
	}
	// A reader takes no lock.
	r, err := OpenFile(path, [][]byte{testKey}, false)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
}

func TestFileAddRefusesWhatNoReaderWouldRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notes.jsonl")
	w := openWriter(t, path)
	unsigned := note(wire.EventRefund, "RF1", "PAY1")
	delete(unsigned.Item.AdditionalData, wire.SignatureField)
	otherKey := note(wire.EventRefund, "RF2", "PAY1")
	wire.SetSignature(&otherKey.Item, []byte("another key"))
	future := note(wire.EventRefund, "RF3", "PAY1")
	future.V = 2
	for _, n := range []wire.Notification{unsigned, otherKey, future} {
		var invalid *InvalidError
		if _, err := w.Add(ctx, n); !errors.As(err, &invalid) {
			t.Errorf("Add %s: %v, want *InvalidError", n.Item.PSPReference, err)
		}
	}
	if got, _ := os.ReadFile(path); len(got) != 0 {
		t.Fatalf("refused notifications wrote %q", got)
	}
	mustAdd(t, w, note(wire.EventRefund, "RF1", "PAY1"), true) // the writer is not failed
}

func TestFileTornTailIsSavedAsideAndCut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notes.jsonl")
	good := lineOf(t, note(wire.EventRefund, "RF1", "PAY1"))
	torn := lineOf(t, note(wire.EventRefund, "RF2", "PAY1"))
	torn = torn[:len(torn)-1] // all but its newline: never fsynced, never [accepted]
	if err := os.WriteFile(path, slices.Concat(good, torn), 0o600); err != nil {
		t.Fatal(err)
	}

	// A reader reads the complete line and leaves the torn one alone.
	r, err := OpenFile(path, [][]byte{testKey}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if all, err := r.All(ctx); err != nil || len(all) != 1 {
		t.Fatalf("reader: %v, %v", pspsOf(all), err)
	}

	w := openWriter(t, path)
	tn := w.Torn()
	if tn == nil || tn.Line != 2 || tn.Offset != int64(len(good)) || tn.Bytes != len(torn) {
		t.Fatalf("torn: %+v", tn)
	}
	if saved, err := os.ReadFile(tn.SavedTo); err != nil || !bytes.Equal(saved, torn) {
		t.Fatalf("saved aside: %q, %v", saved, err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, good) {
		t.Fatalf("after the cut: %q", got)
	}
	// The retry of the torn one is a new line of its own.
	mustAdd(t, w, note(wire.EventRefund, "RF2", "PAY1"), true)
	if got, _ := os.ReadFile(path); !bytes.Equal(got, slices.Concat(good, torn, []byte("\n"))) {
		t.Fatalf("after the retry: %q", got)
	}
	// The reader, whose offset stayed before the torn bytes, reads it.
	if all, err := r.All(ctx); err != nil || !slices.Equal(pspsOf(all), []string{"REFUND:RF1", "REFUND:RF2"}) {
		t.Fatalf("reader after the retry: %v, %v", pspsOf(all), err)
	}
}

// TestFileRefusesABadLineNamingIt: a forged, altered, undecodable or
// unknown-version line is refused by writer and reader alike, with
// file:line, and the file is left as it was.
func TestFileRefusesABadLineNamingIt(t *testing.T) {
	good := lineOf(t, note(wire.EventRefund, "RF1", "PAY1"))
	altered := note(wire.EventRefund, "RF2", "PAY1")
	altered.Item.Amount.Value = 99999 // changed after signing
	forged := note(wire.EventRefund, "RF3", "PAY1")
	wire.SetSignature(&forged.Item, []byte("not the key"))
	unsigned := note(wire.EventRefund, "RF4", "PAY1")
	delete(unsigned.Item.AdditionalData, wire.SignatureField)
	future := note(wire.EventRefund, "RF5", "PAY1")
	future.V = 9
	for _, tc := range []struct {
		name string
		line []byte
		want string
	}{
		{"altered", lineOf(t, altered), "hmacSignature does not verify under the HMAC key"},
		{"forged", lineOf(t, forged), "hmacSignature does not verify under the HMAC key"},
		{"unsigned", lineOf(t, unsigned), "no hmacSignature"},
		{"future version", lineOf(t, future), "unknown version v=9"},
		{"not JSON", []byte("{\"v\":1,\n"), "not a notification"},
		{"empty line", []byte("\n"), "not a notification"},
		{"not a notification", []byte("[1,2]\n"), "not a notification"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "notes.jsonl")
			content := slices.Concat(good, tc.line, good)
			if err := os.WriteFile(path, content, 0o600); err != nil {
				t.Fatal(err)
			}
			for _, write := range []bool{true, false} {
				_, err := OpenFile(path, [][]byte{testKey}, write)
				var corrupt *CorruptError
				if !errors.As(err, &corrupt) || corrupt.Line != 2 {
					t.Fatalf("write=%v: %v, want *CorruptError at line 2", write, err)
				}
				if msg := err.Error(); !strings.HasPrefix(msg, path+":2: ") || !strings.Contains(msg, tc.want) {
					t.Errorf("write=%v: %q, want %q and %q", write, msg, path+":2: ", tc.want)
				}
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, content) {
				t.Fatalf("the refused file changed")
			}
		})
	}
}

func TestFileReaderSeesAppendedLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notes.jsonl")
	w := openWriter(t, path)
	r, err := OpenFile(path, [][]byte{testKey}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	all := func() []string {
		t.Helper()
		ns, err := r.All(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return pspsOf(ns)
	}
	if got := all(); len(got) != 0 {
		t.Fatalf("empty file: %v", got)
	}
	mustAdd(t, w, note(wire.EventRefund, "RF1", "PAY1"), true)
	if got := all(); !slices.Equal(got, []string{"REFUND:RF1"}) {
		t.Fatalf("after one Add: %v", got)
	}
	if got, err := r.ForRefund(ctx, "RF1"); err != nil || len(got) != 1 {
		t.Fatalf("ForRefund: %v, %v", got, err)
	}

	// A line half written (a writer in the middle of its write) is not
	// read until its newline is there.
	raw, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	line := lineOf(t, note(wire.EventRefundReversed, "RF1", "PAY1"))
	if _, err := raw.Write(line[:40]); err != nil {
		t.Fatal(err)
	}
	if got := all(); len(got) != 1 {
		t.Fatalf("with half a line: %v", got)
	}
	if _, err := raw.Write(line[40:]); err != nil {
		t.Fatal(err)
	}
	if got, err := r.ForRefund(ctx, "RF1"); err != nil || !slices.Equal(pspsOf(got), []string{"REFUND:RF1", "REFUNDED_REVERSED:RF1"}) {
		t.Fatalf("after the newline: %v, %v", pspsOf(got), err)
	}

	// A forged line appended later is refused on the next query, naming
	// it, every time; nothing after it is read.
	forged := note(wire.EventRefund, "RF9", "PAY9")
	forged.Item.Success = "false"
	if _, err := raw.Write(slices.Concat(lineOf(t, forged), lineOf(t, note(wire.EventRefund, "RF8", "PAY8")))); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		_, err := r.All(ctx)
		if err == nil || !strings.HasPrefix(err.Error(), path+":3: hmacSignature does not verify") {
			t.Fatalf("forged line appended: %v", err)
		}
	}
}

// TestFileConcurrentAddsKeepEachNotificationOnce: many Adds at once, each
// notification sent by several of them, as retries that cross: one line
// each, one of them told added, and no Add returns before its line (or
// the line it duplicates) is on disk.
func TestFileConcurrentAddsKeepEachNotificationOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notes.jsonl")
	w := openWriter(t, path)
	const notes, copies = 40, 3
	added := make([]int, notes)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range notes * copies {
		wg.Go(func() {
			n := note(wire.EventRefund, fmt.Sprintf("RF%d", i%notes), "PAY1")
			ok, err := w.Add(ctx, n)
			if err != nil {
				t.Error(err)
				return
			}
			// Durable before Add returned: a reader sees it now.
			r, err := OpenFile(path, [][]byte{testKey}, false)
			if err != nil {
				t.Error(err)
				return
			}
			defer r.Close()
			if got, err := r.ForRefund(ctx, n.Item.PSPReference); err != nil || len(got) != 1 {
				t.Errorf("%s once Add returned: %d lines, %v", n.Item.PSPReference, len(got), err)
			}
			if ok {
				mu.Lock()
				added[i%notes]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for i, n := range added {
		if n != 1 {
			t.Errorf("RF%d added %d times", i, n)
		}
	}
	data, _ := os.ReadFile(path)
	if lines := bytes.Count(data, []byte("\n")); lines != notes {
		t.Fatalf("%d lines, want %d", lines, notes)
	}
	t.Logf("%d Adds, %d fsyncs", notes*copies, w.Fsyncs())
}

func TestFileRefusesWhatIsNoFile(t *testing.T) {
	dir := t.TempDir()
	if _, err := OpenFile(dir, [][]byte{testKey}, true); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory: %v", err)
	}
	if _, err := OpenFile(filepath.Join(dir, "missing.jsonl"), [][]byte{testKey}, false); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a reader of a missing file: %v", err)
	}
	if _, err := OpenFile(filepath.Join(dir, "x.jsonl"), nil, true); err == nil {
		t.Errorf("no key: opened")
	}
}

// BenchmarkFileAdd measures one durable Add (a write and an fsync) at a
// time, as one Adyen retry queue posts, and many at once (group commit).
func BenchmarkFileAdd(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		w, err := OpenFile(filepath.Join(b.TempDir(), "notes.jsonl"), [][]byte{testKey}, true)
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := w.Add(ctx, note(wire.EventRefund, fmt.Sprintf("RF%d", i), "PAY1")); err != nil {
				b.Fatal(err)
			}
			i++
		}
		b.ReportMetric(float64(w.Fsyncs())/float64(i), "fsyncs/op")
	})
	b.Run("parallel", func(b *testing.B) {
		w, err := OpenFile(filepath.Join(b.TempDir(), "notes.jsonl"), [][]byte{testKey}, true)
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close()
		var mu sync.Mutex
		seq := 0
		b.SetParallelism(8)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				mu.Lock()
				seq++
				i := seq
				mu.Unlock()
				if _, err := w.Add(ctx, note(wire.EventRefund, fmt.Sprintf("RF%d", i), "PAY1")); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(w.Fsyncs())/float64(b.N), "fsyncs/op")
	})
}
