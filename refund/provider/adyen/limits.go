package adyen

import (
	"time"

	"github.com/refundkit/refundkit/refund"
)

// Rate is the refund requests per second refundkit assumes an Adyen API
// credential may send. Adyen publishes no rate limit for modifications
// (it answers 429 past one, which the pacer slows for); this is a
// conservative guess, which --rate replaces.
const Rate = 10

// Limits is share (0 to 1] of Rate for refund.NewPacer. Only refund
// creations go to Adyen: look-ups and reads are of the notifications the
// receiver kept, local reads that take none of the account's budget, so
// the creations' budget is the account's and no other is kept.
func Limits(share float64) refund.Limits {
	return refund.Limits{Create: Rate * share}
}

// Backoff spaces retries of a call Adyen asks to repeat (704, transient
// errors, 429).
var Backoff = refund.Backoff{Base: 250 * time.Millisecond, Max: 20 * time.Second}
