package audit

// Comparing a payment's refunds at the provider with the journals.

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/money"
)

// sref is a refund as the provider listed it, with its refundkit metadata.
type sref struct {
	Refund
	live           bool
	batch, item    string
	attempt        int
	charge, intent string // what it refunded; intent "" when not said
	reason         string // why it failed, when said
	claimed        bool   // without metadata, yet an item's (journal, exact match)
}

func newSref(x *refund.Refund) *sref {
	s := &sref{
		Refund: refundOf(x),
		live:   refund.Live(x),
		batch:  x.Metadata[refund.MetaBatch],
		item:   x.Metadata[refund.MetaItem],
		charge: x.Charge,
		intent: x.PaymentIntent,
		reason: x.FailureReason,
	}
	if n, err := strconv.Atoi(x.Metadata[refund.MetaAttempt]); err == nil && n >= 1 {
		s.attempt = n
	}
	return s
}

// reversible reports a refund the provider can still cancel.
func (x *sref) reversible() bool { return x.Status == refund.RefundRequiresAction }

// plain is x's refund without what audit did with it.
func (x *sref) plain() Refund {
	ref := x.Refund
	ref.Action, ref.Note = "", ""
	return ref
}

// describe names a refund for messages: "re_1 (5.00 USD, batch B, item i)".
func (x *sref) describe() string {
	meta := "no refundkit metadata"
	if x.batch != "" {
		meta = "batch " + x.batch + ", item " + x.item
	}
	return fmt.Sprintf("%s (%s, %s)", x.ID, money.Format(x.Amount, x.Currency), meta)
}

// member is one item of a group as the provider sees it.
type member struct {
	v       itemView
	sl      *itemSlot
	planned bool
	refunds []*sref // live refunds the provider has for it, oldest first
	// misnamed are live refunds its journal names that are not its own:
	// of another item, or without metadata and not what it asked for.
	misnamed []*sref
	why      []string
}

// live are m's refunds that this audit did not cancel.
func (m *member) live() []*sref {
	return slices.DeleteFunc(slices.Clone(m.refunds), func(x *sref) bool { return x.Action == ActionCanceled })
}

// ownRefund reports a refund whose metadata names the member.
func (m *member) ownRefund() bool {
	return slices.ContainsFunc(m.refunds, func(x *sref) bool { return x.batch != "" })
}

// group is the items of one batch on a payment, with the refunds the
// provider lists for each, or (no provider) the journals credit it.
type group struct {
	batch   string
	at      itemView // the payment: batch, target and payment, no item
	all     []*sref  // every refund listed on the target, oldest first
	ms      []*member
	byItem  map[string]*member
	planned []*member
	others  []*sref // live refunds of the batch for items not in the group
}

// newGroup is the group of the items of heads: one batch on the names of
// one payment (one head unless it goes by several).
func (r *run) newGroup(heads ...uint32) *group {
	s := r.st
	ids := heads[:1]
	if len(heads) > 1 || s.slot(heads[0]).next != 0 {
		ids = nil
		for _, h := range heads {
			ids = append(ids, s.members(h)...)
		}
	}
	g := &group{ms: make([]*member, len(ids)), byItem: make(map[string]*member, len(ids))}
	for k, i := range ids {
		sl := s.slot(i)
		m := &member{v: r.view(i), sl: sl, planned: !s.planned || sl.flags&flagInPlan != 0}
		g.ms[k] = m
		g.byItem[m.v.item] = m
		if m.planned {
			g.planned = append(g.planned, m)
		}
	}
	v := g.ms[0].v
	g.batch, g.at = v.batch, itemView{batch: v.batch, target: v.target, pay: v.pay}
	return g
}

