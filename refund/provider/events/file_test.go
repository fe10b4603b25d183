package events

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

type note struct {
	ID string `json:"id"`
}

var noteCodec = &Codec[note]{
	File: "test file", Noun: "note",
	Check:    func(*note) string { return "" },
	Key:      func(n *note) string { return n.ID },
	Refs:     func(n *note) (string, string) { return n.ID, "" },
	Clone:    func(n note) note { return n },
	ReadOnly: errors.New("read only"),
}

// A file rotated or moved away while a receiver holds it takes what is
// written after from every reader of the path: the write fails, so the
// delivery is answered 5xx and sent again, never acknowledged and lost.
func TestAddToARenamedFileFails(t *testing.T) {
	for _, move := range []struct {
		name string
		do   func(path string) error
	}{
		{"renamed", func(path string) error { return os.Rename(path, path+".1") }},
		{"replaced", func(path string) error {
			if err := os.Rename(path, path+".1"); err != nil {
				return err
			}
			return os.WriteFile(path, nil, 0o600)
		}},
	} {
		t.Run(move.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "e.jsonl")
			f, err := Open(path, noteCodec, true)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if added, err := f.Add(context.Background(), note{ID: "a"}); !added || err != nil {
				t.Fatalf("Add: %v %v", added, err)
			}
			if err := move.do(path); err != nil {
				t.Fatal(err)
			}
			_, err = f.Add(context.Background(), note{ID: "b"})
			var we *WriteError
			if !errors.As(err, &we) {
				t.Fatalf("Add after the file was %s: %v, want a *WriteError", move.name, err)
			}
		})
	}
}

// A file opened for reading never reports a delivery kept: Add fails,
// even for a codec that names no ReadOnly error of its own.
func TestAddToAFileOpenedForReadingFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "e.jsonl")
	w, err := Open(path, noteCodec, true)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	bare := *noteCodec
	bare.ReadOnly = nil
	for _, c := range []*Codec[note]{noteCodec, &bare} {
		r, err := Open(path, c, false)
		if err != nil {
			t.Fatal(err)
		}
		if added, err := r.Add(context.Background(), note{ID: "a"}); added || err == nil {
			t.Errorf("Add on a file opened for reading (ReadOnly %v): %v %v, want an error", c.ReadOnly, added, err)
		}
		r.Close()
	}
}
