package paypal

import (
	"encoding/json"

	"github.com/refundkit/refundkit/refund"
)

// ReadRefund reads a refund object of PayPal's (Payments v2, as an answer
// or a webhook event's resource shows it) as Get does: the one mapping of
// status, amount, capture and custom_id, shared with the webhook reader.
// A custom_id too long to carry batch, item and attempt (the digest) names
// no item here: only its sender can match it.
func ReadRefund(data []byte) (refund.Refund, error) {
	var r paypalRefund
	if err := json.Unmarshal(data, &r); err != nil {
		return refund.Refund{}, err
	}
	return r.refund(metadata)
}