// stripeTarget checks every group on a target against its refunds.
func (r *run) stripeTarget(ctx context.Context, t *target, list []refund.Refund) error {
	all := make([]*sref, len(list))
	for k := range list {
		all[len(list)-1-k] = newSref(&list[k]) // providers list newest first
	}
	sort.SliceStable(all, func(a, b int) bool { return all[a].Created < all[b].Created })
	byID := make(map[string]*sref, len(all))
	for _, x := range all {
		byID[x.ID] = x
	}
	gs := r.groups(t)
	for _, g := range gs {
		g.all, g.at.target, g.at.pay = all, t.id, t.pay
	}
	// A refund whose metadata names an item is that item's, always.
	for _, x := range all {
		if x.batch == "" {
			continue
		}
		for _, g := range gs {
			if g.batch != x.batch {
				continue
			}
			m := g.byItem[x.item]
			if m != nil && journal.OutcomeOf(x.Status) == journal.OutcomeUnknown {
				r.out(r.unknownStatus(m, x))
			}
			switch {
			case !x.live:
			case m != nil:
				m.refunds = append(m.refunds, x)
			case !r.elsewhere(g.batch, x):
				g.others = append(g.others, x)
			}
		}
	}
	un, err := r.attribute(ctx, gs, all, byID)
	if err != nil {
		return err
	}
	for _, g := range gs {
		if err := r.checkGroup(ctx, g, byID, un); err != nil {
			return err
		}
	}
	batch := ""
	if len(gs) == 1 {
		batch = gs[0].batch
	}
	for _, u := range un {
		r.out(r.unattributedFinding(t, batch, u))
	}
	r.otherBatches(t, gs, all)
	return nil
}

// groups are the groups of items on target t, one a batch (across the
// names of a payment, links).
func (r *run) groups(t *target) []*group {
	if len(t.heads) == 1 {
		return []*group{r.newGroup(t.heads[0])}
	}
	var byBatch [][]uint32
	for _, h := range t.heads {
		b := r.st.idx.BatchOf(h)
		k := slices.IndexFunc(byBatch, func(hs []uint32) bool { return r.st.idx.BatchOf(hs[0]) == b })
		if k < 0 {
			byBatch = append(byBatch, []uint32{h})
		} else {
			byBatch[k] = append(byBatch[k], h)
		}
	}
	gs := make([]*group, len(byBatch))
	for k, hs := range byBatch {
		gs[k] = r.newGroup(hs...)
	}
	return gs
}

// checkGroup checks the items of one batch on one payment, backfilling
// and canceling as the options ask.
func (r *run) checkGroup(ctx context.Context, g *group, byID map[string]*sref, un []unattributed) error {
	// Refunds no planned item accounts for, named in a missing item's remedy.
	var spare []string
	for _, x := range g.others {
		spare = append(spare, x.ID+" (item "+x.item+")")
	}
	for _, u := range un {
		spare = append(spare, u.x.ID+" (no metadata)")
	}
	for _, m := range g.ms {
		switch {
		case m.planned:
		case r.opts.Provider == nil && len(m.refunds) > 0:
			spare = append(spare, m.v.item)
		case r.opts.Provider != nil:
			for _, x := range m.refunds {
				spare = append(spare, x.ID+" (item "+m.v.item+")")
			}
		}
	}
	for _, m := range g.ms {
		if r.opts.Provider == nil {
			r.journalItem(m.v.idx, m.sl, unplannedNote(spare))
			continue
		}
		if err := r.stripeItem(ctx, m, byID, unplannedNote(spare)); err != nil {
			return err
		}
		if err := r.stripeCredit(ctx, m, g.all); err != nil {
			return err
		}
	}
	if err := r.stripeOthers(ctx, g); err != nil {
		return err
	}
	if err := r.chargeCheck(ctx, g); err != nil {
		return err
	}
	r.unowned(g)
	return nil
}

