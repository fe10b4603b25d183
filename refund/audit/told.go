package audit

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/refundkit/refundkit/refund"
)

// toldPass reports the refunds the provider told of on its own
// (Options.Told) that name an audited batch and an item nobody knows: they
// moved money for an item nobody accounts for.
func (r *run) toldPass() {
	batches := r.st.idx.Batches()
	for k := range r.opts.Told {
		x := &r.opts.Told[k]
		batch, item := x.Metadata[refund.MetaBatch], x.Metadata[refund.MetaItem]
		if batch == "" {
			continue
		}
		if _, audited := batches.Lookup(batch); !audited {
			continue
		}
		if i, known := r.st.idx.Find(batch, item); known {
			r.toldOtherwise(i, x)
			continue
		}
		if !refund.Live(x) {
			continue // moved no money: nobody's to account for
		}
		f := (&Finding{Finding: KindStripeOnly, Batch: batch, Item: item, Charge: x.Charge, PaymentIntent: x.PaymentIntent,
			Capture: x.Capture, PSPReference: x.PSPReference}).about(refundOf(x))
		f.Message = fmt.Sprintf("%s told of refund %s of batch %s for item %s on payment %s, which no journal or plan audited here names",
			r.rep.Provider, x.ID, batch, item, cmp.Or(x.PSPReference, x.Capture, x.Charge, x.PaymentIntent))
		f.Remedy = "a journal of this batch is missing from the audit, or the item was renamed: audit with every journal of the batch; if the item is still planned under another name, that item must not be refunded again"
		r.out(f)
	}
}

// toldOtherwise reports a refund x the provider's events tell of for
// item i that contradicts what the journals bind to the item: credited to
// it, yet ended without moving money, or of another amount, currency or
// payment; or live, yet not the refund the journals credit it with (a
// second refund of the item, or one of another item's relabelled). None
// when they agree or x tells too little.
func (r *run) toldOtherwise(i uint32, x *refund.Refund) {
	v := r.view(i)
	credited := r.credited(i)
	var mine *Refund
	for k := range credited {
		if credited[k].ID == x.ID {
			mine = &credited[k]
		}
	}
	var why string
	switch {
	case refund.Contradicted(x):
		// Told with its oldest event's fields: what a later one says
		// otherwise (failed, another amount or item) must not hide.
		why = "they disagree among themselves on its status, payment, amount, currency or metadata: which is right cannot be told from them"
	case !refund.Live(x) && mine != nil:
		why = fmt.Sprintf("they tell it ended %s (no money moved, or it came back), and the journals credit the item with it", x.Status)
	case !refund.Live(x):
		return // an attempt that moved no money, not the item's credit
	case mine == nil && len(credited) > 0:
		why = fmt.Sprintf("the journals credit the item with %s, not %s", credited[0].ID, x.ID)
	case mine == nil:
		return // not refunded in the journals: the passes before say what is owed
	case x.Amount != 0 && mine.Amount != 0 && x.Amount != mine.Amount:
		why = fmt.Sprintf("they tell it is of %d, the journals credit %d", x.Amount, mine.Amount)
	case x.Currency != "" && mine.Currency != "" && !strings.EqualFold(x.Currency, mine.Currency):
		why = fmt.Sprintf("they tell it is in %s, the journals credit %s", x.Currency, mine.Currency)
	default:
		// A refund names its charge and its payment intent both: only a
		// field the item names too can differ.
		for _, f := range [][2]string{{x.Charge, v.pay.Charge}, {x.PaymentIntent, v.pay.PaymentIntent}, {x.Capture, v.pay.Capture}, {x.PSPReference, v.pay.PSPReference}} {
			if f[0] != "" && f[1] != "" && f[0] != f[1] {
				why = fmt.Sprintf("they tell it is on %s, the item is on %s", f[0], f[1])
			}
		}
		if why == "" {
			return
		}
	}
	f := v.finding(KindEventsContradict).about(refundOf(x))
	f.Message = fmt.Sprintf("%s's signed events tell of refund %s for this item, but %s", r.rep.Provider, x.ID, why)
	f.Remedy = fmt.Sprintf("the item's refund is not known to be right: look refund %s up at %s (its payment, amount and metadata) and compare it with the journals before anything is refunded again", x.ID, r.rep.Provider)
	r.out(f)
}
