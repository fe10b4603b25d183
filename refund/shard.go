package refund

// Shards: a fixed partition of a plan's items by payment, for workers with
// a journal each. plan --shard writes one shard; refund --shard reads the
// whole plan and works one, so that every worker knows every item.

import "hash/fnv"

// Shard is shard K of N (1 <= K <= N); the zero Shard is the whole plan.
type Shard struct{ K, N int }

// Holds reports whether it falls in shard s.
func (s Shard) Holds(it *Item) bool {
	return s.N == 0 || ShardOf(it.Batch, it.Target(), s.N) == s.K
}

// ShardOf is the 1-based shard, of n, of the items of batch on target (a
// payment's id): FNV-1a of batch, a zero byte (("a", "bc") is not ("ab",
// "c")) and target, modulo n. From the id string: a payment named by its
// charge and by its intent can fall in two shards.
func ShardOf(batch, target string, n int) int {
	h := fnv.New64a()
	h.Write([]byte(batch))
	h.Write([]byte{0})
	h.Write([]byte(target))
	return int(h.Sum64()%uint64(n)) + 1
}
