package audit

import (
	"fmt"

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
		if batch == "" || !refund.Live(x) {
			continue
		}
		if _, audited := batches.Lookup(batch); !audited {
			continue
		}
		if _, known := r.st.idx.Find(batch, item); known {
			continue
		}
		f := &Finding{Finding: KindStripeOnly, Batch: batch, Item: item, PSPReference: x.PSPReference,
			Refunds: []Refund{{ID: x.ID, Amount: x.Amount, Currency: x.Currency, Status: x.Status, Created: x.Created}},
			Amount:  x.Amount, Currency: x.Currency}
		f.Message = fmt.Sprintf("%s told of refund %s of batch %s for item %s on payment %s, which no journal or plan audited here names",
			r.rep.Provider, x.ID, batch, item, x.PSPReference)
		f.Remedy = "a journal of this batch is missing from the audit, or the item was renamed: audit with every journal of the batch; if the item is still planned under another name, that item must not be refunded again"
		r.out(f)
	}
}
