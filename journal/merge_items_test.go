package journal

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestMergeTellsItemsApart: items are told apart by (batch, item), not by
// a joined string: batch "a\x00" item "b" and batch "a" item "\x00b" are
// two items, whose refunds do not conflict and whose records compaction
// folds each on its own.
func TestMergeTellsItemsApart(t *testing.T) {
	one := func(batch, item, refund string, d time.Duration) []*Record {
		i1, f, i2, r := intent(batch, item, 1), failed(batch, item, 1, 500, false), intent(batch, item, 2), refunded(batch, item)
		r.Refund = refund
		return []*Record{at(i1, d), at(f, d+time.Second), at(i2, d+2*time.Second), at(r, d+3*time.Second)}
	}
	a, b := one("a\x00", "b", "re_1", 0), one("a", "\x00b", "re_2", 10*time.Second)
	paths := writeFiles(t, map[string][]byte{"a.jsonl": lines(a...), "b.jsonl": lines(b...)})
	var out, compact bytes.Buffer
	rep, err := Merge(paths, &out)
	if err != nil || len(rep.Conflicts) != 0 {
		t.Fatalf("Merge: %v, conflicts %v", err, rep.Conflicts)
	}
	rep, err = MergeWith(paths, &compact, MergeOptions{Compact: true})
	if err != nil || len(rep.Conflicts) != 0 {
		t.Fatalf("MergeWith compact: %v, conflicts %v", err, rep.Conflicts)
	}
	if want := lines(a[2], a[3], b[2], b[3]); !bytes.Equal(merged(t, &compact), want) {
		t.Errorf("compacted:\n%s\nwant\n%s", compact.Bytes(), want)
	}
}

// TestMergeCompactKeeps pins which records compaction keeps of one item's
// history (numbered 1.. in ts order): the same records, whatever finds them.
func TestMergeCompactKeeps(t *testing.T) {
	sent := func(r *Record, amount int64) *Record { r.Amount = amount; return r }
	refundAs := func(id string) *Record { r := refunded("b", "i"); r.Refund = id; return r }
	code := func(r *Record, c string) *Record { r.Code = c; return r }
	for _, tt := range []struct {
		name string
		recs []*Record
		keep []int
	}{
		{"refunded keeps the intent sent", []*Record{intent("b", "i", 1), failed("b", "i", 1, 429, false), refunded("b", "i")}, []int{1, 3}},
		{"the last intent of the attempt binds", []*Record{intent("b", "i", 1), sent(intent("b", "i", 1), 500), refunded("b", "i")}, []int{2, 3}},
		{"an older attempt's intent does not bind", []*Record{intent("b", "i", 2), intent("b", "i", 1), refunded("b", "i")}, []int{1, 3}},
		{"the first refund is the one kept", []*Record{intent("b", "i", 1), refunded("b", "i"), at(refunded("b", "i"), 2*time.Minute)}, []int{1, 2}},
		{"nothing after the refund binds", []*Record{intent("b", "i", 1), refunded("b", "i"), intent("b", "i", 2), failed("b", "i", 2, 500, false)}, []int{1, 2}},
		{"failed keeps its last final failure", []*Record{intent("b", "i", 1), failed("b", "i", 1, 402, true), intent("b", "i", 2), code(failed("b", "i", 2, 402, true), "expired")}, []int{3, 4}},
		{"in doubt keeps its attempt on", []*Record{intent("b", "i", 1), failed("b", "i", 1, 500, false), intent("b", "i", 2), failed("b", "i", 2, 502, false)}, []int{3, 4}},
		{"in doubt keeps the failure before its attempt", []*Record{intent("b", "i", 1), failed("b", "i", 1, 500, false), intent("b", "i", 2)}, []int{2, 3}},
		{"in doubt without an intent keeps all", []*Record{failed("b", "i", 1, 500, false), failed("b", "i", 1, 429, false)}, []int{1, 2}},
		{"a conflict keeps all", []*Record{intent("b", "i", 1), refundAs("re_1"), at(refundAs("re_2"), 2*time.Minute)}, []int{1, 2, 3}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for i, r := range tt.recs {
				r.Time = t0.Add(time.Duration(i) * time.Second)
			}
			paths := writeFiles(t, map[string][]byte{"j.jsonl": lines(tt.recs...)})
			var out bytes.Buffer
			if _, err := MergeWith(paths, &out, MergeOptions{Compact: true}); err != nil {
				t.Fatal(err)
			}
			var want []*Record
			for _, k := range tt.keep {
				want = append(want, tt.recs[k-1])
			}
			if got := merged(t, &out); !bytes.Equal(got, lines(want...)) {
				t.Errorf("kept\n%s\nwant records %v:\n%s", got, tt.keep, lines(want...))
			}
		})
	}
}

