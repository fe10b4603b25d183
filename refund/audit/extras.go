package audit

// Acting on what the provider has: one refund kept per item, the others
// canceled or owned up to, and the journal backfilled.

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
)

// settleExtras fills f, about item (or payment) v, with refunds xs (oldest
// first), of which keep are its own: those that can no longer be canceled are
// kept first, so the extras are as reversible as can be. Extras are
// canceled when asked and possible, and f gets the remedy.
func (r *run) settleExtras(ctx context.Context, f *Finding, v itemView, xs []*sref, keep int) error {
	order := firstThen(xs, func(x *sref) bool { return !x.reversible() })
	kept := map[*sref]bool{}
	for _, x := range order[:min(keep, len(order))] {
		kept[x] = true
	}
	for _, x := range xs {
		switch {
		case kept[x]:
			x.Action = ActionKeep
		case !x.reversible():
			r.irreversible(x, f.where())
		default:
			owner := v.item
			if owner == "" && x.batch == v.batch {
				owner = x.item
			}
			if err := r.cancelExtra(ctx, x, owner, v); err != nil {
				return err
			}
		}
		if !kept[x] {
			r.sumRefunds(f, []Refund{x.Refund})
		}
		ref := x.Refund
		if v.item == "" && x.batch == v.batch {
			ref.Item = x.item
		}
		f.Refunds = append(f.Refunds, ref)
	}
	f.Remedy = r.duplicateRemedy(f, false)
	return nil
}

// cancelExtra cancels an extra refund that still requires action when
// CancelExtras is set, journaling the cancel; owner is the item it is for.
func (r *run) cancelExtra(ctx context.Context, x *sref, owner string, v itemView) error {
	x.Action = ActionCancelable
	where := itemWhere(v.batch, owner)
	if owner == "" {
		where = fmt.Sprintf("payment %s of batch %s", v.target, v.batch)
	}
	if !r.opts.CancelExtras || owner == "" {
		if r.opts.CancelExtras {
			x.Note = "it names no item to journal the cancel under: cancel it in the dashboard once matched"
		}
		r.rep.Cancelable++
		return nil
	}
	var res refund.Refund
	err := r.call(ctx, refund.EndpointCreate, "canceling "+x.ID, func() error {
		r.rep.cancelCalls.Add(1)
		var err error
		// Once sent, a cancel's answer must be journaled, signal or not.
		res, err = r.opts.Provider.Cancel(context.WithoutCancel(ctx), x.ID)
		return err
	})
	if err != nil {
		if errors.As(err, new(*StripeError)) || ctx.Err() != nil {
			return err
		}
		_, code, msg := classify(err)
		// A refusal means the refund went on: it cannot be reversed.
		r.irreversible(x, where)
		x.Note = fmt.Sprintf("Stripe refused the cancel (%s: %s)", code, msg)
		return nil
	}
	if res.Status != refund.RefundCanceled {
		r.irreversible(x, where)
		x.Status, x.Note = res.Status, r.rep.Provider+" answered the cancel with status "+res.Status
		return nil
	}
	x.Status, x.Action = res.Status, ActionCanceled
	r.rep.Canceled++
	r.addTo(r.rep.CanceledAmount, x.Currency, x.Amount, "the total of canceled extra refunds", where)
	rec := r.record(journal.TypeCanceled, owner, v, x)
	if err := r.opts.Actions.Append(rec); err != nil {
		return &JournalError{err}
	}
	return nil
}

// backfill fills a stripe_only finding with refunds xs and journals them
// when Backfill is set, the one the item keeps first.
func (r *run) backfill(f *Finding, v itemView, xs []*sref) error {
	var recs []*journal.Record
	for _, x := range firstThen(xs, func(x *sref) bool { return x.Action == ActionKeep }) {
		ref := x.plain()
		if r.opts.Backfill != nil {
			ref.Action = ActionBackfilled
			recs = append(recs, r.record(journal.TypeRefunded, v.item, v, x))
		}
		f.Refunds = append(f.Refunds, ref)
		r.sumRefunds(f, []Refund{ref})
	}
	if r.opts.Backfill == nil {
		f.Remedy = "the journal does not know this refund: a refund run finds it at Stripe before any call and adopts it (unless run with --no-lookup, which would refund the item again); to complete the journal now, run audit --stripe with --backfill JOURNAL"
		return nil
	}
	if err := r.opts.Backfill.Append(recs...); err != nil {
		return &JournalError{err}
	}
	r.rep.Backfilled += len(recs)
	f.Remedy = "journaled into " + r.opts.Backfill.Path() + " (source backfill): refund skips this item from now on"
	return nil
}

// irreversible marks extra x as past canceling, counted in the report.
func (r *run) irreversible(x *sref, where string) {
	x.Action = ActionIrreversible
	r.rep.Irreversible++
	r.addTo(r.rep.IrreversibleAmount, x.Currency, x.Amount, "the total of irreversible extra refunds", where)
}

// firstThen is xs, those first says first, each part in its order.
func firstThen(xs []*sref, first func(*sref) bool) []*sref {
	out := make([]*sref, 0, len(xs))
	for _, pass := range []bool{true, false} {
		for _, x := range xs {
			if first(x) == pass {
				out = append(out, x)
			}
		}
	}
	return out
}

// record is the journal record of a refund found or canceled by audit.
func (r *run) record(typ journal.Type, item string, v itemView, x *sref) *journal.Record {
	rec := &journal.Record{
		V: journal.Version, Type: typ, Time: r.opts.Now().UTC(), Batch: v.batch, Item: item,
		Attempt: x.attempt, Amount: x.Amount, Currency: x.Currency, Refund: x.ID, Status: x.Status,
	}
	p := v.pay
	if p.Charge != "" && p.PaymentIntent != "" {
		// A payment named both ways: a record names the charge refunded.
		p = refund.Payment{Charge: cmp.Or(x.charge, p.Charge)}
	}
	rec.Charge, rec.PaymentIntent, rec.Capture, rec.PSPReference = p.Charge, p.PaymentIntent, p.Capture, p.PSPReference
	if x.attempt > 0 {
		rec.Key = refund.IdempotencyKey(v.batch, item, x.attempt)
	}
	if typ == journal.TypeRefunded {
		rec.Source = journal.SourceBackfill
	}
	return rec
}
