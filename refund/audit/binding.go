package audit

// The bindings of a refund to an item, whatever source credits it: an
// item only with refunds in its currency, of its amount, or leaving its
// payment refunded whole (amount_mismatch, currency_mismatch); a refund id
// to one item at most (shared_refund); with a plan, a refund of the batch
// on a planned payment only to an item the plan puts there (unowned).

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund/money"
)

// askedFor is what item sl asked for, for messages; currency stands in when
// the item named none.
func (r *run) askedFor(sl *itemSlot, currency string) string {
	if c := r.st.currencies.Name(sl.reqCurrency); c != "" {
		currency = c
	}
	if sl.reqAmount == 0 {
		return "a full refund"
	}
	return money.Format(sl.reqAmount, currency)
}

// creditDiffers reports whether a refund the journals credit to item i is
// not what it asked for; most items have one, checked without a list.
func (r *run) creditDiffers(i uint32, sl *itemSlot) bool {
	if sl.flags&flagRequested == 0 || sl.reqAmount == 0 && sl.reqCurrency == 0 {
		return false
	}
	if sl.flags&flagExtras == 0 {
		return sl.reqCurrency != 0 && sl.currency != sl.reqCurrency ||
			sl.reqAmount > 0 && sl.amount != sl.reqAmount
	}
	for _, x := range r.journalRefunds(i) {
		if r.mismatchOf(sl, x.Amount, x.Currency) != "" {
			return true
		}
	}
	return false
}

// mismatchOf is the kind of finding a refund of amount in currency
// credited to item sl is, or "" when it is what the item asked for.
func (r *run) mismatchOf(sl *itemSlot, amount int64, currency string) string {
	if sl.flags&flagRequested == 0 {
		return ""
	}
	if want := r.st.currencies.Name(sl.reqCurrency); want != "" && currency != want {
		return KindCurrencyMismatch
	}
	if sl.reqAmount > 0 && amount != sl.reqAmount {
		return KindAmountMismatch
	}
	return ""
}

// creditFindings reports the refunds the journals credit to item i that
// are not what it asked for.
func (r *run) creditFindings(i uint32, sl *itemSlot) {
	r.mismatches(r.view(i), sl, r.journalRefunds(i), "the journal")
}

// mismatches reports refunds credited to item v by who (the journal, the
// provider) that are not what it asked for, one finding a kind; it
// reports whether some are in another currency.
func (r *run) mismatches(v itemView, sl *itemSlot, refunds []Refund, who string) (currency bool) {
	byKind := map[string][]Refund{}
	for _, x := range refunds {
		if k := r.mismatchOf(sl, x.Amount, x.Currency); k != "" {
			byKind[k] = append(byKind[k], x)
		}
	}
	for _, k := range []string{KindCurrencyMismatch, KindAmountMismatch} {
		if xs := byKind[k]; len(xs) > 0 {
			r.out(r.mismatchFinding(v, sl, k, xs, who))
		}
	}
	return len(byKind[KindCurrencyMismatch]) > 0
}

// mismatchFinding reports refunds xs, credited to item v by who, that are
// not what it asked for.
func (r *run) mismatchFinding(v itemView, sl *itemSlot, kind string, xs []Refund, who string) *Finding {
	f := v.finding(kind)
	f.Refunds = xs
	var credited []string
	r.sumRefunds(f, xs)
	for _, x := range xs {
		credited = append(credited, x.ID+" of "+money.Format(x.Amount, x.Currency))
	}
	f.Message = "asked for " + r.askedFor(sl, xs[0].Currency) + ", credited with " + strings.Join(credited, " and ")
	if kind == KindCurrencyMismatch {
		f.Remedy = who + " credits this item with a refund in another currency than it asked for (amounts are minor units of each one's currency, so what was refunded is not what was planned), and refund skips the item as refunded: check the payment's currency at the provider; a person decides what is owed, and a succeeded refund cannot be reversed through the API"
	} else {
		f.Remedy = who + " credits this item with a refund of another amount than it asked for, and refund skips the item as refunded: check the refund at the provider; if less was refunded than owed, refund the difference under a new item id; if more, a succeeded refund cannot be reversed through the API: the customer must be charged again to recover it"
	}
	return f
}

