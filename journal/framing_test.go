package journal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// These tests use only what the previous version had too (Open, Append,
// Load, the error types), so that they show it failing where it did.

// writeCommits writes a journal with the Writer: one Append (one group
// commit) per element of groups, each of that many records. It returns the
// file's size after each commit.
func writeCommits(t *testing.T, path string, groups ...int) []int64 {
	t.Helper()
	w, _, _, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int64
	item := 0
	for _, n := range groups {
		var recs []*Record
		for range n {
			item++
			r := refunded("b", fmt.Sprintf("item-%04d", item))
			r.Message = strings.Repeat("m", 150) // about 400 bytes a line
			r.Code = "ok"
			recs = append(recs, r)
		}
		if err := w.Append(recs...); err != nil {
			t.Fatal(err)
		}
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, info.Size())
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return sizes
}

// lineAt is the start and end (past '\n') of the line holding offset off.
func lineAt(data []byte, off int64) (int64, int64) {
	start := int64(bytes.LastIndexByte(data[:off], '\n') + 1)
	end := off + int64(bytes.IndexByte(data[off:], '\n')) + 1
	return start, end
}

// lineNumber is the 1-based number of the line starting at off.
func lineNumber(data []byte, off int64) int { return bytes.Count(data[:off], []byte("\n")) + 1 }

// garble damages data in place, inside [from, to).
type garble struct {
	name string
	do   func(data []byte, from, to int64)
}

var garbles = []garble{
	{"a zeroed page", func(data []byte, from, to int64) {
		page := (from + 4095) &^ 4095
		if page+4096 > to {
			panic("the commit holds no whole page")
		}
		clear(data[page : page+4096])
	}},
	{"flipped bytes", func(data []byte, from, to int64) {
		for _, at := range []int64{from + 10, from + 11, from + 300} {
			data[at] ^= 0x5a
		}
	}},
}

// TestOpenRepairsGarbledFinalCommit: power loss garbled lines inside the
// final group commit while a later line of it survived. Those records were
// never acknowledged: Open cuts the commit off as a torn tail, keeps it
// aside, and loads the state of the commits before it.
func TestOpenRepairsGarbledFinalCommit(t *testing.T) {
	for _, g := range garbles {
		t.Run(g.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "j.jsonl")
			sizes := writeCommits(t, path, 3, 2, 30)
			data, _ := os.ReadFile(path)
			g.do(data, sizes[1], sizes[2]-1000) // lines after the damage survive
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}

			st, torn, err := Load(path)
			if err != nil || torn == nil || torn.Offset != sizes[1] || st.Len() != 5 {
				t.Fatalf("Load = %d items, torn %v, %v; want 5 items and a torn tail at %d", lenOf(st), torn, err, sizes[1])
			}
			w, st, torn, err := Open(path, Options{})
			if err != nil {
				t.Fatalf("Open = %v, want the final commit repaired as a torn tail", err)
			}
			defer w.Close()
			if torn == nil || torn.Offset != sizes[1] || torn.Line != lineNumber(data, sizes[1]) || torn.SavedTo == "" {
				t.Fatalf("torn = %+v, want the final commit from offset %d", torn, sizes[1])
			}
			if saved, _ := os.ReadFile(torn.SavedTo); !bytes.Equal(saved, data[sizes[1]:]) {
				t.Error("the torn copy is not the final commit's bytes")
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(after, data[:sizes[1]]) {
				t.Error("the journal was not cut back to its last valid commit")
			}
			if st.Len() != 5 {
				t.Errorf("state holds %d items, want the 5 of the first two commits", st.Len())
			}
			if _, ok := st.Lookup("b", "item-0006"); ok {
				t.Error("a record of the garbled commit reached the state")
			}
			if err := w.Append(refunded("b", "new")); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func lenOf(st *State) int {
	if st == nil {
		return -1
	}
	return st.Len()
}

// TestGarbledEarlierCommitIsCorrupt: the same damage in a commit that a
// later commit follows is corruption: that later commit was acknowledged
// after it. Refused with file:line, the file unchanged.
func TestGarbledEarlierCommitIsCorrupt(t *testing.T) {
	for _, g := range garbles {
		t.Run(g.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "j.jsonl")
			sizes := writeCommits(t, path, 3, 30, 2)
			orig, _ := os.ReadFile(path)
			data := bytes.Clone(orig)
			g.do(data, sizes[0], sizes[1]-1000)
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			// The first damaged line.
			bad := int64(0)
			for i := sizes[0]; i < sizes[1]; i++ {
				if orig[i] != data[i] {
					bad = i
					break
				}
			}
			start, _ := lineAt(data, bad)
			want := fmt.Sprintf("%s:%d: corrupt record: ", path, lineNumber(data, start))
			_, _, _, err := Open(path, Options{})
			var ce *CorruptError
			if !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("Open = %v, want a *CorruptError starting %q", err, want)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(after, data) {
				t.Error("Open changed a journal it refused")
			}
		})
	}
}

