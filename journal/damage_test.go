package journal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A crash tears one write: the last commit, never acknowledged. These tests
// damage more than that, or damage it in ways that must not change what is
// kept.

// TestZeroedPageAcrossTwoCommitsIsCorrupt: a zeroed page over the end of
// commit 2 (acknowledged: its fsync returned) and the start of commit 3.
// Neither commit line verifies any more, so the last valid commit is
// commit 1; cutting from there would drop commit 2's acknowledged records.
// The tail after commit 1 holds more record lines than the commit line
// that ends it names: it is more than one write, so it is corruption.
func TestZeroedPageAcrossTwoCommitsIsCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	sizes := writeCommits(t, path, 3, 20, 20)
	orig, _ := os.ReadFile(path)
	data := bytes.Clone(orig)
	page := (sizes[1] - 100) &^ 4095
	if page+4096 < sizes[1]+100 {
		page = sizes[1] - 2048
	}
	clear(data[page : page+4096])
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	start, _ := lineAt(data, page)
	want := fmt.Sprintf("%s:%d: corrupt record: ", path, lineNumber(data, start))

	if _, torn, err := Load(path); !errors.As(err, new(*CorruptError)) || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Load = torn %v, %v; want a *CorruptError starting %q", torn, err, want)
	}
	w, st, torn, err := Open(path, Options{})
	if err == nil {
		defer w.Close()
		_, ok := st.Lookup("b", "item-0004")
		t.Fatalf("Open = torn %v, item-0004 (acknowledged in commit 2) kept: %v; want a *CorruptError", torn, ok)
	}
	if !errors.As(err, new(*CorruptError)) || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("Open = %v, want a *CorruptError starting %q", err, want)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, data) {
		t.Error("Open changed a journal it refused")
	}
}

// group is record lines of about size bytes, at most size, items prefix0...
func group(prefix string, size int) ([]byte, int) {
	var g []byte
	n := 0
	for {
		l := lines(intent("b", prefix+strconv.Itoa(n), 1))
		if len(g)+len(l) > size {
			return g, n
		}
		g, n = append(g, l...), n+1
	}
}

// TestTornTailLongerThanOneCommitIsCorrupt: a tail after the last valid
// commit line longer than a commit and its commit line is more than one
// write, even when no commit line ends it to count its records.
func TestTornTailLongerThanOneCommitIsCorrupt(t *testing.T) {
	if n := len(appendCommitCRC(nil, maxCommit, 0)); n != maxCommitLine {
		t.Fatalf("the longest commit line is %d bytes, maxCommitLine says %d", n, maxCommitLine)
	}
	head := commitOf(intent("b", "first", 1))
	g1, n1 := group("x", 3<<20)
	g2, n2 := group("y", 3<<20)
	data := append(bytes.Clone(head), AppendCommit(bytes.Clone(g1), g1, n1)...)
	boundary := len(data)
	data = append(data, AppendCommit(bytes.Clone(g2), g2, n2)...)
	data = data[:len(data)-10] // the last commit line cut short
	clear(data[boundary-2048 : boundary+2048])
	start, _ := lineAt(data, int64(boundary-2048))
	want := fmt.Sprintf("j:%d: corrupt record: ", lineNumber(data, start))
	ref := referenceRead(data)
	if !strings.HasPrefix(ref.err, want) {
		t.Fatalf("reference: %.300v; want an error starting %q", ref, want)
	}
	for _, size := range []int{64 << 10, 1 << 20, 4 << 20} {
		if got := readAll(data, size, 2); got.String() != ref.String() {
			t.Errorf("blocks of %d:\n got %.300v\nwant %.300v", size, got, ref)
		}
	}
}

// TestLargestCommitGarbledIsTorn: the largest commit the writer makes,
// garbled inside with its commit line intact, is still one write: torn.
func TestLargestCommitGarbledIsTorn(t *testing.T) {
	head := commitOf(intent("b", "first", 1))
	g, n := group("x", maxCommit)
	data := append(bytes.Clone(head), AppendCommit(bytes.Clone(g), g, n)...)
	clear(data[len(head)+maxCommit/2 : len(head)+maxCommit/2+4096])
	want := readOutcome{lines: []int{1}, items: []string{"first"},
		torn: fmt.Sprintf("%+v", Torn{Path: "j", Line: 3, Offset: int64(len(head)), Bytes: len(data) - len(head)})}
	if ref := referenceRead(data); ref.String() != want.String() {
		t.Fatalf("reference: %.300v\nwant %.300v", ref, want)
	}
	for _, size := range []int{64 << 10, 1 << 20, 8 << 20} {
		if got := readAll(data, size, 2); got.String() != want.String() {
			t.Errorf("blocks of %d:\n got %.300v\nwant %.300v", size, got, want)
		}
	}
}