// stripeCredit checks item m's live refunds against what it asked for; for
// a full refund, that the live refunds on its payment (all) add up to it.
func (r *run) stripeCredit(ctx context.Context, m *member, all []*sref) error {
	sl := m.sl
	if sl.flags&flagRequested == 0 {
		return nil
	}
	var live []Refund
	for _, x := range m.live() {
		live = append(live, x.plain())
	}
	if len(live) == 0 {
		return nil
	}
	if r.mismatches(m.v, sl, live, r.rep.Provider) || sl.reqAmount != 0 {
		return nil
	}
	// A full refund: its payment is to be refunded whole.
	pay := m.v.pay
	p, err := r.whole(ctx, m.v.target, pay)
	switch {
	case err != nil:
		return err
	case p.cannot:
		return nil
	case !p.fetched:
		f := m.v.finding(KindUnchecked)
		f.Refunds = live
		f.Message = "asked for a full refund, and the amount of " + m.v.target + " could not be read (" + p.err + "), so whether it is refunded whole was not checked"
		f.Remedy = "check at the provider (dashboard) that the payment is refunded whole"
		r.out(f)
		return nil
	}
	var total int64
	for _, x := range all {
		// An item naming one charge of a payment counts that charge's.
		if x.live && x.Action != ActionCanceled && (pay.Charge == "" || x.charge == "" || x.charge == pay.Charge) {
			total = r.add(total, x.Amount, x.Currency, "the total of live refunds on a payment", itemWhere(m.v.batch, m.v.item))
		}
	}
	if total >= p.amount {
		return nil
	}
	cur := live[0].Currency
	f := m.v.finding(KindAmountMismatch)
	f.Refunds = live
	r.sumRefunds(f, live)
	what := "payment"
	switch {
	case pay.Charge != "":
		what = "charge"
	case pay.Capture != "":
		what = "capture"
	}
	f.Message = fmt.Sprintf("asked for a full refund, but the %s %s holds only %s of live refunds: %s of it is not refunded",
		money.Format(p.amount, cur), what, money.Format(total, cur), money.Format(p.amount-total, cur))
	f.Remedy = "the item is credited with a refund of part of its payment (one an earlier plan made, found and adopted), and refund skips it as refunded: if the rest is owed, refund it under a new item id with that amount"
	r.out(f)
	return nil
}

// refundIndex numbers the refund ids the journals credit, each with the
// item first credited with it: an entry holds an item number, not the id,
// so a million refunds cost a slot and an item number each.
type refundIndex struct {
	table  journal.IDTable
	owners []uint32       // by entry: the item
	extra  map[uint32]int // entries of an item's extra refund: its index in state.extras

	touched uint64 // keeps the touches from being optimized away
}

// key is the refund id of entry e.
func (x *refundIndex) key(s *state, e uint32) string {
	i := x.owners[e]
	if k, ok := x.extra[e]; ok {
		return s.extras[i][k].id
	}
	return s.str(s.slot(i).refund)
}

// hashRefund hashes a refund id for the refund index.
func (s *state) hashRefund(id string) uint64 {
	if s.refundHash != nil {
		return s.refundHash(id)
	}
	return s.idx.HashItem(id)
}

// startShared runs sharedPass beside the caller, which may only read the
// state meanwhile; wait reports what it found.
func (r *run) startShared() (wait func()) {
	var found []*Finding
	done := make(chan struct{})
	go func() {
		defer close(done)
		found = r.sharedPass()
	}()
	return func() {
		<-done
		for _, f := range found {
			r.out(f)
		}
	}
}

// sharedPass finds every item credited with a refund id an item read
// before it is credited with. It only reads the state.
func (r *run) sharedPass() []*Finding {
	s := r.st
	var found []*Finding
	x := &refundIndex{owners: make([]uint32, 0, s.n), extra: map[uint32]int{}}
	hashOf := func(e uint32) uint64 { return s.hashRefund(x.key(s, e)) }
	x.table.Reserve(int(s.n), hashOf)
	refunded := func(sl *itemSlot) (string, bool) {
		if sl.flags&flagRefunded == 0 {
			return "", false
		}
		return s.str(sl.refund), true
	}
	x.touched = s.inSpans(&x.table, refunded, s.hashRefund, func(i uint32, sl *itemSlot, h uint64) {
		if f := r.credit(x, hashOf, i, s.str(sl.refund), h, -1); f != nil {
			found = append(found, f)
		}
		if sl.flags&flagExtras != 0 {
			for k, e := range s.extras[i] {
				if f := r.credit(x, hashOf, i, e.id, s.hashRefund(e.id), k); f != nil {
					found = append(found, f)
				}
			}
		}
	})
	return found
}

