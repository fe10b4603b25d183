package paypal

import (
	"time"

	"github.com/refundkit/refundkit/refund"
)

// Rate is the requests per second refundkit assumes a PayPal app may
// send: PayPal publishes no limit, so this is a conservative guess, which
// the pacer lowers on a 429 and --rate replaces.
const Rate = 10

// Limits is share (0 to 1] of Rate for refund.NewPacer, for each
// endpoint: the look-up is two requests (the capture, then its order).
func Limits(share float64) refund.Limits {
	r := Rate * share
	return refund.Limits{Global: r, Create: r, List: r / lookupRequests, Charges: r, Get: r, ListRequests: lookupRequests}
}

const lookupRequests = 2

// Backoff spaces retries, further than Stripe's: PayPal judges its rate
// over a minute.
var Backoff = refund.Backoff{Base: 500 * time.Millisecond, Max: 30 * time.Second}
