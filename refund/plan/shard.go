package plan

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/refundkit/refundkit/refund"
)

// ParseShard parses "K/N", shard K of N with 1 <= K <= N.
func ParseShard(s string) (k, n int, err error) {
	ks, ns, ok := strings.Cut(s, "/")
	if ok {
		k, err = strconv.Atoi(ks)
		if err == nil {
			n, err = strconv.Atoi(ns)
		}
	}
	if !ok || err != nil || k < 1 || k > n {
		return 0, 0, fmt.Errorf("shard %s: want K/N with 1 <= K <= N, such as 1/4", refund.Show(s))
	}
	return k, n, nil
}

// InShard reports whether the items of a batch on target (a charge,
// payment intent or capture id) fall in shard k of n. The partition is a
// hash of batch and target only: the same on every run and machine, and
// independent of the input's order, so N workers given the same plan and
// the same N take disjoint shards that together make the whole plan, and
// every item of one payment (two partial refunds of a charge or capture)
// goes to the same worker, whose look-ups then see each other's refunds.
// It panics unless 1 <= k <= n.
//
// Releases before it split by item id. An item that moves to another shard
// is safe (its worker looks its charge up before any call and adopts its
// refund), but it is best not to change the partition again.
func InShard(batch, target string, k, n int) bool {
	if k < 1 || k > n {
		panic(fmt.Sprintf("plan: shard %d/%d", k, n))
	}
	return shardOf(batch, target, n) == k
}

// shardOf is the 1-based shard of a target: FNV-1a (64-bit) of batch, a
// zero byte and target, modulo n. The zero byte keeps ("a", "bc") and
// ("ab", "c") apart; neither id may contain one.
func shardOf(batch, item string, n int) int {
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
	)
	h := uint64(offset64)
	for i := 0; i < len(batch); i++ {
		h = (h ^ uint64(batch[i])) * prime64
	}
	h *= prime64 // the separator: h ^ 0 is h
	for i := 0; i < len(item); i++ {
		h = (h ^ uint64(item[i])) * prime64
	}
	return int(h%uint64(n)) + 1
}

// Shard returns the items of shard k of n, in their input order, in a new
// slice: Plan.Shard for items from elsewhere, such as a plan file read
// back. It panics unless 1 <= k <= n.
func Shard(items []refund.Item, k, n int) []refund.Item {
	if k < 1 || k > n {
		panic(fmt.Sprintf("plan: shard %d/%d", k, n))
	}
	var out []refund.Item
	for _, it := range items {
		if shardOf(it.Batch, it.Target(), n) == k {
			out = append(out, it)
		}
	}
	return out
}

// Shard returns the plan of shard k of n: the items for which InShard
// holds, in input order. It shares the items' strings with p. It panics
// unless 1 <= k <= n.
func (p *Plan) Shard(k, n int) *Plan {
	if k < 1 || k > n {
		panic(fmt.Sprintf("plan: shard %d/%d", k, n))
	}
	out := &Plan{batch: p.batch, currencies: p.currencies}
	for i := 0; i < p.n; i++ {
		e := p.at(i)
		if shardOf(p.batch, e.target, n) == k {
			out.add(*e)
		}
	}
	return out
}
