package audit

// Comparing a charge's refunds at Stripe with the journals.

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	stripe "github.com/stripe/stripe-go/v76"

	"github.com/refundkit/refundkit/refund"
)

// sref is a refund as Stripe listed it, with its refundkit metadata.
type sref struct {
	Refund
	live    bool
	batch   string
	item    string
	attempt int
}

func newSref(x *stripe.Refund) *sref {
	s := &sref{
		Refund: Refund{ID: x.ID, Amount: x.Amount, Currency: string(x.Currency), Status: string(x.Status), Created: x.Created},
		live:   x.Status != stripe.RefundStatusCanceled && x.Status != stripe.RefundStatusFailed,
		batch:  x.Metadata[refund.MetaBatch],
		item:   x.Metadata[refund.MetaItem],
	}
	if n, err := strconv.Atoi(x.Metadata[refund.MetaAttempt]); err == nil && n >= 1 {
		s.attempt = n
	}
	return s
}

// reversible reports a refund Stripe can still cancel.
func (x *sref) reversible() bool { return x.Status == string(stripe.RefundStatusRequiresAction) }

// stripeTarget checks every group on a target against its refunds.
func (r *run) stripeTarget(ctx context.Context, t *target, list []*stripe.Refund) error {
	all := make([]*sref, len(list))
	for k, x := range list {
		all[len(list)-1-k] = newSref(x) // Stripe lists newest first
	}
	sort.SliceStable(all, func(a, b int) bool { return all[a].Created < all[b].Created })
	byID := make(map[string]*sref, len(all))
	for _, x := range all {
		byID[x.ID] = x
	}
	for _, h := range t.heads {
		if err := r.stripeGroup(ctx, t, h, all, byID, len(t.heads) > 1); err != nil {
			return err
		}
	}
	return nil
}

// member is one item of a group as Stripe sees it.
type member struct {
	v       itemView
	sl      *itemSlot
	planned bool
	refunds []*sref // live refunds Stripe has for it, oldest first
}

// stripeGroup checks the items of one batch on one target: refunds per
// item and per charge, refunds only Stripe or only the journal has, items
// in doubt or missing. It backfills and cancels as the options ask.
func (r *run) stripeGroup(ctx context.Context, t *target, head uint32, all []*sref, byID map[string]*sref, shared bool) error {
	s := r.st
	ids := []uint32{head}
	if s.slot(head).next != 0 {
		ids = s.members(head)
	}
	ms := make([]*member, len(ids))
	byItem := make(map[string]*member, len(ids))
	var planned []*member
	for k, i := range ids {
		sl := s.slot(i)
		m := &member{v: r.view(i), sl: sl, planned: !s.planned || sl.flags&flagInPlan != 0}
		ms[k] = m
		byItem[m.v.item] = m
		if m.planned {
			planned = append(planned, m)
		}
	}
	batch := ms[0].v.batch

	// Attribute live refunds: by metadata, then (AllRefunds) those without
	// refundkit metadata to the one planned item when that is unambiguous.
	var others, noMeta []*sref // of this batch for items not in the group; without metadata
	for _, x := range all {
		switch {
		case !x.live:
		case x.batch == batch:
			if m := byItem[x.item]; m != nil {
				m.refunds = append(m.refunds, x)
			} else {
				others = append(others, x)
			}
		case x.batch == "" && r.opts.AllRefunds:
			noMeta = append(noMeta, x)
		}
	}
	var unattributed []*sref
	for _, x := range noMeta {
		if len(planned) == 1 && !shared && (planned[0].sl.reqAmount == 0 || planned[0].sl.reqAmount == x.Amount) {
			p := planned[0]
			p.refunds = append(p.refunds, x)
			sort.SliceStable(p.refunds, func(a, b int) bool { return p.refunds[a].Created < p.refunds[b].Created })
			continue
		}
		unattributed = append(unattributed, x)
	}

	// Refunds no planned item accounts for, named in a missing item's remedy.
	var spare []string
	for _, x := range others {
		spare = append(spare, x.ID+" (item "+x.item+")")
	}
	for _, x := range unattributed {
		spare = append(spare, x.ID+" (no metadata)")
	}
	for _, m := range ms {
		if !m.planned {
			for _, x := range m.refunds {
				spare = append(spare, x.ID+" (item "+m.v.item+")")
			}
		}
	}
	for _, m := range ms {
		if err := r.stripeItem(ctx, m, byID, unplannedNote(spare)); err != nil {
			return err
		}
	}
	if err := r.stripeOthers(ctx, t, batch, others); err != nil {
		return err
	}
	for _, x := range unattributed {
		r.out(r.unattributedFinding(t, batch, x, len(planned), shared))
	}
	return r.stripeCharge(ctx, t, batch, ms, planned, others, unattributed)
}

