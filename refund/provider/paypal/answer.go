package paypal

// PayPal's refund object, read into refundkit's terms.

import (
	"errors"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/provider/paypal/wire"
)

// statusOf maps PayPal's refund statuses onto refundkit's.
var statusOf = map[string]string{
	"COMPLETED": refund.RefundSucceeded,
	"PENDING":   refund.RefundPending,
	"FAILED":    refund.RefundFailed,
	"CANCELLED": refund.RefundCanceled,
}

// paypalRefund is a refund as PayPal shows it.
type paypalRefund struct {
	ID            string `json:"id"`
	Status        string `json:"status"`
	StatusDetails struct {
		Reason string `json:"reason"`
	} `json:"status_details"`
	Amount    *amountJSON `json:"amount"`
	CustomID  string      `json:"custom_id"`
	Breakdown struct {
		TotalRefunded *amountJSON `json:"total_refunded_amount"`
	} `json:"seller_payable_breakdown"`
	CreateTime string `json:"create_time"`
	Links      []struct {
		Rel  string `json:"rel"`
		Href string `json:"href"`
	} `json:"links"`
}

// refund is r in refundkit's terms; meta reads its custom_id.
func (r *paypalRefund) refund(meta func(custom string) map[string]string) (refund.Refund, error) {
	status, ok := statusOf[r.Status]
	switch {
	case r.ID == "":
		return refund.Refund{}, errNoID
	case !ok:
		return refund.Refund{}, &statusError{r.Status}
	case r.Amount == nil:
		return refund.Refund{}, errNoAmount
	}
	amount, err := wire.ParseValue(r.Amount.Value, r.Amount.CurrencyCode)
	switch {
	case err != nil:
		return refund.Refund{}, err
	case amount <= 0:
		return refund.Refund{}, errNoAmount
	}
	out := refund.Refund{ID: r.ID, Status: status, Amount: amount, Currency: strings.ToLower(r.Amount.CurrencyCode),
		Capture: r.capture(), Metadata: meta(r.CustomID)}
	if status == refund.RefundFailed || status == refund.RefundPending {
		out.FailureReason = r.StatusDetails.Reason
	}
	if t, err := time.Parse(time.RFC3339, r.CreateTime); err == nil {
		out.Created = t.Unix()
	}
	return out, nil
}

// capture is the id of the capture the refund refunds, from its "up"
// link; "" when it has none.
func (r *paypalRefund) capture() string {
	for _, l := range r.Links {
		if l.Rel != "up" {
			continue
		}
		u, err := url.Parse(l.Href)
		if err != nil {
			return ""
		}
		if id, ok := strings.CutPrefix(u.Path, "/v2/payments/captures/"); ok && !strings.Contains(id, "/") {
			return id
		}
	}
	return ""
}

// Why an answer is not understood.
var (
	errNoID     = errors.New("refund without an id")
	errNoAmount = errors.New("refund without a positive amount")
)

type statusError struct{ status string }

func (e *statusError) Error() string { return "refund status " + strconv.Quote(e.status) + " unknown" }
