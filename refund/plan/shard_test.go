package plan

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"testing"

	"github.com/refundkit/refundkit/refund"
)

func TestParseShard(t *testing.T) {
	tests := []struct {
		in      string
		k, n    int
		wantErr bool
	}{
		{in: "1/1", k: 1, n: 1},
		{in: "3/4", k: 3, n: 4},
		{in: "12/12", k: 12, n: 12},
		{in: "0/4", wantErr: true},
		{in: "5/4", wantErr: true},
		{in: "-1/4", wantErr: true},
		{in: "1/0", wantErr: true},
		{in: "1", wantErr: true},
		{in: "1/4/2", wantErr: true},
		{in: "a/4", wantErr: true},
		{in: " 1/4", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tt := range tests {
		k, n, err := ParseShard(tt.in)
		if (err != nil) != tt.wantErr || k != tt.k || n != tt.n {
			t.Errorf("ParseShard(%q) = %d, %d, %v; want %d, %d, error %v", tt.in, k, n, err, tt.k, tt.n, tt.wantErr)
		}
	}
}

func testItems(count int) []refund.Item {
	items := make([]refund.Item, count)
	for i := range items {
		id := fmt.Sprintf("ch_%07d", i)
		items[i] = refund.Item{Batch: "b1", Item: id, Charge: id}
	}
	return items
}

// TestShardPartition: for every N, the N shards are pairwise disjoint and
// their union, in input order, is the plan.
func TestShardPartition(t *testing.T) {
	items := testItems(1000)
	position := make(map[string]int)
	for i, it := range items {
		position[it.Item] = i
	}
	for n := 1; n <= 9; n++ {
		owner := make(map[string]int)
		for k := 1; k <= n; k++ {
			shard := Shard(items, k, n)
			if len(shard) == 0 {
				t.Errorf("shard %d/%d is empty over %d items", k, n, len(items))
			}
			for i, it := range shard {
				if i > 0 && position[it.Item] <= position[shard[i-1].Item] {
					t.Errorf("shard %d/%d is out of input order at %s", k, n, it.Item)
				}
				if prev, dup := owner[it.Item]; dup {
					t.Fatalf("item %s in shards %d/%d and %d/%d", it.Item, prev, n, k, n)
				}
				owner[it.Item] = k
				if !InShard(it.Batch, it.Target(), k, n) {
					t.Errorf("Shard put %s in %d/%d, InShard disagrees", it.Item, k, n)
				}
			}
		}
		if len(owner) != len(items) {
			t.Errorf("N=%d: shards hold %d items, the plan %d", n, len(owner), len(items))
		}
		for _, it := range items {
			if _, ok := owner[it.Item]; !ok {
				t.Errorf("N=%d: %s is in no shard", n, it.Item)
			}
		}
	}
}

// TestPlanShard: a plan's shards are the shards of its items, and hold
// items with their item ids, metadata and all.
func TestPlanShard(t *testing.T) {
	var in strings.Builder
	in.WriteString("charge,item,amount,metadata.k\n")
	for i := 0; i < 500; i++ {
		fmt.Fprintf(&in, "ch_%d,,,\nch_%d,,,v%d\n", 2*i, 2*i+1, i) // every other row with metadata
		if i%10 == 0 {
			fmt.Fprintf(&in, "ch_x%d,part-%d-a,1,\nch_x%d,part-%d-b,2,\n", i, i, i, i)
		}
	}
	p, err := Read(strings.NewReader(in.String()), "in", Options{Batch: "b1"})
	if err != nil {
		t.Fatal(err)
	}
	items := p.Items()
	for n := 1; n <= 5; n++ {
		for k := 1; k <= n; k++ {
			got := p.Shard(k, n)
			if got.Batch() != "b1" {
				t.Errorf("shard batch %q", got.Batch())
			}
			want := Shard(items, k, n)
			if g, w := encode(t, got.Items()), encode(t, want); g != w {
				t.Fatalf("Plan.Shard(%d, %d):\n%s\nShard:\n%s", k, n, g, w)
			}
		}
	}
}

// TestShardStable pins the hash: FNV-1a of batch, a zero byte and the
// target (charge or payment intent), as hash/fnv computes it, so every item
// of one charge is in one shard.
func TestShardStable(t *testing.T) {
	for _, it := range testItems(200) {
		h := fnv.New64a()
		h.Write([]byte(it.Batch + "\x00" + it.Target()))
		for _, n := range []int{1, 2, 3, 4, 7, 16} {
			want := int(h.Sum64()%uint64(n)) + 1
			if got := refund.ShardOf(it.Batch, it.Target(), n); got != want {
				t.Fatalf("shardOf(%s, %s, %d) = %d, want %d", it.Batch, it.Target(), n, got, want)
			}
		}
	}
	// The batch is part of the hash: ("a","bc") and ("ab","c") differ.
	if refund.ShardOf("a", "bc", 1<<30) == refund.ShardOf("ab", "c", 1<<30) {
		t.Error("batch and item are not kept apart in the hash")
	}
}

// TestShardOrderIndependent: an item's shard depends on it alone, not on
// where it is in the input or what else is there.
func TestShardOrderIndependent(t *testing.T) {
	items := testItems(300)
	rev := slices.Clone(items)
	slices.Reverse(rev)
	for k := 1; k <= 4; k++ {
		a := ids(Shard(items, k, 4))
		b := ids(Shard(rev, k, 4))
		slices.Reverse(b)
		if !slices.Equal(a, b) {
			t.Errorf("shard %d/4 depends on input order", k)
		}
		c := ids(Shard(items[:150], k, 4))
		if !slices.Equal(c, a[:len(c)]) {
			t.Errorf("shard %d/4 of a prefix is not a prefix of the shard", k)
		}
	}
}

func TestShardPanics(t *testing.T) {
	for _, kn := range [][2]int{{0, 1}, {2, 1}, {1, 0}, {-1, 3}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Shard(%d, %d) did not panic", kn[0], kn[1])
				}
			}()
			Shard(nil, kn[0], kn[1])
		}()
	}
}

func ids(items []refund.Item) []string {
	out := make([]string, len(items))
	for i := range items {
		out[i] = items[i].Item
	}
	return out
}

// TestShardKeepsAChargeTogether: two partial refunds of one charge go to one
// worker, so its look-ups see each other's refunds instead of holding one
// as another item's.
func TestShardKeepsAChargeTogether(t *testing.T) {
	var items []refund.Item
	for i := range 200 {
		ch := fmt.Sprintf("ch_%d", i/2) // two items a charge
		items = append(items, refund.Item{Batch: "b1", Item: fmt.Sprintf("row-%d", i), Charge: ch, Amount: 100})
	}
	for _, n := range []int{2, 3, 4, 7} {
		shardOfCharge := map[string]int{}
		for k := 1; k <= n; k++ {
			for _, it := range Shard(items, k, n) {
				if prev, ok := shardOfCharge[it.Charge]; ok && prev != k {
					t.Fatalf("n=%d: charge %s in shards %d and %d", n, it.Charge, prev, k)
				}
				shardOfCharge[it.Charge] = k
			}
		}
		if len(shardOfCharge) != 100 {
			t.Fatalf("n=%d: %d charges sharded, want 100", n, len(shardOfCharge))
		}
	}
}