// stripeItem checks one item against its refunds at the provider; note is
// added to the remedy of a missing item.
func (r *run) stripeItem(ctx context.Context, m *member, byID map[string]*sref, note string) error {
	journaled := r.journalRefunds(m.v.idx)
	if len(m.refunds) > 1 {
		f := m.v.finding(KindDuplicate)
		if err := r.settleExtras(ctx, f, m.v, m.refunds, 1); err != nil {
			return err
		}
		r.out(f)
	}

	live := m.live()
	var unjournaled []*sref
	for _, x := range live {
		if !slices.ContainsFunc(journaled, func(j Refund) bool { return j.ID == x.ID }) {
			unjournaled = append(unjournaled, x)
		}
	}
	if len(unjournaled) > 0 {
		f := m.v.finding(KindStripeOnly)
		if err := r.backfill(f, m.v, unjournaled); err != nil {
			return err
		}
		if r.opts.Backfill == nil && m.sl.flags&flagRefunded == 0 && m.sl.status == statusInDoubt {
			r.noteLive(f, m.sl)
		}
		r.out(f)
	}
	var gone []Refund
	var differ []string
	partial := r.rep.Told // listed only once told of
	for _, j := range journaled {
		x := byID[j.ID]
		switch {
		case x != nil && x.live && x.Amount != j.Amount:
			// One refund, two amounts (its currency: stripeCredit).
			differ = append(differ, fmt.Sprintf("the journal records refund %s of %s, %s holds it of %s", j.ID,
				money.Format(j.Amount, j.Currency), r.rep.Provider, money.Format(x.Amount, x.Currency)))
			continue
		case x == nil && partial:
			// Listed only once told of: it may be on its way.
			continue
		case x == nil:
			j.Note = "Stripe has no such refund on this charge"
		case !x.live:
			j.Status, j.Note = x.Status, r.rep.Provider+" has it as "+x.Status
			if x.reason != "" {
				j.Note += " (" + x.reason + ")"
			}
		default:
			continue
		}
		gone = append(gone, j)
	}
	if len(differ) > 0 {
		f := m.v.finding(KindConflict)
		f.Refunds = journaled
		f.Message = strings.Join(differ, "; ")
		f.Remedy = "the journal's record of a refund is not what the provider holds: refund skips the item by its journal, so mend the journal (audit --stripe --backfill journals the provider's word) after checking the refund in the dashboard"
		r.out(f)
	}
	if len(gone) > 0 {
		f := m.v.finding(KindJournalOnly)
		f.Refunds = gone
		r.sumRefunds(f, gone)
		f.Remedy = "the journal records these refunds but " + r.rep.Provider + " does not have them as live refunds: the customer was not refunded by them"
		if len(live) == 0 {
			f.Remedy += ", yet refund skips the item as refunded: check the charge in the dashboard and refund the item under a new item id if it is still owed"
		}
		r.out(f)
	}

	if m.sl.flags&flagFinalFailure != 0 && m.sl.flags&flagRefunded != 0 && !r.recordConflict(m.v.idx, m.sl) {
		// Failed for good after its refund (a later call refused): what
		// counts is whether the refund is live.
		switch {
		case len(live) == 0:
			r.out(r.conflictFinding(m.v.idx, m.sl, true, "Stripe has no live refund for this item, yet refund skips it as refunded: check the charge in the dashboard and refund the item under a new item id if it is still owed"))
		case r.opts.Backfill != nil && len(unjournaled) == 0:
			// Journaled again after the failure, for the journal alone.
			if err := r.opts.Backfill.Append(r.record(journal.TypeRefunded, m.v.item, m.v, live[0])); err != nil {
				return &JournalError{err}
			}
			r.rep.Backfilled++
		}
	}

	if m.sl.flags&flagRefunded == 0 && m.sl.status == statusFailed && len(live) == 0 {
		r.out(r.failedFinding(m.v.idx, m.sl))
	}
	if len(m.misnamed) > 0 {
		f := m.v.finding(KindConflict)
		f.Refunds = srefRefunds(m.misnamed)
		f.Message = strings.Join(m.why, "; ")
		ids := refundIDs(f.Refunds)
		if len(live) > 0 {
			f.Remedy = fmt.Sprintf("this item's refund is %s; the journal's record of %s is wrong, and it is counted as no item's refund: a person decides what %s refunded", refundIDs(srefRefunds(live)), ids, ids)
		} else {
			f.Remedy = fmt.Sprintf("refund skips this item as refunded on the strength of that record (an earlier audit --backfill may have written it): a person decides whether %s refunded this item; if it did not, refund the item under a new item id", ids)
		}
		r.out(f)
	}

	if len(live) == 0 && len(journaled) == 0 {
		doubt := "Stripe has no refund for this item: run refund again with this journal to finish it (it looks the item up at Stripe before any new call)"
		if partial {
			doubt = r.partialInDoubtRemedy(m.v.idx)
		}
		r.unsettled(m.v.idx, m.sl, doubt, "; Stripe lists no refund for the item on its charge",
			"nothing was journaled for this planned item and Stripe has no refund for it: refund --journal with this journal and plan refunds it"+note)
	}
	return nil
}

// stripeOthers reports refunds of the batch on the target for items not in
// its group, known nowhere else: they are backfilled.
func (r *run) stripeOthers(ctx context.Context, g *group) error {
	byItem := map[string][]*sref{}
	var order []string
	for _, x := range g.others {
		if _, known := r.st.idx.Find(g.batch, x.item); known {
			continue
		}
		if byItem[x.item] == nil {
			order = append(order, x.item)
		}
		byItem[x.item] = append(byItem[x.item], x)
	}
	for _, item := range order {
		v := g.at
		v.item = item
		f := v.finding(KindStripeOnly)
		if err := r.backfill(f, v, byItem[item]); err != nil {
			return err
		}
		if r.st.planned {
			f.Remedy += "; the plan does not list this item"
		}
		r.out(f)
	}
	return nil
}