// TestBitFlipCaughtByCRC: a flipped bit that leaves a valid record (another
// refund id) inside an earlier commit decodes fine; the commit's crc32c
// catches it.
func TestBitFlipCaughtByCRC(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	sizes := writeCommits(t, path, 3, 2)
	data, _ := os.ReadFile(path)
	i := bytes.Index(data, []byte(`"refund":"re_item-0002"`))
	data[i+len(`"refund":"re_item-000`)] ^= 0x01 // 2 becomes 3
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := Load(path)
	var ce *CorruptError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "crc32c") {
		t.Fatalf("Load = %v, want a *CorruptError naming the crc", err)
	}
	// The commit line that no longer matches its records.
	_, end := lineAt(data, sizes[0]-2)
	if want := fmt.Sprintf("%s:%d:", path, lineNumber(data, sizes[0]-2)); !strings.HasPrefix(err.Error(), want) || end != sizes[0] {
		t.Errorf("error %q, want it to name %s", err, want)
	}
}

// TestOperatorAppendAfterLastCommitKept: a complete record an operator
// appends after the last commit line, with nothing wrong after it, is kept
// as it always was.
func TestOperatorAppendAfterLastCommitKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	writeCommits(t, path, 2)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(lines(refunded("b", "by-hand")))
	f.Close()
	before, _ := os.ReadFile(path)
	w, st, torn, err := Open(path, Options{})
	if err != nil || torn != nil {
		t.Fatalf("Open = %v, %v", err, torn)
	}
	if s, ok := st.Lookup("b", "by-hand"); !ok || s.Status != StatusRefunded {
		t.Fatalf("the operator's record is lost: %+v", s)
	}
	// The writer frames it before its own commit: damage to that commit
	// then cannot cut the operator's record.
	if err := w.Append(refunded("b", "next")); err != nil {
		t.Fatal(err)
	}
	w.Close()
	after, _ := os.ReadFile(path)
	if !bytes.HasPrefix(after, before) {
		t.Fatal("the writer changed what was there")
	}
	empty := len(`{"v":1,"type":"commit","records":0,"crc32c":"00000000"}` + "\n")
	data := append([]byte(nil), after...)
	clear(data[len(before)+empty+10 : len(before)+empty+20])
	os.WriteFile(path, data, 0o600)
	st, torn, err = Load(path)
	if err != nil || torn == nil || torn.Offset != int64(len(before)+empty) {
		t.Fatalf("Load = %v, %v; want the damaged commit torn after the empty one", err, torn)
	}
	if _, ok := st.Lookup("b", "by-hand"); !ok {
		t.Error("the operator's record was cut with the torn commit")
	}
}

// TestCommitLinesAreNoRecords: the Scanner, Load and Merge hand on records
// only; the commit lines a Writer wrote are framing.
func TestCommitLinesAreNoRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	writeCommits(t, path, 1, 2, 3)
	data, _ := os.ReadFile(path)
	if n := bytes.Count(data, []byte(`"type":"commit"`)); n != 4 {
		t.Fatalf("%d commit lines, want 4 (an empty one first)", n)
	}
	sc := NewScanner(bytes.NewReader(data), "j")
	n := 0
	for sc.Scan() {
		if sc.Record().Type == "commit" || !strings.HasPrefix(sc.Record().Item, "item-") {
			t.Fatalf("the Scanner handed on %+v", sc.Record())
		}
		n++
	}
	if n != 6 || sc.Err() != nil || sc.Torn() != nil {
		t.Fatalf("scanned %d records, %v, %v", n, sc.Err(), sc.Torn())
	}
	if st, torn, err := Load(path); err != nil || torn != nil || st.Len() != 6 {
		t.Fatalf("Load: %d items, %v, %v", lenOf(st), torn, err)
	}
	var out bytes.Buffer
	rep, err := Merge([]string{path, path}, &out)
	if err != nil || rep.Records != 6 || rep.Duplicates != 6 || rep.Inputs[0].Records != 6 {
		t.Fatalf("merge: %+v, %v", rep, err)
	}
}

// TestMergeOutputIsAppendable: a merged journal is framed, so a writer
// appends its commits to it at once.
func TestMergeOutputIsAppendable(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")
	writeCommits(t, a, 2, 1)
	os.WriteFile(b, lines(intent("c", "1", 1)), 0o600) // an old, unframed journal
	f, err := os.Create(filepath.Join(dir, "m.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Merge([]string{a, b}, f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	before, _ := os.ReadFile(f.Name())
	w, st, torn, err := Open(f.Name(), Options{})
	if err != nil || torn != nil || st.Len() != 4 {
		t.Fatalf("Open merged: %v, %v, %d items", err, torn, lenOf(st))
	}
	if err := w.Append(refunded("c", "1")); err != nil {
		t.Fatal(err)
	}
	w.Close()
	after, _ := os.ReadFile(f.Name())
	if !bytes.HasPrefix(after, before) || !bytes.HasPrefix(after[len(before):], lines(refunded("c", "1"))) {
		t.Errorf("the writer framed a merged journal again:\n%s", after[len(before):])
	}
}
