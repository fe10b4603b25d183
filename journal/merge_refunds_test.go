package journal

import (
	"bytes"
	"fmt"
	"io"
	"testing"
	"time"
)

// refundedAs is item's refunded record naming refund id.
func refundedAs(batch, item, id string, d time.Duration) *Record {
	r := at(refunded(batch, item), d)
	r.Refund = id
	return r
}

// A refund id is one item's: journals that credit one refund id to two
// items conflict (exit 1 in journal-merge), plain or compacting, and every
// record is kept. The same refund journaled again for its own item
// (replay, reconciled) is no conflict, nor is one item's id seen in a
// second journal.
func TestMergeRefundCreditedToTwoItems(t *testing.T) {
	a := lines(at(intent("b", "1", 1), 0), refundedAs("b", "1", "re_X", time.Second),
		at(intent("b", "3", 1), 2*time.Second), refundedAs("b", "3", "re_3", 3*time.Second))
	b := lines(at(intent("b", "2", 1), 4*time.Second), refundedAs("b", "2", "re_X", 5*time.Second),
		refundedAs("b", "3", "re_3", 6*time.Second), // i3's own, again
		refundedAs("c", "1", "re_X", 7*time.Second)) // another batch, the same item name
	paths := writeFiles(t, map[string][]byte{"a.jsonl": a, "b.jsonl": b})
	want := []Conflict{
		{Batch: "b", Item: "2", Reason: "refunded as re_X, which is the refund of item 1", First: paths[0] + ":2", Second: paths[1] + ":2"},
		{Batch: "c", Item: "1", Reason: "refunded as re_X, which is the refund of batch b item 1", First: paths[0] + ":2", Second: paths[1] + ":4"},
	}
	for _, compact := range []bool{false, true} {
		t.Run(fmt.Sprintf("compact=%v", compact), func(t *testing.T) {
			var out bytes.Buffer
			rep, err := MergeWith(paths, &out, MergeOptions{Compact: compact})
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(rep.Conflicts) != fmt.Sprint(want) {
				t.Errorf("conflicts:\n%v\nwant\n%v", rep.Conflicts, want)
			}
			if n := bytes.Count(out.Bytes(), []byte(`"refund":"re_X"`)); n != 3 {
				t.Errorf("%d records of re_X kept, want 3:\n%s", n, out.Bytes())
			}
		})
	}

	// Each journal alone, and a's twice: nothing shared.
	for _, ps := range [][]string{{paths[0]}, {paths[0], paths[0]}} {
		rep, err := Merge(ps, io.Discard)
		if err != nil || len(rep.Conflicts) != 0 {
			t.Errorf("merge %v: %v, conflicts %v", ps, err, rep.Conflicts)
		}
	}
}

// A second refund of an item (a conflict already) is numbered too: a third
// item credited with it conflicts with the item it was first credited to.
func TestMergeExtraRefundIsOneItemsToo(t *testing.T) {
	j := lines(refundedAs("b", "1", "re_1", 0), refundedAs("b", "1", "re_9", time.Second),
		refundedAs("b", "2", "re_9", 2*time.Second))
	paths := writeFiles(t, map[string][]byte{"a.jsonl": j})
	rep, err := Merge(paths, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := []Conflict{
		{Batch: "b", Item: "1", Reason: "refunded as re_1 and as re_9", First: paths[0] + ":1", Second: paths[0] + ":2"},
		{Batch: "b", Item: "2", Reason: "refunded as re_9, which is the refund of item 1", First: paths[0] + ":2", Second: paths[0] + ":3"},
	}
	if fmt.Sprint(rep.Conflicts) != fmt.Sprint(want) {
		t.Errorf("conflicts:\n%v\nwant\n%v", rep.Conflicts, want)
	}
}

// collidingItems hashes every string alike, so every refund id meets every
// other in the table: only the comparison of ids tells them apart.
type collidingItems struct{ plainItems }

func (collidingItems) HashItem(string) uint64 { return 42 }

// Refund ids are compared whenever their hashes meet: ids whose hashes
// collide are still told apart, and the table still grows past its first
// size.
func TestMergeRefundIDsCollide(t *testing.T) {
	items := collidingItems{plainItems{NewIndex[firstOutcomes]()}}
	c := &conflicts{paths: []string{"j"}}
	const n = 3000 // past the table's first 1024 slots
	for k := range n {
		o := outcome{batch: "b", item: fmt.Sprint(k), name: fmt.Sprintf("re_%d", k)}
		id, added := items.AddHashed(o.batch, o.item, items.HashItem(o.item))
		slotOf(items.Index, id, added)
		if c.checkItem(items, id, o, items.HashItem(o.name), location{0, k + 1}) {
			t.Fatalf("refund %s conflicts: %v", o.name, c.found)
		}
	}
	o := outcome{batch: "b", item: "late", name: "re_1234"}
	id, added := items.AddHashed(o.batch, o.item, items.HashItem(o.item))
	slotOf(items.Index, id, added)
	if !c.checkItem(items, id, o, items.HashItem(o.name), location{0, n + 1}) || len(c.found) != 1 ||
		c.found[0].Reason != "refunded as re_1234, which is the refund of item 1234" || c.found[0].First != "j:1235" {
		t.Errorf("conflicts %v, want re_1234 of item 1234 at j:1235", c.found)
	}
}
