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
// payment intent, capture or psp_reference id) fall in shard k of n. The
// partition is a hash of batch and target only: the same on every run and
// machine, and independent of the input's order, so N workers given the
// same plan and the same N take disjoint shards that together make the
// whole plan, and every item of one payment (two partial refunds of a
// charge or capture) goes to the same worker, whose look-ups then see
// each other's refunds.
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

// shardOf is the 1-based shard of a target (refund.ShardOf, the one
// partition plan and refund --shard share).
func shardOf(batch, target string, n int) int { return refund.ShardOf(batch, target, n) }

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

// MixedPayments reports a plan that names payments both by charge and by
// payment intent, with the first line of each: such a plan cannot be
// split offline, since a charge and its payment intent are one payment
// whose ids hash to two shards (refund --shard splits it instead, each
// worker reading the whole plan).
func (p *Plan) MixedPayments() (chargeLine, intentLine int, mixed bool) {
	for i := 0; i < p.n && (chargeLine == 0 || intentLine == 0); i++ {
		switch e := p.at(i); {
		case e.flags&entryIntent != 0:
			if intentLine == 0 {
				intentLine = int(e.line)
			}
		case e.flags&kindFlags == 0:
			if chargeLine == 0 {
				chargeLine = int(e.line)
			}
		}
	}
	return chargeLine, intentLine, chargeLine > 0 && intentLine > 0
}

// Shard returns the plan of shard k of n: the items for which InShard
// holds, in input order. It shares the items' strings with p. It panics
// unless 1 <= k <= n.
func (p *Plan) Shard(k, n int) *Plan {
	if k < 1 || k > n {
		panic(fmt.Sprintf("plan: shard %d/%d", k, n))
	}
	out := &Plan{batch: p.batch, currencies: p.currencies, delimiter: p.delimiter}
	for i := 0; i < p.n; i++ {
		e := p.at(i)
		if shardOf(p.batch, e.target, n) == k {
			out.add(*e)
		}
	}
	return out
}
