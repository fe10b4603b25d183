package journal

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// at returns r with its ts set to t0 plus d.
func at(r *Record, d time.Duration) *Record { r.Time = t0.Add(d); return r }

func writeFiles(t *testing.T, files map[string][]byte) []string {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range files {
			if !yield(n) {
				return
			}
		}
	}) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, files[name], 0o600); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

// referenceMerge is Merge as the notes define it, the slow and obvious way:
// every record of every input, stably sorted by ts, identical lines at one
// instant collapsed.
func referenceMerge(t *testing.T, paths []string) []byte {
	t.Helper()
	type entry struct {
		key  tsKey
		line string
	}
	var all []entry
	for _, p := range paths {
		data, _ := os.ReadFile(p)
		sc := NewScanner(bytes.NewReader(data), p)
		for sc.Scan() {
			line, err := MarshalLine(nil, sc.Record())
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, entry{keyOf(sc.Record().Time), string(line)})
		}
		if sc.Err() != nil {
			t.Fatal(sc.Err())
		}
	}
	slices.SortStableFunc(all, func(a, b entry) int {
		switch {
		case a.key.less(b.key):
			return -1
		case b.key.less(a.key):
			return 1
		}
		return 0
	})
	var out []byte
	for i, e := range all {
		dup := false
		for j := i - 1; j >= 0 && all[j].key == e.key; j-- {
			dup = dup || all[j].line == e.line
		}
		if !dup {
			out = append(out, e.line...)
		}
	}
	return out
}

func TestMergeShards(t *testing.T) {
	a := lines(at(intent("b", "1", 1), 0), at(intent("b", "3", 1), 2*time.Second), at(refunded("b", "1"), 4*time.Second))
	b := lines(at(intent("b", "2", 1), time.Second), at(refunded("b", "2"), 2*time.Second), at(refunded("b", "3"), 5*time.Second))
	paths := writeFiles(t, map[string][]byte{"a.jsonl": a, "b.jsonl": b})
	var out bytes.Buffer
	rep, err := Merge(paths, &out)
	if err != nil {
		t.Fatal(err)
	}
	want := lines(at(intent("b", "1", 1), 0), at(intent("b", "2", 1), time.Second),
		at(intent("b", "3", 1), 2*time.Second), // a before b at the same ts
		at(refunded("b", "2"), 2*time.Second),
		at(refunded("b", "1"), 4*time.Second), at(refunded("b", "3"), 5*time.Second))
	if !bytes.Equal(merged(t, &out), want) {
		t.Errorf("merged:\n%s\nwant\n%s", out.Bytes(), want)
	}
	if rep.Records != 6 || rep.Duplicates != 0 || len(rep.Conflicts) != 0 || rep.Inputs[0].Records != 3 || rep.Inputs[1].Records != 3 {
		t.Errorf("report %+v", rep)
	}
}

