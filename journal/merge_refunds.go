package journal

// One refund, one item: a refund id credited to a second item is a
// conflict. An item's first refund is keyed by the id its first outcomes
// hold, so the table keeps no copy of it.

import "github.com/refundkit/refundkit/journal/arena"

type outcomeItems interface {
	Key(id uint32) (batch, item string)
	HashItem(s string) uint64
	Arena() *arena.Arena
	outcomesOf(id uint32) *firstOutcomes
}

type plainItems struct{ *Index[firstOutcomes] }

func (x plainItems) outcomesOf(id uint32) *firstOutcomes { return x.Slot(id) }

type compactItems struct{ *Index[compactItem] }

func (x compactItems) outcomesOf(id uint32) *firstOutcomes { return &x.Slot(id).outcomes }

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
