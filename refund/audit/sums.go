package audit

// Every sum an audit makes, checked: a total beyond int64 stops the audit
// with a *money.TotalError rather than wrap.

import (
	"errors"
	"fmt"

	"github.com/refundkit/refundkit/refund/money"
)

// overflowed keeps the first sum that went beyond int64: from then on no
// finding is emitted, and Run ends with it.
func (r *run) overflowed(what, where string, err error) {
	var oe *money.OverflowError
	if errors.As(err, &oe) {
		r.overflow.CompareAndSwap(nil, &money.TotalError{What: what, Where: where, Err: oe})
	}
}

// add is total+amount, checked; beyond int64, total as it was.
func (r *run) add(total, amount int64, currency, what, where string) int64 {
	t, err := money.Add(total, amount, currency)
	if err != nil {
		r.overflowed(what, where, err)
	}
	return t
}

// addTo adds amount to t's total of currency, checked as add is.
func (r *run) addTo(t money.Totals, currency string, amount int64, what, where string) {
	if err := t.Add(currency, amount); err != nil {
		r.overflowed(what, where, err)
	}
}

// sumRefunds adds refunds rs to f's amount, checked, its currency the last one's.
func (r *run) sumRefunds(f *Finding, rs []Refund) {
	for _, x := range rs {
		f.Amount = r.add(f.Amount, x.Amount, x.Currency, "the amount of a "+f.Finding+" finding", f.where())
		f.Currency = x.Currency
	}
}

// totals sums refunds rs per currency, for a finding's message.
func (r *run) totals(f *Finding, rs []Refund) money.Totals {
	t := money.Totals{}
	for _, x := range rs {
		r.addTo(t, x.Currency, x.Amount, "the amounts of a "+f.Finding+" finding", f.where())
	}
	return t
}

// where names what f is about: its item, or its payment.
func (f *Finding) where() string {
	if f.Item != "" {
		return itemWhere(f.Batch, f.Item)
	}
	for _, id := range []string{f.Charge, f.PaymentIntent, f.Capture, f.PSPReference} {
		if id != "" {
			return fmt.Sprintf("payment %s of batch %s", id, f.Batch)
		}
	}
	return "batch " + f.Batch
}

// itemWhere names an item in an overflow's message.
func itemWhere(batch, item string) string {
	return fmt.Sprintf("item %s of batch %s", item, batch)
}

// totalName names a status's total in Report.Amounts, as Lines says it.
func totalName(status string) string {
	if status == "in_doubt" {
		return "the in-doubt total"
	}
	return "the " + status + " total"
}
