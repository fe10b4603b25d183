package audit

// Attributing refunds without refundkit metadata to items: the journal's
// word first, then (with AllRefunds) an exact match to what one item asked.

import (
	"cmp"
	"context"
	"fmt"
	"sort"

	"github.com/refundkit/refundkit/refund/money"
)

// unattributed is a refund without metadata that no item can be given.
type unattributed struct {
	x   *sref
	why string
}

// attribute gives refunds without refundkit metadata to items (journalNamed;
// with AllRefunds, an exact and only match) and returns the rest.
func (r *run) attribute(ctx context.Context, gs []*group, all []*sref, byID map[string]*sref) ([]unattributed, error) {
	var open []*member // planned items without a refund
	for _, g := range gs {
		for _, m := range g.ms {
			if err := r.journalNamed(ctx, m, byID); err != nil {
				return nil, err
			}
			if m.planned && len(m.refunds) == 0 && len(m.misnamed) == 0 {
				open = append(open, m)
			}
		}
	}
	if !r.opts.AllRefunds {
		return nil, nil
	}
	var free []*sref
	for _, x := range all {
		if x.live && x.batch == "" && !x.claimed {
			free = append(free, x)
		}
	}
	if len(free) == 0 {
		return nil, nil
	}
	cands := make([][]*member, len(free))
	matched := make(map[*member][]*sref, len(open))
	for k, x := range free {
		for _, m := range open {
			ok, err := r.matches(ctx, m, x)
			if err != nil {
				return nil, err
			}
			if ok {
				cands[k] = append(cands[k], m)
				matched[m] = append(matched[m], x)
			}
		}
	}
	var out []unattributed
	for k, x := range free {
		c := cands[k]
		switch {
		case len(c) == 1 && len(matched[c[0]]) == 1:
			m := c[0]
			m.refunds = append(m.refunds, x)
			x.claimed = true
			continue
		case len(c) > 1:
			out = append(out, unattributed{x, fmt.Sprintf("%d items planned on this charge match it", len(c))})
		case len(c) == 1:
			var also []*sref
			for _, y := range matched[c[0]] {
				if y != x {
					also = append(also, y)
				}
			}
			out = append(out, unattributed{x, fmt.Sprintf("item %s matches it and also %s, without metadata too", c[0].v.item, refundIDs(srefRefunds(also)))})
		case len(open) == 0:
			out = append(out, unattributed{x, "every item planned on this charge already has its refund"})
		case r.charges[x.charge].err != "":
			out = append(out, unattributed{x, "the charge's amount, which a full refund is matched by, could not be fetched (" + r.charges[x.charge].err + ")"})
		default:
			out = append(out, unattributed{x, "it is not what any item planned on this charge without a refund asked for (its amount, or the charge's whole amount for a full refund)"})
		}
	}
	return out, nil
}

func srefRefunds(xs []*sref) []Refund {
	out := make([]Refund, len(xs))
	for k, x := range xs {
		out[k] = x.Refund
	}
	return out
}

// journalNamed adds to m the live refunds without metadata its journal
// names that are what it asked for; another it names is misnamed.
func (r *run) journalNamed(ctx context.Context, m *member, byID map[string]*sref) error {
	if m.sl.flags&flagRefunded == 0 {
		return nil
	}
	own := m.ownRefund()
	for _, j := range r.journalRefunds(m.v.idx) {
		x := byID[j.ID]
		if x == nil || !x.live || x.batch == m.v.batch && x.item == m.v.item {
			continue // journal_only, or its own by metadata
		}
		var why string
		switch {
		case x.batch != "":
			why = fmt.Sprintf("the journal names %s as this item's refund, but its metadata names batch %s, item %s", x.ID, x.batch, x.item)
		case own:
			why = fmt.Sprintf("the journal names %s, which carries no refundkit metadata, as this item's refund, but another refund carries the item's metadata", x.describe())
		default:
			ok, err := r.matches(ctx, m, x)
			if err != nil {
				return err
			}
			if ok || m.sl.flags&flagRequested == 0 { // nothing says what was asked: the journal's word stands
				x.claimed = true
				m.refunds = append(m.refunds, x)
				sort.SliceStable(m.refunds, func(a, b int) bool { return m.refunds[a].Created < m.refunds[b].Created })
				continue
			}
			why = fmt.Sprintf("the journal names %s as this item's refund, but it is not what the item asked for (%s)", x.describe(), r.asked(m, x))
		}
		x.claimed = true // named by this finding, not again as unattributed
		m.misnamed = append(m.misnamed, x)
		m.why = append(m.why, why)
	}
	return nil
}

// asked says what item m asked for, for a message about refund x.
func (r *run) asked(m *member, x *sref) string {
	if m.sl.reqAmount > 0 {
		return r.askedFor(m.sl, x.Currency)
	}
	if c := r.charges[x.charge]; c.err == "" && c.fetched {
		return "a full refund of the " + money.Format(c.amount, cmp.Or(r.st.currencies.Name(m.sl.reqCurrency), x.Currency)) + " charge"
	}
	return "a full refund of a charge whose amount could not be fetched"
}

// matches reports whether x, a refund without refundkit metadata, is
// exactly what item m asked for (a full refund: the charge's amount).
func (r *run) matches(ctx context.Context, m *member, x *sref) (bool, error) {
	if m.sl.flags&flagRequested == 0 || r.mismatchOf(m.sl, x.Amount, x.Currency) != "" {
		return false, nil
	}
	if m.sl.reqAmount > 0 {
		return true, nil
	}
	c, err := r.charge(ctx, x.charge)
	if err != nil {
		return false, err
	}
	return c.fetched && x.Amount == c.amount, nil
}

// unattributedFinding reports a refund no item can be given.
func (r *run) unattributedFinding(t *target, batch string, u unattributed) *Finding {
	v := itemView{batch: batch, target: t.id, pay: t.pay}
	ref := u.x.Refund
	ref.Action = ActionUnattributed
	f := v.finding(KindStripeOnly).about(ref)
	f.Remedy = fmt.Sprintf("this refund carries no refundkit metadata and %s, so it is counted as no item's refund and was not backfilled: a person decides whether it refunded an item of the batch; if it did, refunding that item again refunds the charge twice (refund --all-refunds holds an item whose charge has such a refund)", u.why)
	return f
}
