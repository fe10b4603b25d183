package audit

// Charges, fetched only to tell whether a refund without refundkit
// metadata is a full refund: it is one when its amount is the charge's.

import (
	"context"
	"errors"
	"net/http"
	"time"

	stripe "github.com/stripe/stripe-go/v76"
	stripecharge "github.com/stripe/stripe-go/v76/charge"

	"github.com/refundkit/refundkit/refund"
)

// ChargeGetter fetches one charge.
type ChargeGetter interface {
	Charge(ctx context.Context, id string) (*stripe.Charge, error)
}

// NewCharges returns a ChargeGetter for the API at base
// (refund.DefaultAPIBase when empty) that authenticates with key.
// stripe-go's own retries are off: Run paces and retries every call.
func NewCharges(base, key string) ChargeGetter {
	if base == "" {
		base = refund.DefaultAPIBase
	}
	backend := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL:               stripe.String(base),
		HTTPClient:        &http.Client{Timeout: 80 * time.Second},
		MaxNetworkRetries: stripe.Int64(0),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	})
	return chargeClient{stripecharge.Client{B: backend, Key: key}}
}

type chargeClient struct{ c stripecharge.Client }

func (c chargeClient) Charge(ctx context.Context, id string) (*stripe.Charge, error) {
	params := &stripe.ChargeParams{}
	params.Context = ctx
	return c.c.Get(id, params)
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
		var ch *stripe.Charge
		err := r.call(ctx, "fetching charge "+id, func() error {
			r.rep.chargeCalls.Add(1)
			var err error
			ch, err = r.opts.Charges.Charge(ctx, id)
			return err
		})
		switch {
		case errors.As(err, new(*StripeError)) || ctx.Err() != nil:
			return c, err
		case err != nil:
			_, code, msg := classify(err)
			c.err = code + ": " + msg
		default:
			c.fetched, c.amount = true, ch.Amount
		}
	}
	r.charges[id] = c
	return c, nil
}
