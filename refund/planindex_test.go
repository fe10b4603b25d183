package refund

import (
	"fmt"
	"testing"
)

// TestPlanIndexGrows checks the plan index across its table's growth: every
// item listed twice names the line of its first listing, and on tells an
// item's own target from another.
func TestPlanIndexGrows(t *testing.T) {
	p := newPlanIndex()
	const n = 5000 // several doublings of the table
	for i := range n {
		it := Item{Batch: "b", Item: fmt.Sprintf("i%d", i), Charge: fmt.Sprintf("ch_%d", i)}
		if prev, dup := p.add(&it, i+1); dup {
			t.Fatalf("item %d: a duplicate of line %d", i, prev)
		}
	}
	for i := range n {
		it := Item{Batch: "b", Item: fmt.Sprintf("i%d", i), Charge: "ch_other"}
		if prev, dup := p.add(&it, n+1+i); !dup || prev != i+1 {
			t.Fatalf("item %d again: prev %d dup %v, want line %d", i, prev, dup, i+1)
		}
		own, _ := p.on("b", it.Item, "pi_x", fmt.Sprintf("ch_%d", i))
		other, listed := p.on("b", it.Item, "ch_other")
		batch, inBatch := p.on("c", it.Item, fmt.Sprintf("ch_%d", i))
		if !own || other || !listed || batch || inBatch {
			t.Fatalf("item %d: on is wrong: own %v, other %v (listed %v), other batch %v (listed %v)", i, own, other, listed, batch, inBatch)
		}
	}
	if on, listed := p.on("b", "missing", "ch_0"); on || listed {
		t.Fatal("on holds an item never listed")
	}
}
