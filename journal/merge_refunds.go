package journal

// One refund, one item: a refund id that a merge finds credited to a
// second item is a conflict, as two refunds of one item are. An item's
// first refund is keyed by the id its first outcomes already hold, so the
// table costs a slot and an item number a refund, not a copy of its id;
// ids are compared only when their hashes meet.

import "github.com/refundkit/refundkit/journal/arena"

// outcomeItems is a merge's item index as finding conflicts reads it.
type outcomeItems interface {
	Key(id uint32) (batch, item string)
	HashItem(s string) uint64
	Arena() *arena.Arena
	outcomesOf(id uint32) *firstOutcomes
}

// plainItems is the item index of a plain merge: first outcomes alone.
type plainItems struct{ *Index[firstOutcomes] }

func (x plainItems) outcomesOf(id uint32) *firstOutcomes { return x.Slot(id) }

// compactItems is the item index of a compacting merge's first pass.
type compactItems struct{ *Index[compactItem] }

func (x compactItems) outcomesOf(id uint32) *firstOutcomes { return &x.Slot(id).outcomes }

// refundOwners numbers the refund ids of a merge, each with the item first
// credited with it.
type refundOwners struct {
	table IDTable
	items []uint32 // by entry: the item
	// extras are entries of refunds that are not their item's first (the
	// item is in conflict already): their ids and where they were read.
	extras map[uint32]refundExtra
}

type refundExtra struct {
	name arena.Ref
	at   location
}

// reserve sizes the table for about n refunds.
func (o *refundOwners) reserve(n int) {
	o.table.Reserve(n, func(uint32) uint64 { panic("journal: refundOwners reserved after an add") })
	o.items = make([]uint32, 0, n)
}

// key is the refund id of entry e, in items' arena, and where it was
// first credited.
func (o *refundOwners) key(items outcomeItems, e uint32) (arena.Ref, location) {
	if x, ok := o.extras[e]; ok {
		return x.name, x.at
	}
	f := &items.outcomesOf(o.items[e]).refund
	return f.name, f.at
}

// find returns the entry of refund id name, of hash h.
func (o *refundOwners) find(items outcomeItems, name string, h uint64) (uint32, bool) {
	strs := items.Arena()
	for e := range o.table.Candidates(h) {
		if ref, _ := o.key(items, e); strs.Get(ref) == name {
			return e, true
		}
	}
	return 0, false
}

// add numbers the refund id of hash h first credited to item; extra, when
// its name is not the item's first refund, keeps it and where it was read.
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

// checkItem checks o, an outcome of item id read at at, against the item's
// first outcomes (check) and, for a refund, against every other item's
// refunds: a refund id already credited to another item is a conflict. h
// is items.HashItem(o.name) for a refund (0 otherwise). It reports whether
// o conflicts.
func (c *conflicts) checkItem(items outcomeItems, id uint32, o outcome, h uint64, at location) bool {
	f := items.outcomesOf(id)
	strs := items.Arena()
	// A refund id new to its item: its first refund, or another one.
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

// shared reports o, a refund of another item than owner's, whose id was
// first credited to owner at first.
func (c *conflicts) shared(items outcomeItems, owner uint32, o outcome, first, at location) {
	batch, item := items.Key(owner)
	whose := "item " + item
	if batch != o.batch {
		whose = "batch " + batch + " item " + item
	}
	c.add(o, "refunded as "+o.name+", which is the refund of "+whose, first, at)
}