// TestDamageAcrossCommitLineCountsRecords: the rule on small commits, at
// every block size: damage merging the end of commit 2 with the start of
// commit 3 leaves more records before commit 3's line than it names.
func TestDamageAcrossCommitLineCountsRecords(t *testing.T) {
	c1 := commitOf(intent("b", "1", 1))
	c2 := commitOf(intent("b", "2", 1), intent("b", "3", 1), intent("b", "4", 1))
	c3 := commitOf(intent("b", "5", 1), intent("b", "6", 1))
	data := append(append(bytes.Clone(c1), c2...), c3...)
	from := len(c1) + len(c2) - len(emptyCommit) - 50 // inside record 4
	to := len(c1) + len(c2) + 50                      // inside record 5
	clear(data[from:to])
	const want = "j:5: corrupt record: not JSON"
	ref := referenceRead(data)
	if !strings.HasPrefix(ref.err, want) {
		t.Fatalf("reference: %v; want an error starting %q", ref, want)
	}
	for _, size := range []int{1, 64, 4096, 1 << 20} {
		for _, workers := range []int{0, 2} {
			if got := readAll(data, size, workers); got.String() != ref.String() {
				t.Errorf("blocks of %d, %d workers:\n got %v\nwant %v", size, workers, got, ref)
			}
		}
	}
}

// recordOfLen is a valid record whose line is n bytes, '\n' excluded.
func recordOfLen(item string, n int) *Record {
	r := failed("b", item, 1, 402, true)
	r.Message = "m"
	line, _ := MarshalLine(nil, r)
	r.Message = strings.Repeat("m", n-(len(line)-1)+1)
	if line, _ = MarshalLine(nil, r); len(line)-1 != n {
		panic("recordOfLen: size")
	}
	return r
}

// TestLongLineAtEveryBlockSize: a record line longer than maxLine is a long
// line (not a record) whatever the block size, blocks larger than maxLine
// included; a line of exactly maxLine is a record at every size.
func TestLongLineAtEveryBlockSize(t *testing.T) {
	c1, c2 := commitOf(intent("b", "1", 1)), commitOf(intent("b", "2", 1))
	long := lines(recordOfLen("long", maxLine+maxLine/2))
	cases := []struct {
		name string
		data []byte
		want string // the start of the error, or of the torn tail
	}{
		{"long record mid-file", append(append(bytes.Clone(c1), long...), c2...), "j:3: corrupt record: line longer than"},
		{"long record last", append(bytes.Clone(c1), long...), "{Path:j Line:3 Offset:"},
		{"long record, legacy", append(lines(intent("b", "1", 1)), append(bytes.Clone(long), lines(intent("b", "2", 1))...)...), "j:2: corrupt record: line longer than"},
		{"maxLine record", append(append(bytes.Clone(c1), commitOf(recordOfLen("max", maxLine))...), c2...), ""},
	}
	for _, tt := range cases {
		ref := referenceRead(tt.data)
		if !strings.HasPrefix(ref.err+ref.torn, tt.want) {
			t.Fatalf("%s: reference %.300v, want %q", tt.name, ref, tt.want)
		}
		for _, size := range []int{4096, 1 << 20, maxLine + 1, 2 << 20, 4 << 20} {
			for _, workers := range []int{0, 2} {
				if got := readAll(tt.data, size, workers); got.String() != ref.String() {
					t.Errorf("%s, blocks of %d, %d workers:\n got %.300v\nwant %.300v", tt.name, size, workers, got, ref)
				}
			}
		}
	}
}