// TestCompactItemFollowsNext: what compaction keeps of an item's state
// (its status and attempt) is what State holds after every record: learn
// calls Next on those two fields alone, which must be all Next reads to
// decide them.
func TestCompactItemFollowsNext(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for round := range 200 {
		st := NewState()
		var ci compactItem
		var trail strings.Builder
		for seq := 1; seq < 40; seq++ {
			var r *Record
			switch rng.IntN(5) {
			case 0, 1:
				r = intent("b", "i", 1+rng.IntN(3))
			case 2:
				r = failed("b", "i", 1+rng.IntN(3), []int{429, 500, 502}[rng.IntN(3)], false)
			case 3:
				r = failed("b", "i", 1+rng.IntN(3), 402, true)
			default:
				r = refunded("b", "i")
			}
			if rng.IntN(4) == 0 {
				r.Type = TypeCanceled
			}
			fmt.Fprintf(&trail, " %s/%d", r.Type, r.Attempt)
			st.Apply(r)
			ci.learn(r, seq)
			want, _ := st.Lookup("b", "i")
			if ci.status != want.Status || ci.attempt != want.Attempt {
				t.Fatalf("round %d after%s: status %v attempt %d, State has %v %d", round, trail.String(), ci.status, ci.attempt, want.Status, want.Attempt)
			}
		}
	}
}

// TestMergeConflictsAcrossBatches: outcomes are checked a batch at a time
// beside the merge; conflicts still come in merge order, whatever batch
// holds the first outcome and whichever the second.
func TestMergeConflictsAcrossBatches(t *testing.T) {
	const items = 5*outcomeBatchSize/2 + 77 // the last batch is not full
	var a, b []*Record
	var want []string
	for i := range items {
		item := fmt.Sprint(i)
		a = append(a, at(refunded("b", item), time.Duration(i)*time.Millisecond))
		r := at(refunded("b", item), time.Duration(items+i)*time.Millisecond)
		if i%7 == 3 {
			r.Refund = "re_other" + item // one refund id is one item's
			want = append(want, fmt.Sprintf("b.jsonl:%d: batch b item %d: refunded as re_%d and as re_other%d (first at a.jsonl:%d)", i+1, i, i, i, i+1))
		}
		b = append(b, r)
	}
	paths := writeFiles(t, map[string][]byte{"a.jsonl": lines(a...), "b.jsonl": lines(b...)})
	for _, compact := range []bool{false, true} {
		rep, err := MergeWith(paths, io.Discard, MergeOptions{Compact: compact})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, c := range rep.Conflicts {
			got = append(got, strings.ReplaceAll(c.String(), filepath.Dir(paths[0])+string(filepath.Separator), ""))
		}
		if !slices.Equal(got, want) {
			t.Errorf("compact %v: %d conflicts, want %d; first %q, want %q", compact, len(got), len(want), got[:min(1, len(got))], want[0])
		}
	}
}

// TestMergeTwinsAcrossSpans: a journal merged with its copy collapses
// every record into one, also where a record ends its input's span and
// its twin, in the other input, comes after that input moved on to the
// next span (the line compared must be a copy by then).
func TestMergeTwinsAcrossSpans(t *testing.T) {
	dir := t.TempDir()
	a := filepath.Join(dir, "a.jsonl")
	n := writeBigJournal(t, a, 30_000, true, 0)
	data, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	b := filepath.Join(dir, "b.jsonl")
	if err := os.WriteFile(b, data, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, compact := range []bool{false, true} {
		var out bytes.Buffer
		rep, err := MergeWith([]string{a, b}, &out, MergeOptions{Compact: compact})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Duplicates != n || rep.Records+rep.Compacted != n || len(rep.Conflicts) != 0 {
			t.Fatalf("compact %v: %d records, %d compacted, %d duplicates, %d conflicts; want %d and %d duplicates", compact, rep.Records, rep.Compacted, rep.Duplicates, len(rep.Conflicts), n, n)
		}
		if !compact && !bytes.Equal(merged(t, &out), data) {
			t.Fatal("merged journal is not the journal")
		}
	}
}

// TestDedupGroupHoldsLines: the group's one line is held where its source
// keeps it and copied when a second line of the instant comes or before
// its source lets it go; a line that is not stable is copied at once.
func TestDedupGroupHoldsLines(t *testing.T) {
	k := keyOf(t0)
	a, b := &mergeSource{}, &mergeSource{}
	for _, tt := range []struct {
		name    string
		stable  bool
		release *mergeSource // released before the source reuses its buffer
		twin    bool         // the second line is found a twin
	}{
		{"released", true, a, true},
		{"not stable", false, nil, true},
		{"another source released", true, b, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var g dedupGroup
			line := []byte(`{"v":1,"type":"refunded"}`)
			if g.seen(k, line, a, tt.stable) {
				t.Fatal("first line seen before")
			}
			if tt.release != nil {
				g.release(tt.release)
			}
			copy(line, "XXXXXXXXXX") // the source reuses its buffer
			if got := g.seen(k, []byte(`{"v":1,"type":"refunded"}`), b, true); got != tt.twin {
				t.Errorf("twin found: %v, want %v", got, tt.twin)
			}
		})
	}
}
