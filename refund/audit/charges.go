package audit

// Payments read for their amount: a charge's tells whether a refund
// without refundkit metadata is a full refund, a payment's whether a full
// refund left it refunded whole.

import (
	"context"
	"errors"

	"github.com/refundkit/refundkit/refund"
)

// ChargeGetter reads a payment: every refund.Provider is one.
type ChargeGetter interface {
	Payment(ctx context.Context, p refund.Payment) (refund.PaymentInfo, error)
}

// payInfo is what a run learned of a payment's amount.
type payInfo struct {
	fetched bool
	amount  int64
	cannot  bool   // the provider cannot read payments
	err     string // why it could not be read
}

// charge returns the charge id, fetched once per run (else the reason in
// err); the error is a *StripeError or ctx's.
func (r *run) charge(ctx context.Context, id string) (payInfo, error) {
	if c, ok := r.charges[id]; ok {
		return c, nil
	}
	var c payInfo
	switch {
	case id == "":
		c.err = "the refund names no charge"
	case r.opts.Charges == nil:
		c.err = "no charge look-up was given"
	default:
		var err error
		c, err = r.readPayment(ctx, "fetching charge "+id, false, func() (refund.PaymentInfo, error) {
			return r.opts.Charges.Payment(ctx, refund.Payment{Charge: id})
		})
		if err != nil {
			return c, err
		}
		if c.cannot {
			c.cannot, c.err = false, "the provider cannot read payments"
		}
	}
	r.charges[id] = c
	return c, nil
}

// whole returns the amount of payment pay, named id, read once per run (a
// charge through charge). The error is a *StripeError or ctx's.
func (r *run) whole(ctx context.Context, id string, pay refund.Payment) (payInfo, error) {
	if pay.Charge != "" && r.opts.Charges != nil {
		return r.charge(ctx, pay.Charge)
	}
	if w, ok := r.wholes[id]; ok {
		return w, nil
	}
	if r.opts.Provider == nil {
		return payInfo{cannot: true}, nil
	}
	w, err := r.readPayment(ctx, "reading payment "+id, true, func() (refund.PaymentInfo, error) {
		return r.opts.Provider.Payment(ctx, pay)
	})
	if err != nil {
		return w, err
	}
	r.wholes[id] = w
	return w, nil
}

// readPayment reads a payment through get, paced and retried; a call get
// answers refund.ErrNoLookup is counted only when countCannot. The error
// is a *StripeError or ctx's.
func (r *run) readPayment(ctx context.Context, what string, countCannot bool, get func() (refund.PaymentInfo, error)) (payInfo, error) {
	var p payInfo
	var info refund.PaymentInfo
	err := r.call(ctx, refund.EndpointCharges, what, func() error {
		var err error
		info, err = get()
		if errors.Is(err, refund.ErrNoLookup) {
			if countCannot {
				r.rep.chargeCalls.Add(1)
			}
			p.cannot = true
			return nil
		}
		if !info.Kept { // else the look-up's read: no request
			r.rep.chargeCalls.Add(1)
		}
		return err
	})
	switch {
	case errors.As(err, new(*StripeError)) || ctx.Err() != nil:
		return p, err
	case err != nil:
		_, code, msg := classify(err)
		p.err = code + ": " + msg
	case !p.cannot:
		p.fetched, p.amount = true, info.Amount
	}
	return p, nil
}
