package refund

// Shards: a fixed partition of a plan's items by payment, for workers with
// a journal each. plan --shard writes one shard; refund --shard reads the
// whole plan and works one, so that every worker knows every item.

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
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
	)
	h := uint64(offset64)
	for i := 0; i < len(batch); i++ {
		h = (h ^ uint64(batch[i])) * prime64
	}
	h *= prime64 // the separator: h ^ 0 is h
	for i := 0; i < len(target); i++ {
		h = (h ^ uint64(target[i])) * prime64
	}
	return int(h%uint64(n)) + 1
}
