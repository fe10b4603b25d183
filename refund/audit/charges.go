package audit

// Charges, fetched only to tell whether a refund without refundkit
// metadata is a full refund: it is one when its amount is the charge's.

import (
	"context"
	"errors"

	"github.com/refundkit/refundkit/refund"
)

// ChargeGetter reads a payment: every refund.Provider is one
// (refund.Provider.Payment), the one way refundkit reads a payment.
type ChargeGetter interface {
	Payment(ctx context.Context, p refund.Payment) (refund.PaymentInfo, error)
}

// chargeInfo is what a run learned of a charge.
type chargeInfo struct {
	fetched bool
	amount  int64
	err     string // why it could not be fetched
}

// charge returns the charge id, fetched once per run. A charge that cannot
// be fetched (no getter, refused, unknown) has fetched false and the
// reason in err; the error is a *StripeError or ctx's.
func (r *run) charge(ctx context.Context, id string) (chargeInfo, error) {
	if c, ok := r.charges[id]; ok {
		return c, nil
	}
	var c chargeInfo
	switch {
	case id == "":
		c.err = "the refund names no charge"
	case r.opts.Charges == nil:
		c.err = "no charge look-up was given"
	default:
		var amount int64
		cannot := false
		err := r.call(ctx, refund.EndpointCharges, "fetching charge "+id, func() error {
			info, err := r.opts.Charges.Payment(ctx, refund.Payment{Charge: id})
			if errors.Is(err, refund.ErrNoLookup) {
				cannot = true
				return nil
			}
			r.rep.chargeCalls.Add(1)
			amount = info.Amount
			return err
		})
		switch {
		case errors.As(err, new(*StripeError)) || ctx.Err() != nil:
			return c, err
		case cannot:
			c.err = "the provider cannot read payments"
		case err != nil:
			_, code, msg := classify(err)
			c.err = code + ": " + msg
		default:
			c.fetched, c.amount = true, amount
		}
	}
	r.charges[id] = c
	return c, nil
}