// chargeCheck reports a charge with more live refunds of the batch than
// items planned on it, beyond the items' own duplicates.
func (r *run) chargeCheck(ctx context.Context, g *group) error {
	if len(g.planned) == 0 {
		return nil
	}
	spare := slices.Clone(g.others)
	empty := 0
	var own, all []Refund // the planned items' own refunds; every item's
	for _, m := range g.ms {
		live := m.live()
		for _, x := range live {
			ref := x.plain()
			ref.Item = m.v.item
			all = append(all, ref)
			if m.planned {
				own = append(own, ref)
			}
		}
		switch {
		case !m.planned:
			spare = append(spare, live...)
		case len(live) == 0:
			empty++
		}
	}
	if len(spare) <= empty {
		return nil
	}
	f := g.at.finding(KindDuplicate)
	f.Planned = len(g.planned)
	if r.opts.Provider == nil {
		extra := srefRefunds(spare[empty:])
		f.Refunds = all
		sums := r.totals(f, extra)
		r.sumRefunds(f, extra)
		r.noteExtras(f, extra)
		f.Message = fmt.Sprintf("%d refunds of the batch on a charge with %s, %d of them for items the plan does not list", len(all), count(f.Planned, "planned item"), len(spare))
		f.Remedy = fmt.Sprintf("%s more than planned was refunded on this charge: run audit --stripe to see which refunds can still be canceled; a succeeded refund cannot be reversed through the API: the customer must be charged again to recover it", amounts(sums))
		r.out(f)
		return nil
	}
	sort.SliceStable(spare, func(a, b int) bool { return spare[a].Created < spare[b].Created })
	f.Message = fmt.Sprintf("%d live refunds of the batch on a charge with %s", len(own)+len(spare), count(f.Planned, "planned item"))
	if err := r.settleExtras(ctx, f, g.at, spare, empty); err != nil {
		return err
	}
	// The planned items' own refunds too, so the charge's whole story is here.
	f.Refunds = append(own, f.Refunds...)
	sort.SliceStable(f.Refunds, func(a, b int) bool { return f.Refunds[a].Created < f.Refunds[b].Created })
	r.out(f)
	return nil
}

// partialInDoubtRemedy says what to do with an item in doubt a partial
// listing does not settle: send it again under its key while half the
// key's life is left, or a person checks.
func (r *run) partialInDoubtRemedy(i uint32) string {
	facts := r.opts.Provider.Facts()
	sent, ok := r.st.sentAt[i]
	if ok && facts.KeyTTL > 0 && r.opts.Now().Sub(time.Unix(sent, 0)) < facts.KeyTTL/2 && sent <= r.opts.Now().Unix()+60 {
		return fmt.Sprintf("no notification names a refund for this item yet, and %s cannot be asked: run refund again with this journal before %s (half of the %v %[1]s is counted on to keep its key): it sends the call again under the same key, which %[1]s answers for the first",
			facts.Name, time.Unix(sent, 0).Add(facts.KeyTTL/2).UTC().Format(time.RFC3339), facts.KeyTTL)
	}
	when := "when is not journaled"
	if ok {
		when = "first sent " + time.Unix(sent, 0).UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("past the time %s is counted on to keep the item's key (%s), no notification names a refund for it, and %[1]s cannot be asked: refund will not send it again. A person checks the payment in %[1]s's Customer Area (or its reports) for a refund with reference %s: if %[1]s has it, the next refund run adopts it once its notification is kept; if none exists, plan the refund again under a new item id in place of this one (docs/providers.md)",
		facts.Name, when, "refundkit:<batch>:<item>:<attempt>")
}

// unknownStatus reports refund x the provider lists for item m in a
// status not on the allow-list: the item is in doubt.
func (r *run) unknownStatus(m *member, x *sref) *Finding {
	f := m.v.finding(KindInDoubt).about(x.Refund)
	f.Code = journal.CodeStatusUnknown
	f.Message = fmt.Sprintf("%s holds refund %s for this item in status %q, which refundkit does not know: whether money moved cannot be told", r.rep.Provider, x.ID, x.Status)
	f.Remedy = "refund sends nothing new for this item and asks the provider for that refund on every run until it says a status refundkit knows; check the refund at the provider"
	return f
}