// credit numbers refund id, of hash h, credited to item i (its extra k, or
// -1 for its first refund), or returns the finding if another item has it.
func (r *run) credit(x *refundIndex, hashOf func(uint32) uint64, i uint32, id string, h uint64, k int) *Finding {
	s := r.st
	for e := range x.table.Candidates(h) {
		if x.key(s, e) == id {
			if owner := x.owners[e]; owner != i {
				return r.sharedFinding(i, id, owner)
			}
			return nil
		}
	}
	e := x.table.Add(h, hashOf)
	x.owners = append(x.owners, i)
	if k >= 0 {
		x.extra[e] = k
	}
	return nil
}

// creditOf is refund id as the journals credit it to item i.
func (r *run) creditOf(i uint32, id string) Refund {
	c := r.credited(i)
	if k := slices.IndexFunc(c, func(x Refund) bool { return x.ID == id }); k >= 0 {
		return c[k]
	}
	return Refund{ID: id}
}

// sharedFinding reports item i, credited with refund id that item owner
// was credited with first.
func (r *run) sharedFinding(i uint32, id string, owner uint32) *Finding {
	o := r.view(owner)
	f := r.view(i).finding(KindSharedRefund)
	mine, theirs := r.creditOf(i, id), r.creditOf(owner, id)
	theirs.Batch, theirs.Item = o.batch, o.item
	f.Refunds = []Refund{mine, theirs}
	f.Amount, f.Currency = mine.Amount, mine.Currency
	on := ""
	if o.target != "" {
		on = " (on " + o.target + ")"
	}
	f.Message = fmt.Sprintf("refund %s is credited to this item and to item %s of batch %s%s", id, o.item, o.batch, on)
	f.Remedy = fmt.Sprintf("one refund refunds one item at most: at most one of these items was refunded by %s, yet refund skips both as refunded; check %s at the provider (its payment and metadata say whose it is), and refund the other item under a new item id if it is still owed", id, id)
	return f
}

// unowned reports, with a plan, the live refunds of group g's batch on its
// payment for items the plan does not put there, beside planned items,
// unless refund was told a refund on top of these is meant.
func (r *run) unowned(g *group) {
	if !r.st.planned || len(g.planned) == 0 {
		return
	}
	for _, m := range g.planned {
		if m.sl.flags&flagAllowed != 0 {
			return
		}
	}
	var refunds []Refund
	add := func(x *sref, item string) {
		if x.Action != ActionCanceled {
			ref := x.plain()
			ref.Item = item
			refunds = append(refunds, ref)
		}
	}
	for _, m := range g.ms {
		if !m.planned {
			for _, x := range m.refunds {
				add(x, m.v.item)
			}
		}
	}
	for _, x := range g.others {
		add(x, x.item)
	}
	sort.SliceStable(refunds, func(a, b int) bool { return refunds[a].Created < refunds[b].Created })
	if len(refunds) == 0 {
		return
	}
	f := g.at.finding(KindUnowned)
	f.Planned = len(g.planned)
	f.Refunds = refunds
	sums := r.totals(f, refunds)
	r.sumRefunds(f, refunds)
	items := distinct(refunds, func(x Refund) string { return x.Item })
	f.Message = fmt.Sprintf("%s of the batch on this payment %s for items the plan does not put on it (%s), beside %s",
		count(len(refunds), "refund"), verb(len(refunds), "is", "are"), strings.Join(items, ", "), count(len(g.planned), "planned item"))
	f.Remedy = fmt.Sprintf("no item of the plan owns these refunds (%s): their items were renamed, dropped or moved to another payment; if one of them was meant for a planned item of this payment, that item must not be refunded again (refund holds it, refunded_by_other_item); if none was, they moved money outside the plan: a person decides, and a succeeded refund cannot be reversed through the API", amounts(sums))
	r.out(f)
}
