package audit

// Charges, fetched only to tell whether a refund without refundkit
// metadata is a full refund: it is one when its amount is the charge's.

import (
	"context"
	"errors"

	"github.com/refundkit/refundkit/refund"
)

// ChargeGetter fetches the amount of one charge. A Provider that can
// (refund/stripe's) is one.
type ChargeGetter interface {
	ChargeAmount(ctx context.Context, id string) (int64, error)
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
		err := r.call(ctx, refund.EndpointCharges, "fetching charge "+id, func() error {
			r.rep.chargeCalls.Add(1)
			var err error
			amount, err = r.opts.Charges.ChargeAmount(ctx, id)
			return err
		})
		switch {
		case errors.As(err, new(*StripeError)) || ctx.Err() != nil:
			return c, err
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
