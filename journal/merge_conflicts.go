package journal

import (
	"fmt"
	"strings"
	"unsafe"

	"github.com/refundkit/refundkit/journal/arena"
)

// location is a record's input and line.
type location struct{ input, line int }

func (l location) String(paths []string) string { return fmt.Sprintf("%s:%d", paths[l.input], l.line) }

// outcome is a record that settles an item: a refund, or a final failure.
type outcome struct {
	final             bool   // a final failure; else a refund
	batch, item, name string // name: the refund id, or the failure's code
	// refund is the refund a final failure names, if any: a pending
	// refund that ended failed, or one found dead or for another amount.
	refund string
	// amount and currency of a refund, as its record says them (0, "":
	// not said).
	amount   int64
	currency string
	done     bool   // a refund in a status that says the money moved
	payment  string // the payment a refund names, kind first ("c:ch_1"), "" when none
}

// paymentKey is the payment r names, its kind first so that only names of
// one kind are compared (a backfill names a charge where the item's intent
// named its payment intent).
func paymentKey(r *Record) string {
	for k, p := range r.payments() {
		if p != "" {
			return "cipa"[k:k+1] + ":" + p
		}
	}
	return ""
}

// outcomeOf is the outcome r records; false if it records none.
func outcomeOf(r *Record) (outcome, bool) {
	switch {
	case r.Type == TypeRefunded:
		return outcome{batch: r.Batch, item: r.Item, name: r.Refund, amount: r.Amount, currency: r.Currency, done: Done(r.Status), payment: paymentKey(r)}, true
	case r.Type == TypeFailed && r.Final:
		return outcome{final: true, batch: r.Batch, item: r.Item, name: r.Code, refund: r.Refund}, true
	}
	return outcome{}, false
}

// firstOutcomes is what finding conflicts keeps of an item, in the slot
// the merge's item index gives it: its first refund and its first final
// failure, in merge order.
type firstOutcomes struct {
	refund, failure firstOutcome
}

type firstOutcome struct {
	name arena.Ref // the refund id, or the failure's code, in the index's arena
	at   location  // line 0: none yet
	// amount and currency (in the arena) of the first refund, as its
	// first record with each said them: a later record of that refund id
	// that says another is a conflict.
	amount   int64
	currency arena.Ref
	done     bool      // a record of it said done
	payment  arena.Ref // the payment its first record named (paymentKey)
}

// conflicts collects the outcomes that disagree with their item's first
// refund or first final failure, in merge order: each is checked as the
// merge brings it.
type conflicts struct {
	paths   []string
	found   []Conflict
	refunds refundOwners // every refund id, with the item first credited with it
}

// check checks o, read at at, against its item's first outcomes f (their
// names in strs), and keeps o in f if it is the first of its kind. It
// reports whether o conflicts.
func (c *conflicts) check(f *firstOutcomes, strs *arena.Arena, o outcome, at location) bool {
	refunded, failed := f.refund.at.line > 0, f.failure.at.line > 0
	var (
		reason string
		first  location
	)
	switch {
	case !o.final && refunded && strs.Get(f.refund.name) != o.name:
		reason, first = fmt.Sprintf("refunded as %s and as %s", strs.Get(f.refund.name), o.name), f.refund.at
	case !o.final && failed:
		reason, first = fmt.Sprintf("refunded as %s after failing for good (%s)", o.name, strs.Get(f.failure.name)), f.failure.at
	case !o.final && refunded && o.amount != 0 && f.refund.amount != 0 && o.amount != f.refund.amount:
		reason, first = fmt.Sprintf("refund %s journaled with amount %d and with %d", o.name, f.refund.amount, o.amount), f.refund.at
	case !o.final && refunded && o.currency != "" && f.refund.currency != 0 && o.currency != strs.Get(f.refund.currency):
		reason, first = fmt.Sprintf("refund %s journaled in %s and in %s", o.name, strs.Get(f.refund.currency), o.currency), f.refund.at
	case !o.final && refunded && o.payment != "" && f.refund.payment != 0 && o.payment[:2] == strs.Get(f.refund.payment)[:2] && o.payment != strs.Get(f.refund.payment):
		reason, first = fmt.Sprintf("refund %s journaled for %s and for %s", o.name, strs.Get(f.refund.payment)[2:], o.payment[2:]), f.refund.at
	case !o.final && refunded && f.refund.done && !o.done && strs.Get(f.refund.name) == o.name:
		reason, first = fmt.Sprintf("refund %s journaled done, then in a status that is not", o.name), f.refund.at
	case o.final && refunded && f.refund.done && o.refund == strs.Get(f.refund.name):
		reason, first = fmt.Sprintf("failed for good (%s) after refund %s was journaled done", o.name, o.refund), f.refund.at
	case o.final && refunded && o.refund != strs.Get(f.refund.name):
		// A failure that names the item's refund is that refund's end (a
		// pending refund that failed at the provider), not a contradiction.
		reason, first = fmt.Sprintf("failed for good (%s) after being refunded as %s", o.name, strs.Get(f.refund.name)), f.refund.at
	}
	switch {
	case !o.final && !refunded:
		f.refund = firstOutcome{name: strs.Add(o.name), at: at, amount: o.amount, done: o.done, payment: strs.Add(o.payment)}
		if o.currency != "" {
			f.refund.currency = strs.Add(o.currency)
		}
	case o.final && !failed:
		f.failure = firstOutcome{name: strs.Add(o.name), at: at}
	case !o.final && reason == "" && strs.Get(f.refund.name) == o.name:
		// The same refund again: what the first record left unsaid, this
		// one may say.
		if f.refund.amount == 0 {
			f.refund.amount = o.amount
		}
		if f.refund.currency == 0 && o.currency != "" {
			f.refund.currency = strs.Add(o.currency)
		}
		if f.refund.payment == 0 && o.payment != "" {
			f.refund.payment = strs.Add(o.payment)
		}
		f.refund.done = f.refund.done || o.done
	}
	if reason == "" {
		return false
	}
	c.add(o, reason, first, at)
	return true
}

