package paypal

// The look-up: a capture's refunds, from the order Payments v2 names (each
// linked "up" to its capture); else the capture's status still says
// whether refunds exist.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/money"
	"github.com/refundkit/refundkit/refund/provider/paypal/wire"
)

// captureJSON is a captured payment as Payments v2 shows it.
type captureJSON struct {
	ID                string      `json:"id"`
	Status            string      `json:"status"`
	Amount            *amountJSON `json:"amount"`
	SupplementaryData struct {
		RelatedIDs struct {
			OrderID string `json:"order_id"`
		} `json:"related_ids"`
	} `json:"supplementary_data"`
}

// orderJSON is an order as Orders v2 shows it.
type orderJSON struct {
	ID            string `json:"id"`
	PurchaseUnits []struct {
		Payments struct {
			Captures []idJSON       `json:"captures"`
			Refunds  []paypalRefund `json:"refunds"`
		} `json:"payments"`
	} `json:"purchase_units"`
}

// idJSON is an object of which only the id is read.
type idJSON struct {
	ID string `json:"id"`
}

// Find returns the capture's refunds, newest first, from its order, and
// one unattributed refund for what PayPal says it gave back beyond them.
// Only a capture that cannot be read is an error.
func (c *Client) Find(ctx context.Context, p refund.Payment) ([]refund.Refund, error) {
	if p.Capture == "" {
		return nil, refund.RefusedHere("capture_required", errNoCapture)
	}
	cp, status, err := c.capture(ctx, p.Capture)
	if err != nil {
		return nil, err
	}
	orderID := cp.SupplementaryData.RelatedIDs.OrderID
	if orderID == "" {
		return cp.unlisted(nil, 0, "it names no order (not made through Orders v2)"), nil
	}
	var o orderJSON
	status, err = c.do(ctx, http.MethodGet, "/v2/checkout/orders/"+url.PathEscape(orderID), nil, "", &o)
	if err != nil {
		var f *refund.Failure
		if errors.As(err, &f) && (f.Class == refund.ClassFinal || f.Status == http.StatusForbidden) {
			// The order is gone or not this app's (the credentials just
			// read the capture): its refunds cannot be listed.
			return cp.unlisted(nil, 0, fmt.Sprintf("its order %s cannot be read (%d %s)", orderID, f.Status, f.Code)), nil
		}
		return nil, err
	}
	refunds, total, err := o.refundsOf(p.Capture)
	if errors.Is(err, errNotInOrder) {
		return cp.unlisted(nil, 0, fmt.Sprintf("its order %s does not list it", orderID)), nil
	}
	if err != nil {
		return nil, refund.Unreadable("paypal", status, err)
	}
	return cp.unlisted(refunds, total, fmt.Sprintf("its order %s does not list them all", orderID)), nil
}

// capture reads capture id, checking the answer is of it.
func (c *Client) capture(ctx context.Context, id string) (captureJSON, int, error) {
	var cp captureJSON
	status, err := c.do(ctx, http.MethodGet, "/v2/payments/captures/"+url.PathEscape(id), nil, "", &cp)
	if err == nil && cp.ID != id {
		err = refund.Unreadable("paypal", status, fmt.Errorf("asked for capture %s, got %q", id, cp.ID))
	}
	if err == nil && cp.Amount != nil {
		if amount, perr := wire.ParseValue(cp.Amount.Value, cp.Amount.CurrencyCode); perr == nil {
			c.captured.Put(id, refund.PaymentInfo{Amount: amount, Currency: strings.ToLower(cp.Amount.CurrencyCode)})
		}
	}
	return cp, status, err
}

var errNotInOrder = errors.New("the order does not list the capture")

// refundsOf returns the order's refunds of capture, newest first, and the
// most any says the capture has given back. A refund without an "up" link
// is the capture's when its purchase unit holds no other capture.
func (o *orderJSON) refundsOf(capture string) ([]refund.Refund, int64, error) {
	var out []refund.Refund
	var total int64
	found := false
	for _, pu := range o.PurchaseUnits {
		pay := &pu.Payments
		if !slices.Contains(pay.Captures, idJSON{capture}) {
			continue
		}
		found = true
		for i := range pay.Refunds {
			r := &pay.Refunds[i]
			up := r.capture()
			if up != "" && up != capture {
				continue
			}
			x, err := r.refund(metadata)
			if err != nil {
				return nil, 0, fmt.Errorf("refund %s in order %s: %w", r.ID, o.ID, err)
			}
			if up == "" {
				x.Capture = capture
			}
			// Whose a digest custom_id is only Create can tell.
			if up == "" && len(pay.Captures) > 1 || strings.HasPrefix(r.CustomID, digestPrefix) {
				x = unattributed(x)
			}
			if t := r.Breakdown.TotalRefunded; t != nil && (up != "" || len(pay.Captures) == 1) {
				if n, err := wire.ParseValue(t.Value, t.CurrencyCode); err == nil {
					total = max(total, n)
				}
			}
			out = append(out, x)
		}
	}
	if !found {
		return nil, 0, errNotInOrder
	}
	slices.Reverse(out) // orders list payments oldest first
	slices.SortStableFunc(out, func(a, b refund.Refund) int { return cmp.Compare(b.Created, a.Created) })
	return out, total, nil
}

// unlisted adds to the capture's listed refunds one unattributed refund
// for what PayPal says it has given back beyond them (why: what keeps the
// list from being whole); it holds the item, being maybe refundkit's own.
func (cp *captureJSON) unlisted(refunds []refund.Refund, total int64, why string) []refund.Refund {
	var live int64
	anyLive, summed := false, true
	for i := range refunds {
		if r := &refunds[i]; refund.Live(r) {
			if summed {
				var err error
				live, err = money.Add(live, r.Amount, r.Currency)
				summed = err == nil
			}
			anyLive = true
		}
	}
	var amount int64 // captured, when readable
	currency := ""
	if cp.Amount != nil {
		currency = strings.ToLower(cp.Amount.CurrencyCode)
		amount, _ = wire.ParseValue(cp.Amount.Value, cp.Amount.CurrencyCode)
	}
	var missing int64 // 0: some, how much unknown
	switch {
	case anyLive && (!summed || live < 0):
		// No sum (beyond int64, or below 0): how much is missing is unknown.
	case cp.Status == "REFUNDED" && live < amount:
		missing = amount - live
	case total > live:
		missing = total - live
	case (cp.Status == "REFUNDED" || cp.Status == "PARTIALLY_REFUNDED") && !anyLive: // PayPal says it holds refunds
	default:
		return refunds
	}
	r := refund.Refund{ID: "unlisted:" + cp.ID, Capture: cp.ID, Amount: missing, Currency: currency, Status: refund.RefundSucceeded,
		FailureReason: fmt.Sprintf("PayPal says capture %s is %s and its refunds cannot all be listed: %s", cp.ID, cp.Status, why)}
	return append(refunds, unattributed(r))
}

// unattributed marks r as a refund whose maker cannot be told.
func unattributed(r refund.Refund) refund.Refund {
	r.Unattributed = true
	r.Metadata = nil
	return r
}
