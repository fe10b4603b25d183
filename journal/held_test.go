package journal

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestHeld: a journal is held while a writer (Open) or a tool (TakeLock)
// has it, and not before or after; the probe never writes, never creates,
// never leaves a lock behind and never waits.
func TestHeld(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "j.jsonl")
	held := func(want bool) {
		t.Helper()
		got, err := Held(path)
		if err != nil || got != want {
			t.Fatalf("Held(%s) = %v, %v; want %v", path, got, err, want)
		}
	}

	w, _, _, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec := &Record{V: Version, Type: TypeIntent, Time: time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC),
		Batch: "b", Item: "i1", Charge: "ch_1", Attempt: 1, Key: "refundkit:b:i1:1"}
	if err := w.Append(rec); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := os.Stat(path)
	held(true)
	held(true) // and again: the probe took nothing from the writer
	if err := w.Append(rec); err != nil {
		t.Errorf("the writer after the probes: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	held(false)

	// The probe's shared lock is gone when it returns: a writer gets the
	// journal at once.
	l, err := TakeLock(path)
	if err != nil {
		t.Fatalf("TakeLock after a probe: %v", err)
	}
	held(true)
	l.Release()
	held(false)

	after, _ := os.ReadFile(path)
	if !bytes.HasPrefix(after, before) || !bytes.Equal(after[len(before):], commitOf(rec)) {
		t.Errorf("journal changed beyond the writer's appends:\n%s", after)
	}
	if now, _ := os.Stat(path); !os.SameFile(now, info) || now.Mode() != info.Mode() {
		t.Errorf("journal replaced or its mode changed: %v, was %v", now.Mode(), info.Mode())
	}
}

func TestHeldRefusesWhatIsNoJournal(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.jsonl")
	if held, err := Held(missing); held || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Held(missing) = %v, %v; want not held, fs.ErrNotExist", held, err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the probe created %s", missing)
	}
	var nf *NotFileError
	if held, err := Held(dir); held || !errors.As(err, &nf) || nf.Error() != "journal "+dir+" is a directory, not a file" {
		t.Errorf("Held(dir) = %v, %v; want a *NotFileError", held, err)
	}
}
