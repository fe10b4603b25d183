package plan

import (
	"iter"

	"github.com/refundkit/refundkit/refund"
)

// Plan is a validated list of plan items of one batch, in input order.
// It stores each item in 40 bytes plus its id (a refund.Item takes 128),
// moving what most rows leave empty aside, so a million-row plan fits in
// about a hundred megabytes.
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

// Delimiter is the delimiter of the CSV input the plan was read from,
// given or told from its header row (Comma, Semicolon, Tab); 0 when the
// input was not CSV.
func (p *Plan) Delimiter() rune { return p.delimiter }

// Len is the number of items.
func (p *Plan) Len() int { return p.n }

// Item returns item i (0 <= i < Len). Its Metadata map is shared with the
// plan: read it, do not change it.
func (p *Plan) Item(i int) refund.Item {
	e := p.at(i)
	it := refund.Item{Batch: p.batch, Item: e.item(), Amount: e.amount, Currency: p.currencies[e.currency]}
	switch e.flags & kindFlags {
	case entryIntent:
		it.PaymentIntent = e.target
	case entryCapture:
		it.Capture = e.target
	case entryPSPReference:
		it.PSPReference = e.target
	default:
		it.Charge = e.target
	}
	if e.reason > 0 {
		it.Reason = refund.Reasons[e.reason-1]
	}
	if e.extra != nil {
		it.Metadata = e.extra.metadata
	}
	return it
}

// All yields the items in input order, one at a time, so a large plan can
// be written out without a second copy of it in memory.
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
	items := make([]refund.Item, p.n)
	for i := range items {
		items[i] = p.Item(i)
	}
	return items
}