// add reports o, read at at, in conflict with the record read at first.
func (c *conflicts) add(o outcome, reason string, first, at location) {
	c.found = append(c.found, Conflict{
		Batch: strings.Clone(o.batch), Item: strings.Clone(o.item), Reason: reason,
		First: first.String(c.paths), Second: at.String(c.paths),
	})
}

// outcomeChecker finds the conflicts of a merge's outcomes on a goroutine
// of its own, a batch at a time and in order, touching a batch's table
// slots first so that their cache misses overlap.
type outcomeChecker struct {
	items *Index[firstOutcomes]
	found *conflicts
	cur   *outcomeBatch
	full  chan *outcomeBatch // to the checking goroutine
	free  chan *outcomeBatch // back from it
	done  chan struct{}
	open  bool
}

type outcomeBatch struct {
	strs    []byte // the outcomes' strings, end to end
	pending []pendingOutcome

	outs    []outcome
	hashes  []uint64
	refunds []uint64 // hashes of the refund ids (0 for a failure)
	touched uint32   // keeps the touches from being optimized away
}

type pendingOutcome struct {
	final  bool
	ends   [6]int // where its batch, item, name, refund, currency and payment end in strs
	amount int64
	done   bool
	at     location
}

const (
	outcomeBatchSize = 1024
	outcomeBatches   = 3 // one filling, one being checked, one waiting
)

func newOutcomeChecker(found *conflicts, expect int) *outcomeChecker {
	c := &outcomeChecker{
		items: NewIndex[firstOutcomes](), found: found, cur: &outcomeBatch{},
		full: make(chan *outcomeBatch, outcomeBatches), free: make(chan *outcomeBatch, outcomeBatches),
		done: make(chan struct{}), open: true,
	}
	for range outcomeBatches - 1 {
		c.free <- &outcomeBatch{}
	}
	go func() {
		defer close(c.done)
		c.items.Reserve(expect)
		c.found.refunds.reserve(expect)
		for b := range c.full {
			b.check(c.items, c.found)
			c.free <- b
		}
	}()
	return c
}

func (c *outcomeChecker) add(o outcome, at location) {
	b := c.cur
	p := pendingOutcome{final: o.final, amount: o.amount, done: o.done, at: at}
	for k, s := range [6]string{o.batch, o.item, o.name, o.refund, o.currency, o.payment} {
		b.strs = append(b.strs, s...)
		p.ends[k] = len(b.strs)
	}
	b.pending = append(b.pending, p)
	if len(b.pending) == outcomeBatchSize {
		c.full <- b
		c.cur = <-c.free
	}
}

// close checks what is queued and stops; found is complete after it.
func (c *outcomeChecker) close() {
	if !c.open {
		return
	}
	c.open = false
	c.full <- c.cur
	close(c.full)
	<-c.done
}

