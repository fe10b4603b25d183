package paypal

import (
	"time"

	"github.com/refundkit/refundkit/refund"
)

// Rate is the requests per second refundkit assumes a PayPal app may
// send. PayPal publishes no limit ("While we do not publish a rate
// limiting policy, we might temporarily rate limit if we identify traffic
// that appears to be abusive": REST rate limiting guidelines) and answers
// 429 RATE_LIMIT_REACHED past it; this is a conservative guess, which the
// pacer lowers on a 429 and --rate replaces.
const Rate = 10

// Limits is share (0 to 1] of Rate for refund.NewPacer: PayPal names no
// per-endpoint limit, so each endpoint may take the whole share, but for
// the look-up, which is two requests (the capture, then its order: Find).
// Shard workers that share one app divide the share among them.
func Limits(share float64) refund.Limits {
	r := Rate * share
	return refund.Limits{Global: r, Create: r, List: r / lookupRequests, Charges: r, Get: r, ListRequests: lookupRequests}
}

// lookupRequests is what one look-up (Find) sends: the capture, then its
// order.
const lookupRequests = 2

// Backoff spaces retries. PayPal's rate limiting is judged over a minute,
// so retries back off further than Stripe's.
var Backoff = refund.Backoff{Base: 500 * time.Millisecond, Max: 30 * time.Second}