func TestMergeCollapsesDuplicates(t *testing.T) {
	j := lines(at(intent("b", "1", 1), 0), at(intent("b", "2", 1), 0), at(refunded("b", "1"), time.Second), at(refunded("b", "2"), time.Second))
	// The same journal twice, once with its records re-spaced (not
	// canonical, same records).
	spaced := bytes.ReplaceAll(j, []byte(`"v":1,`), []byte(`"v": 1, `))
	paths := writeFiles(t, map[string][]byte{"a.jsonl": j, "b.jsonl": spaced, "c.jsonl": j})
	var out bytes.Buffer
	rep, err := Merge(paths, &out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(merged(t, &out), j) {
		t.Errorf("merged:\n%s\nwant\n%s", out.Bytes(), j)
	}
	if rep.Records != 4 || rep.Duplicates != 8 {
		t.Errorf("report %+v, want 4 records and 8 duplicates", rep)
	}
}

func TestMergeTornTail(t *testing.T) {
	a := lines(at(intent("b", "1", 1), 0), at(refunded("b", "1"), time.Second))
	a = a[:len(a)-20]
	b := lines(at(intent("b", "2", 1), 0))
	paths := writeFiles(t, map[string][]byte{"a.jsonl": a, "b.jsonl": b})
	var out bytes.Buffer
	rep, err := Merge(paths, &out)
	if err != nil {
		t.Fatal(err)
	}
	if want := lines(at(intent("b", "1", 1), 0), at(intent("b", "2", 1), 0)); !bytes.Equal(merged(t, &out), want) {
		t.Errorf("merged:\n%s\nwant\n%s", out.Bytes(), want)
	}
	tn := rep.Inputs[0].Torn
	if tn == nil || tn.Line != 2 || tn.Path != paths[0] || rep.Inputs[1].Torn != nil {
		t.Errorf("torn = %v, %v", tn, rep.Inputs[1].Torn)
	}
}

func TestMergeRefusesCorruption(t *testing.T) {
	good := lines(at(intent("b", "1", 1), 0), at(refunded("b", "1"), time.Second))
	for _, tt := range []struct {
		name string
		bad  []byte
		want string
	}{
		{"garbage", append(append(lines(at(intent("b", "2", 1), 0)), "garbage\n"...), lines(at(refunded("b", "2"), time.Second))...), "b.jsonl:2: corrupt record: not JSON"},
		{"version", append(lines(at(intent("b", "2", 1), 0)), `{"v":2,"type":"refunded"}`+"\n"...), "b.jsonl:2: record version 2"},
		{"invalid", append(lines(at(intent("b", "2", 1), 0)), `{"v":1,"type":"refunded","ts":"2024-05-01T12:00:00Z","batch":"b","item":"2"}`+"\n"...), "b.jsonl:2: corrupt record: refunded record without refund id"},
	} {
		for _, order := range []string{"in order", "out of order"} {
			t.Run(tt.name+"/"+order, func(t *testing.T) {
				bad, want := tt.bad, tt.want
				if order == "out of order" {
					bad = append(lines(at(intent("b", "9", 1), time.Hour)), bad...)
					want = strings.Replace(want, "b.jsonl:2:", "b.jsonl:3:", 1)
				}
				paths := writeFiles(t, map[string][]byte{"a.jsonl": good, "b.jsonl": bad})
				var out bytes.Buffer
				_, err := Merge(paths, &out)
				if err == nil || !strings.HasPrefix(err.Error(), filepath.Join(filepath.Dir(paths[0]), want)) {
					t.Fatalf("Merge = %v, want %q", err, want)
				}
				if !errors.As(err, new(*CorruptError)) && !errors.As(err, new(*VersionError)) {
					t.Errorf("error %T is neither corrupt nor version", err)
				}
			})
		}
	}
}

func TestMergeConflicts(t *testing.T) {
	other := func(r *Record, id string) *Record { r.Refund = id; return r }
	replay := func(r *Record) *Record { r.Source = SourceReplay; return r }
	ended := func(r *Record) *Record { r.Refund = "re_5"; r.Code = "refund_failed"; return r }
	a := lines(at(refunded("b", "1"), 0), at(failed("b", "2", 1, 402, true), 0), at(refunded("b", "3"), 0), at(refunded("b", "4"), 0),
		at(pendingRefund("b", "5"), 0))
	b := lines(
		at(other(refunded("b", "1"), "re_other"), time.Second), // two refunds
		at(refunded("b", "2"), time.Second),                    // refunded after failing for good
		at(failed("b", "3", 1, 402, true), time.Second),        // failed after refunded
		at(replay(refunded("b", "4")), time.Second),            // the same refund again: fine
		at(ended(failed("b", "5", 1, 0, true)), time.Second),   // the pending refund failed at the provider: fine
	)
	paths := writeFiles(t, map[string][]byte{"a.jsonl": a, "b.jsonl": b})
	var out bytes.Buffer
	rep, err := Merge(paths, &out)
	if err != nil {
		t.Fatal(err)
	}
	if got := merged(t, &out); !bytes.Equal(got, append(append([]byte(nil), a...), b...)) {
		t.Errorf("conflicting records must all be kept; got\n%s", got)
	}
	want := []Conflict{
		{Batch: "b", Item: "1", Reason: "refunded as re_1 and as re_other", First: paths[0] + ":1", Second: paths[1] + ":1"},
		{Batch: "b", Item: "2", Reason: "refunded as re_2 after failing for good (card_declined)", First: paths[0] + ":2", Second: paths[1] + ":2"},
		{Batch: "b", Item: "3", Reason: "failed for good (card_declined) after being refunded as re_3", First: paths[0] + ":3", Second: paths[1] + ":3"},
	}
	if fmt.Sprint(rep.Conflicts) != fmt.Sprint(want) {
		t.Errorf("conflicts:\n%v\nwant\n%v", rep.Conflicts, want)
	}
	if s := want[0].String(); s != paths[1]+":1: batch b item 1: refunded as re_1 and as re_other (first at "+paths[0]+":1)" {
		t.Errorf("String() = %s", s)
	}
}

func TestMergeOutOfOrderInput(t *testing.T) {
	// A group commit may write a later-stamped record first.
	a := lines(at(intent("b", "2", 1), 2*time.Second), at(intent("b", "1", 1), time.Second), at(refunded("b", "1"), 3*time.Second))
	b := lines(at(intent("b", "3", 1), time.Second))
	paths := writeFiles(t, map[string][]byte{"a.jsonl": a, "b.jsonl": b})
	var out bytes.Buffer
	rep, err := Merge(paths, &out)
	if err != nil {
		t.Fatal(err)
	}
	want := lines(at(intent("b", "1", 1), time.Second), at(intent("b", "3", 1), time.Second), at(intent("b", "2", 1), 2*time.Second), at(refunded("b", "1"), 3*time.Second))
	if !bytes.Equal(merged(t, &out), want) {
		t.Errorf("merged:\n%s\nwant\n%s", out.Bytes(), want)
	}
	if !rep.Inputs[0].OutOfOrder || rep.Inputs[1].OutOfOrder || rep.Inputs[0].Records != 3 {
		t.Errorf("inputs %+v", rep.Inputs)
	}
}

// TestMergeMatchesReference merges random journals (shuffled, duplicated,
// respaced, torn, with ts ties and zones) and compares with referenceMerge.
func TestMergeMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for round := range 40 {
		files := map[string][]byte{}
		for f := range 1 + rng.IntN(5) {
			var recs []*Record
			for range rng.IntN(40) {
				item := fmt.Sprint(rng.IntN(10))
				var r *Record
				switch rng.IntN(3) {
				case 0:
					r = intent("b", item, 1+rng.IntN(2))
				case 1:
					r = refunded("b", item)
				default:
					r = failed("b", item, 1, 500, rng.IntN(3) == 0)
				}
				r.Time = t0.Add(time.Duration(rng.IntN(20)) * time.Second)
				if rng.IntN(8) == 0 {
					r.Time = r.Time.In(time.FixedZone("", 3600))
				}
				recs = append(recs, r)
			}
			if rng.IntN(2) == 0 {
				slices.SortStableFunc(recs, func(a, b *Record) int { return a.Time.Compare(b.Time) })
			}
			data := lines(recs...)
			if rng.IntN(4) == 0 {
				data = bytes.ReplaceAll(data, []byte(`,"item"`), []byte(`, "item"`))
			}
			if rng.IntN(4) == 0 && len(data) > 0 {
				data = data[:len(data)-1-rng.IntN(10)]
			}
			files[fmt.Sprintf("%d.jsonl", f)] = data
		}
		paths := writeFiles(t, files)
		var out bytes.Buffer
		if _, err := Merge(paths, &out); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if want := referenceMerge(t, paths); !bytes.Equal(merged(t, &out), want) {
			t.Fatalf("round %d: merged\n%s\nreference\n%s", round, out.Bytes(), want)
		}
	}
}

