package adyen

import (
	"time"

	"github.com/refundkit/refundkit/refund"
)

// Rate is the refund requests per second refundkit assumes an Adyen API
// credential may send: Adyen publishes no limit for modifications (it
// answers 429 past one), so this is a conservative guess, which --rate
// replaces.
const Rate = 10

// Limits is share (0 to 1] of Rate for refund.NewPacer. Only creations go
// to Adyen: look-ups read the kept notifications.
func Limits(share float64) refund.Limits {
	return refund.Limits{Create: Rate * share}
}

// Backoff spaces retries of a call Adyen asks to repeat.
var Backoff = refund.Backoff{Base: 250 * time.Millisecond, Max: 20 * time.Second}