func (b *outcomeBatch) check(items *Index[firstOutcomes], found *conflicts) {
	strs := unsafe.String(unsafe.SliceData(b.strs), len(b.strs))
	b.outs, b.hashes, b.refunds = b.outs[:0], b.hashes[:0], b.refunds[:0]
	start := 0
	for _, p := range b.pending {
		o := outcome{final: p.final, batch: strs[start:p.ends[0]], item: strs[p.ends[0]:p.ends[1]], name: strs[p.ends[1]:p.ends[2]],
			refund: strs[p.ends[2]:p.ends[3]], currency: strs[p.ends[3]:p.ends[4]], payment: strs[p.ends[4]:p.ends[5]], amount: p.amount, done: p.done}
		start = p.ends[5]
		var rh uint64
		if !o.final {
			rh = items.HashItem(o.name)
		}
		b.outs, b.hashes, b.refunds = append(b.outs, o), append(b.hashes, items.HashItem(o.item)), append(b.refunds, rh)
	}
	var touched uint32
	for k, h := range b.hashes {
		touched += items.Touch(h) + found.refunds.table.Touch(b.refunds[k])
	}
	b.touched += touched
	view := plainItems{items}
	for k, o := range b.outs {
		id, added := items.AddHashed(o.batch, o.item, b.hashes[k])
		slotOf(items, id, added)
		found.checkItem(view, id, o, b.refunds[k], b.pending[k].at)
	}
	b.strs, b.pending = b.strs[:0], b.pending[:0]
}

// One refund, one item: a refund id credited to a second item is a
// conflict. An item's first refund is keyed by the id its first outcomes
// hold, so the table keeps no copy of it.

type outcomeItems interface {
	Key(id uint32) (batch, item string)
	HashItem(s string) uint64
	Arena() *arena.Arena
	outcomesOf(id uint32) *firstOutcomes
}

type plainItems struct{ *Index[firstOutcomes] }

func (x plainItems) outcomesOf(id uint32) *firstOutcomes { return x.Slot(id) }

// refundOwners numbers a merge's refund ids, each with its first item.
type refundOwners struct {
	table IDTable
	items []uint32 // by entry: the item
	// extras: refunds that are not their item's first, with where they were read.
	extras map[uint32]refundExtra
}

type refundExtra struct {
	name arena.Ref
	at   location
}

func (o *refundOwners) reserve(n int) {
	o.table.Reserve(n, func(uint32) uint64 { panic("journal: refundOwners reserved after an add") })
	o.items = make([]uint32, 0, n)
}

// key is entry e's refund id and where it was first credited.
func (o *refundOwners) key(items outcomeItems, e uint32) (arena.Ref, location) {
	if x, ok := o.extras[e]; ok {
		return x.name, x.at
	}
	f := &items.outcomesOf(o.items[e]).refund
	return f.name, f.at
}

func (o *refundOwners) find(items outcomeItems, name string, h uint64) (uint32, bool) {
	strs := items.Arena()
	for e := range o.table.Candidates(h) {
		if ref, _ := o.key(items, e); strs.Get(ref) == name {
			return e, true
		}
	}
	return 0, false
}

// add numbers a refund id first credited to item (extra: not its first refund).
func (o *refundOwners) add(items outcomeItems, h uint64, item uint32, extra *refundExtra) {
	e := o.table.Add(h, func(e uint32) uint64 {
		ref, _ := o.key(items, e)
		return items.HashItem(items.Arena().Get(ref))
	})
	o.items = append(o.items, item)
	if extra != nil {
		if o.extras == nil {
			o.extras = map[uint32]refundExtra{}
		}
		o.extras[e] = *extra
	}
}

// checkItem checks o, an outcome of item id, against the item's first
// outcomes and, for a refund (of hash h), against every other item's.
func (c *conflicts) checkItem(items outcomeItems, id uint32, o outcome, h uint64, at location) bool {
	f := items.outcomesOf(id)
	strs := items.Arena()
	fresh := !o.final && o.name != "" && (f.refund.at.line == 0 || strs.Get(f.refund.name) != o.name)
	shared := false
	if fresh {
		if e, ok := c.refunds.find(items, o.name, h); ok {
			fresh = false // numbered already: its owner stays the first
			if owner := c.refunds.items[e]; owner != id {
				shared = true
				_, first := c.refunds.key(items, e)
				c.shared(items, owner, o, first, at)
			}
		}
	}
	other := c.check(f, strs, o, at)
	if fresh {
		if f.refund.at == at {
			c.refunds.add(items, h, id, nil) // keyed by the item's first refund
		} else {
			c.refunds.add(items, h, id, &refundExtra{strs.Add(o.name), at})
		}
	}
	return shared || other
}

func (c *conflicts) shared(items outcomeItems, owner uint32, o outcome, first, at location) {
	batch, item := items.Key(owner)
	whose := "item " + item
	if batch != o.batch {
		whose = "batch " + batch + " item " + item
	}
	c.add(o, "refunded as "+o.name+", which is the refund of "+whose, first, at)
}
