package stripe

import (
	"time"

	"github.com/refundkit/refundkit/refund"
)

// Stripe's documented rate limits (docs.stripe.com/rate-limits): per
// account 100 requests/s in live mode and 25 in test mode; per endpoint 25/s
// unless stated otherwise (refunds state nothing else).
const (
	LiveRate     = 100
	TestRate     = 25
	EndpointRate = 25
)

// Limits is share (0 to 1] of Stripe's documented limits for the mode, for
// refund.NewPacer. Shard workers that share one account divide the share
// among them.
func Limits(live bool, share float64) refund.Limits {
	global := float64(TestRate)
	if live {
		global = LiveRate
	}
	e := EndpointRate * share
	return refund.Limits{Global: global * share, Create: e, List: e, Charges: e, Get: e}
}

// Backoff spaces retries within Stripe's rate limits.
var Backoff = refund.Backoff{Base: 250 * time.Millisecond, Max: 16 * time.Second}