// stripeItem checks one item against its refunds at Stripe; note is added
// to the remedy of a missing item.
func (r *run) stripeItem(ctx context.Context, m *member, byID map[string]*sref, note string) error {
	journaled := r.journalRefunds(m.v.idx)
	inJournal := make(map[string]bool, len(journaled))
	for _, j := range journaled {
		inJournal[j.ID] = true
	}

	if len(m.refunds) > 1 {
		f := m.v.finding(KindDuplicate)
		if err := r.settleExtras(ctx, f, m.v.batch, m.v.item, m.refunds, 1, m.v); err != nil {
			return err
		}
		r.out(f)
	}

	var live []*sref // after any cancel
	for _, x := range m.refunds {
		if x.Action != ActionCanceled {
			live = append(live, x)
		}
	}
	var unjournaled []*sref
	for _, x := range live {
		if !inJournal[x.ID] {
			unjournaled = append(unjournaled, x)
		}
	}
	if len(unjournaled) > 0 {
		f := m.v.finding(KindStripeOnly)
		if err := r.backfill(f, m.v.batch, m.v.item, m.v, unjournaled); err != nil {
			return err
		}
		r.out(f)
	}

	var gone []Refund
	for _, j := range journaled {
		x := byID[j.ID]
		switch {
		case x == nil:
			j.Note = "Stripe has no such refund on this charge"
		case !x.live:
			j.Status, j.Note = x.Status, "Stripe has it as "+x.Status
		default:
			continue
		}
		gone = append(gone, j)
	}
	if len(gone) > 0 {
		f := m.v.finding(KindJournalOnly)
		f.Refunds = gone
		for _, j := range gone {
			f.Amount += j.Amount
			f.Currency = j.Currency
		}
		f.Remedy = "the journal records these refunds but Stripe does not have them as live refunds: the customer was not refunded by them"
		if len(live) == 0 {
			f.Remedy += ", yet refund skips the item as refunded: check the charge in the dashboard and refund the item under a new item id if it is still owed"
		}
		r.out(f)
	}

	if len(live) > 0 || len(journaled) > 0 {
		return nil
	}
	switch {
	case m.sl.flags&flagRefunded == 0 && m.sl.status == statusInDoubt:
		f := m.v.finding(KindInDoubt)
		f.Amount, f.Currency = m.sl.reqAmount, r.st.currencies.name(uint32(m.sl.reqCurrency))
		f.Remedy = "Stripe has no refund for this item: run refund again with this journal to finish it (it looks the item up at Stripe before any new call)"
		r.out(f)
	case r.st.planned && m.sl.flags&flagInPlan != 0 && m.sl.flags&flagInJournal == 0:
		f := m.v.finding(KindMissing)
		f.Amount, f.Currency = m.sl.reqAmount, r.st.currencies.name(uint32(m.sl.reqCurrency))
		f.Remedy = "nothing was journaled for this planned item and Stripe has no refund for it: refund --journal with this journal and plan refunds it" + note
		r.out(f)
	}
	return nil
}

// stripeOthers reports refunds of the batch on the target for items that
// are not in its group. An item nobody has heard of is backfilled; an item
// that the journal or plan puts on another charge is left to that group.
func (r *run) stripeOthers(ctx context.Context, t *target, batch string, others []*sref) error {
	byItem := map[string][]*sref{}
	var order []string
	for _, x := range others {
		if _, known := r.st.find(batch, x.item); known {
			continue
		}
		if byItem[x.item] == nil {
			order = append(order, x.item)
		}
		byItem[x.item] = append(byItem[x.item], x)
	}
	for _, item := range order {
		v := itemView{batch: batch, item: item, target: t.id, isIntent: t.intent}
		f := v.finding(KindStripeOnly)
		if err := r.backfill(f, batch, item, v, byItem[item]); err != nil {
			return err
		}
		if r.st.planned {
			f.Remedy += "; the plan does not list this item"
		}
		r.out(f)
	}
	return nil
}

func (r *run) unattributedFinding(t *target, batch string, x *sref, planned int, shared bool) *Finding {
	v := itemView{batch: batch, target: t.id, isIntent: t.intent}
	f := v.finding(KindStripeOnly)
	ref := x.Refund
	ref.Action = ActionUnattributed
	f.Refunds = []Refund{ref}
	f.Amount, f.Currency = x.Amount, x.Currency
	var why string
	switch {
	case shared:
		why = "items of more than one batch are on this charge"
	case planned == 1:
		why = "its amount differs from the planned item's"
	default:
		why = fmt.Sprintf("%d items are planned on this charge", planned)
	}
	f.Remedy = fmt.Sprintf("this refund carries no refundkit metadata and %s, so which item it refunded is not known and it was not backfilled: match it by hand before running refund for this charge again", why)
	return f
}

// stripeCharge reports a charge with more live refunds of the batch than
// items planned on it, beyond what the items' own duplicates explain:
// refunds of items not planned, and refunds matched to no item.
func (r *run) stripeCharge(ctx context.Context, t *target, batch string, ms, planned []*member, others, unattributed []*sref) error {
	if len(planned) == 0 {
		return nil
	}
	spare := append(append([]*sref(nil), others...), unattributed...)
	empty := 0
	var refunds []Refund // the planned items' own
	for _, m := range ms {
		var live []*sref
		for _, x := range m.refunds {
			if x.Action != ActionCanceled {
				live = append(live, x)
			}
		}
		switch {
		case !m.planned:
			spare = append(spare, live...)
		case len(live) == 0:
			empty++
		}
		if m.planned {
			for _, x := range live {
				ref := x.Refund
				ref.Item, ref.Action, ref.Note = m.v.item, "", ""
				refunds = append(refunds, ref)
			}
		}
	}
	if len(spare) <= empty {
		return nil
	}
	sort.SliceStable(spare, func(a, b int) bool { return spare[a].Created < spare[b].Created })
	v := itemView{batch: batch, target: t.id, isIntent: t.intent}
	f := v.finding(KindDuplicate)
	f.Planned = len(planned)
	f.Message = fmt.Sprintf("%d live refunds of the batch on a charge with %d planned items", len(refunds)+len(spare), len(planned))
	if err := r.settleExtras(ctx, f, batch, "", spare, empty, v); err != nil {
		return err
	}
	// The planned items' own refunds too, so the charge's whole story is here.
	f.Refunds = append(refunds, f.Refunds...)
	sort.SliceStable(f.Refunds, func(a, b int) bool { return f.Refunds[a].Created < f.Refunds[b].Created })
	r.out(f)
	return nil
}
