package plan

import (
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"

	"github.com/refundkit/refundkit/refund"
)

// Plan is a validated list of plan items of one batch, in input order, 40
// bytes an item plus its id (a refund.Item takes 128).
type Plan struct {
	batch      string
	entries    [][]entry // chunks of chunkSize: growing never copies the plan
	n          int
	currencies []string // interned codes; entry.currency indexes it, 0 is none
	delimiter  rune     // of the CSV input; 0: not CSV
}

// entry is one item as Plan stores it.
type entry struct {
	target   string // charge, payment intent, capture or psp_reference id; the item id too unless extra.item is set
	amount   int64
	extra    *extra // nil unless the item id differs from the target or the row has metadata
	line     int32  // input line, for messages about later duplicates
	currency uint16 // index into Plan.currencies
	reason   uint8  // 1 + index into refund.Reasons; 0 is none
	flags    uint8
}

// entry flags
const (
	entryIntent       = 1 << iota // the target is a payment intent
	entryCapture                  // the target is a capture
	entryPSPReference             // the target is a psp_reference; none of the three: a charge
	entryExplicit                 // the input gave the item id, which may equal the target
)

// kindFlags are the flags that say what the target is.
const kindFlags = entryIntent | entryCapture | entryPSPReference

type extra struct {
	item     string // item id, when not the target's
	metadata map[string]string
}

func (e *entry) item() string {
	if e.extra != nil && e.extra.item != "" {
		return e.extra.item
	}
	return e.target
}

func (e *entry) explicit() bool { return e.flags&entryExplicit != 0 }

const (
	chunkBits = 12
	chunkSize = 1 << chunkBits
)

func newPlan(batch string) *Plan {
	return &Plan{batch: batch, currencies: []string{""}}
}

func (p *Plan) add(e entry) int {
	if p.n%chunkSize == 0 {
		p.entries = append(p.entries, make([]entry, 0, chunkSize))
	}
	last := &p.entries[len(p.entries)-1]
	*last = append(*last, e)
	p.n++
	return p.n - 1
}

func (p *Plan) at(i int) *entry { return &p.entries[i>>chunkBits][i&(chunkSize-1)] }

// Batch is the batch of every item.
func (p *Plan) Batch() string { return p.batch }

// Delimiter is the delimiter of the CSV input, given or told from its
// header row; 0 when the input was not CSV.
func (p *Plan) Delimiter() rune { return p.delimiter }

// Len is the number of items.
func (p *Plan) Len() int { return p.n }

// Item returns item i (0 <= i < Len). Its Metadata map is shared with the
// plan: read it, do not change it.
func (p *Plan) Item(i int) refund.Item {
	e := p.at(i)
	it := refund.Item{Batch: p.batch, Item: e.item(), Amount: e.amount, Currency: p.currencies[e.currency]}
	*targetField(&it, e.flags) = e.target
	if e.reason > 0 {
		it.Reason = refund.Reasons[e.reason-1]
	}
	if e.extra != nil {
		it.Metadata = e.extra.metadata
	}
	return it
}

// All yields the items in input order, one at a time.
func (p *Plan) All() iter.Seq[refund.Item] {
	return func(yield func(refund.Item) bool) {
		for i := 0; i < p.n; i++ {
			if !yield(p.Item(i)) {
				return
			}
		}
	}
}

// Items returns all the items in a new slice.
func (p *Plan) Items() []refund.Item {
	return slices.AppendSeq(make([]refund.Item, 0, p.n), p.All())
}

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

// InShard reports whether the items of a batch on target (a payment's id)
// fall in shard k of n: a hash of batch and target only, so every run
// splits alike and every item of one payment goes to one worker, whose
// look-ups see each other's refunds. It panics unless 1 <= k <= n.
func InShard(batch, target string, k, n int) bool {
	checkShard(k, n)
	return refund.ShardOf(batch, target, n) == k
}

// Shard returns the items of shard k of n, in input order, in a new slice
// (Plan.Shard for items read back). It panics unless 1 <= k <= n.
func Shard(items []refund.Item, k, n int) []refund.Item {
	checkShard(k, n)
	var out []refund.Item
	for _, it := range items {
		if refund.ShardOf(it.Batch, it.Target(), n) == k {
			out = append(out, it)
		}
	}
	return out
}

// MixedPayments reports a plan that names payments both by charge and by
// payment intent, with the first line of each: a charge and its intent
// hash to two shards, so such a plan cannot be split offline.
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

// Shard returns the plan of shard k of n (InShard), in input order,
// sharing the items' strings with p. It panics unless 1 <= k <= n.
func (p *Plan) Shard(k, n int) *Plan {
	checkShard(k, n)
	out := &Plan{batch: p.batch, currencies: p.currencies, delimiter: p.delimiter}
	for i := 0; i < p.n; i++ {
		e := p.at(i)
		if refund.ShardOf(p.batch, e.target, n) == k {
			out.add(*e)
		}
	}
	return out
}

func checkShard(k, n int) {
	if k < 1 || k > n {
		panic(fmt.Sprintf("plan: shard %d/%d", k, n))
	}
}