// TestRepairAfterCommitWritesNoEmptyCommit: a torn tail cut back to a valid
// commit line leaves a file that ends in a commit line, so the writer's
// next commit is the only commit line it adds, and it verifies. A journal
// without commit lines cut back still gets its empty commit first.
func TestRepairAfterCommitWritesNoEmptyCommit(t *testing.T) {
	for _, tt := range []struct {
		name    string
		framed  bool
		commits int // commit lines the writer adds after the repair
	}{{"framed", true, 1}, {"without commit lines", false, 2}} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "j.jsonl")
			if tt.framed {
				writeCommits(t, path, 2)
			} else if err := os.WriteFile(path, lines(intent("b", "1", 1), refunded("b", "1")), 0o600); err != nil {
				t.Fatal(err)
			}
			f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			f.Write([]byte(`{"v":1,"ty`))
			f.Close()
			w, _, torn, err := Open(path, Options{})
			if err != nil || torn == nil {
				t.Fatalf("Open = torn %v, %v", torn, err)
			}
			if err := w.Append(refunded("b", "x")); err != nil {
				t.Fatal(err)
			}
			w.Close()
			data, _ := os.ReadFile(path)
			added := data[torn.Offset:]
			if n := bytes.Count(added, []byte(`"type":"commit"`)); n != tt.commits {
				t.Errorf("%d commit lines added after the repair, want %d:\n%s", n, tt.commits, added)
			}
			if !bytes.HasSuffix(added, commitOf(refunded("b", "x"))) {
				t.Errorf("the writer's commit is not its record and its commit line:\n%s", added)
			}
			st, torn, err := Load(path)
			if err != nil || torn != nil {
				t.Fatalf("Load = torn %v, %v", torn, err)
			}
			if _, ok := st.Lookup("b", "x"); !ok {
				t.Error("the appended record is not loaded")
			}
		})
	}
}

// TestMergeOrderSeesOnlyKeptRecords: a merge sorts an input in memory only
// when the records it keeps go back in time: a torn tail, left out, does
// not count. The same record kept (nothing torn after it) does.
func TestMergeOrderSeesOnlyKeptRecords(t *testing.T) {
	kept := append(commitOf(intent("t", "1", 2)), lines(intent("t", "0", 1))...) // back in time
	for _, tt := range []struct {
		name       string
		data       []byte
		records    int
		torn       bool
		outOfOrder bool
	}{
		{"torn after", append(bytes.Clone(kept), `{"v":1,"type":"int`...), 1, true, false},
		{"kept", kept, 2, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			in := filepath.Join(dir, "in.jsonl")
			if err := os.WriteFile(in, tt.data, 0o600); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			rep, err := Merge([]string{in}, &out)
			if err != nil {
				t.Fatal(err)
			}
			got := rep.Inputs[0]
			if got.Records != tt.records || (got.Torn != nil) != tt.torn || got.OutOfOrder != tt.outOfOrder {
				t.Errorf("input: %d records, torn %v, out of order %v; want %d, %v, %v", got.Records, got.Torn, got.OutOfOrder, tt.records, tt.torn, tt.outOfOrder)
			}
		})
	}
}

// TestMergeCatAndReappend: inputs cat'ed together (framed, unframed,
// framed) and one with a torn tail that goes back in time merge into a
// framed journal; a writer appends to it, a crash tears that append, and
// Open cuts exactly the torn append.
func TestMergeCatAndReappend(t *testing.T) {
	dir := t.TempDir()
	a := commitOf(intent("a", "1", 1), refunded("a", "1"))
	legacy := lines(intent("l", "1", 1), intent("l", "2", 2))
	b := commitOf(intent("b", "1", 3))
	catted := append(append(bytes.Clone(a), legacy...), b...)
	tornIn := append(commitOf(intent("t", "1", 2)), lines(intent("t", "0", 1))...)
	tornIn = append(tornIn, `{"v":1,"type":"int`...)
	p1, p2 := filepath.Join(dir, "cat.jsonl"), filepath.Join(dir, "torn.jsonl")
	os.WriteFile(p1, catted, 0o600)
	os.WriteFile(p2, tornIn, 0o600)
	out := filepath.Join(dir, "m.jsonl")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Merge([]string{p1, p2}, f)
	f.Close()
	if err != nil || rep.Records != 6 || rep.Inputs[1].Torn == nil || rep.Inputs[1].OutOfOrder {
		t.Fatalf("merge: %+v %v", rep, err)
	}
	w, st, torn, err := Open(out, Options{})
	if err != nil || torn != nil || st.Len() != 5 {
		t.Fatalf("Open: %v %v %d", err, torn, lenOf(st))
	}
	before, _ := os.ReadFile(out)
	if err := w.Append(refunded("t", "1"), refunded("t", "0")); err != nil {
		t.Fatal(err)
	}
	w.Close()
	after, _ := os.ReadFile(out)
	os.WriteFile(out, after[:len(after)-5], 0o600)
	w, _, torn, err = Open(out, Options{})
	if err != nil || torn == nil || torn.Offset != int64(len(before)) {
		t.Fatalf("reopen after a torn append: %v %v", err, torn)
	}
	w.Close()
}
