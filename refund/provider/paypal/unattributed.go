package paypal

import "github.com/refundkit/refundkit/refund"

// unattributed marks r as a refund whose maker cannot be told: it holds
// the item (refund.Refund.Unattributed).
func unattributed(r refund.Refund) refund.Refund {
	r.Unattributed = true
	r.Metadata = nil
	return r
}