// TestMergeCompact: the compacted journal gives every item the state that
// matters: refunded with its refund, failed with its code, and for items in
// doubt the attempt, its key's age and burn, amount and code, exactly.
func TestMergeCompact(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for round := range 60 {
		var recs []*Record
		for range 5 + rng.IntN(60) {
			item := fmt.Sprint(rng.IntN(8))
			var r *Record
			switch rng.IntN(5) {
			case 0, 1:
				r = intent("b", item, 1+rng.IntN(3))
				r.Amount = int64(rng.IntN(3))
			case 2:
				r = failed("b", item, 1+rng.IntN(3), []int{0, 429, 500, 503}[rng.IntN(4)], false)
				r.Code = fmt.Sprint("c", rng.IntN(3))
			case 3:
				r = failed("b", item, 1+rng.IntN(3), 402, rng.IntN(2) == 0)
			default:
				if rng.IntN(3) == 0 {
					r = refunded("b", item)
				} else {
					r = intent("b", item, 1)
				}
			}
			// Mostly rising clocks, sometimes a step back.
			r.Time = t0.Add(time.Duration(len(recs)-rng.IntN(3)*rng.IntN(2)) * time.Second)
			recs = append(recs, r)
		}
		slices.SortStableFunc(recs, func(a, b *Record) int { return a.Time.Compare(b.Time) })
		recs = append(recs, &Record{V: 1, Type: TypeCanceled, Time: t0.Add(time.Hour), Batch: "b", Item: "x", Refund: "re_extra"})
		paths := writeFiles(t, map[string][]byte{"j.jsonl": lines(recs...)})
		var full, compact bytes.Buffer
		if _, err := Merge(paths, &full); err != nil {
			t.Fatal(err)
		}
		rep, err := MergeWith(paths, &compact, MergeOptions{Compact: true})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Records+rep.Compacted+rep.Duplicates != len(recs) || !bytes.Contains(compact.Bytes(), []byte("re_extra")) {
			t.Fatalf("round %d: %d written + %d compacted, want %d; canceled kept: %v", round, rep.Records, rep.Compacted, len(recs), bytes.Contains(compact.Bytes(), []byte("re_extra")))
		}
		merged(t, &compact)
		want := stateOf(t, full.Bytes())
		got := stateOf(t, compact.Bytes())
		if got.Len() != want.Len() {
			t.Fatalf("round %d: %d items after compaction, want %d", round, got.Len(), want.Len())
		}
		want.Each(func(batch, item string, w ItemState) {
			g, _ := got.Lookup(batch, item)
			if g != w {
				t.Fatalf("round %d: item %s compacted to %+v, want %+v\n%s\ncompact:\n%s", round, item, g, w, full.Bytes(), compact.Bytes())
			}
		})
		if len(rep.Conflicts) == 0 && rep.Records > got.Len()+countInDoubtRecords(t, compact.Bytes(), got)+1 {
			t.Fatalf("round %d: %d records kept for %d items", round, rep.Records, got.Len())
		}
	}
}

// countInDoubtRecords counts records of items in doubt, which may keep
// several.
func countInDoubtRecords(t *testing.T, data []byte, st *State) int {
	n := 0
	sc := NewScanner(bytes.NewReader(data), "compact")
	for sc.Scan() {
		if s, _ := st.Lookup(sc.Record().Batch, sc.Record().Item); s.Status == StatusInDoubt {
			n++
		}
	}
	return n
}

// merged checks that a merge's output is a framed journal: it reads
// cleanly, every record in it is in a commit, and it ends in a commit line
// (unless empty). It returns the record lines.
func merged(t *testing.T, out *bytes.Buffer) []byte {
	t.Helper()
	data := out.Bytes()
	var recs []byte
	for line := range bytes.Lines(data) {
		if _, _, isCommit, _ := parseCommit(line); !isCommit {
			recs = append(recs, line...)
		}
	}
	l, err := load(bytes.NewReader(data), "merged", ReadOptions{})
	if err != nil || l.torn != nil || (len(data) > 0 && !l.framed) {
		t.Fatalf("merge output: %v, torn %v, framed %v:\n%s", err, l.torn, l.framed, data)
	}
	// A commit line checks the record lines before it: one after the last
	// commit line would be unframed.
	if last := bytes.LastIndex(data, []byte(`{"v":1,"type":"commit",`)); len(data) > 0 && bytes.IndexByte(data[last:], '\n') != len(data)-last-1 {
		t.Fatalf("merge output does not end in a commit line:\n%s", data)
	}
	return recs
}

func stateOf(t *testing.T, data []byte) *State {
	t.Helper()
	l, err := load(bytes.NewReader(data), "merged", ReadOptions{})
	if err != nil || l.torn != nil {
		t.Fatalf("merged journal: %v %v", err, l.torn)
	}
	return l.state
}
