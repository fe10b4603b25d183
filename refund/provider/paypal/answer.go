package paypal

// PayPal's answers in refundkit's terms: its refund object, the custom_id
// that says whose a refund is, and its errors.

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/provider/httpx"
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
		return refund.Refund{}, errors.New("refund without an id")
	case !ok:
		return refund.Refund{}, fmt.Errorf("refund status %q unknown", r.Status)
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

// capture is the id of the capture the refund's "up" link names, or "".
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

var errNoAmount = errors.New("refund without a positive amount")

// Where a PayPal refund says whose it is: custom_id (PayPal has no
// metadata; invoice_id is the merchant's).

const (
	customPrefix  = "refundkit,"
	digestPrefix  = customPrefix + "sha256,"
	maxCustomID   = 127
	metaSeparator = ","
)

// customID is refundkit,<batch>,<item>,<attempt>, an item's ':' as ','
// (PayPal's schema); past 127 characters, a digest only its sender matches.
func customID(batch, item string, attempt int) string {
	s := customPrefix + batch + metaSeparator + strings.ReplaceAll(item, ":", metaSeparator) + metaSeparator + strconv.Itoa(attempt)
	if len(s) <= maxCustomID {
		return s
	}
	sum := sha256.Sum256([]byte(batch + "\x00" + item + "\x00" + strconv.Itoa(attempt)))
	return digestPrefix + hex.EncodeToString(sum[:20])
}

// parseCustomID reads back a custom_id that customID wrote in full.
func parseCustomID(s string) (batch, item, attempt string, ok bool) {
	rest, found := strings.CutPrefix(s, customPrefix)
	if !found || strings.HasPrefix(s, digestPrefix) {
		return "", "", "", false
	}
	parts := strings.Split(rest, metaSeparator)
	if len(parts) < 3 {
		return "", "", "", false
	}
	batch, attempt = parts[0], parts[len(parts)-1]
	item = strings.Join(parts[1:len(parts)-1], ":")
	if !refund.ValidBatch(batch) || item == "" {
		return "", "", "", false
	}
	if n, err := strconv.Atoi(attempt); err != nil || n < 1 {
		return "", "", "", false
	}
	return batch, item, attempt, true
}

// metadata is what a custom_id says; nil when nothing refundkit reads.
func metadata(custom string) map[string]string {
	batch, item, attempt, ok := parseCustomID(custom)
	if !ok {
		return nil
	}
	return map[string]string{refund.MetaBatch: batch, refund.MetaItem: item, refund.MetaAttempt: attempt}
}

// matchCustomID is the metadata of a refund Create for attempt of it got:
// what its custom_id says, or the item's when it is the digest sent.
func matchCustomID(custom string, it *refund.Item, attempt int) map[string]string {
	if m := metadata(custom); m != nil {
		return m
	}
	if strings.HasPrefix(custom, digestPrefix) && custom == customID(it.Batch, it.Item, attempt) {
		return map[string]string{refund.MetaBatch: it.Batch, refund.MetaItem: it.Item, refund.MetaAttempt: strconv.Itoa(attempt)}
	}
	return nil
}

// PayPal's errors: which answers may be repeated under the same key.

// apiError is PayPal's error body: the REST shape (name, message, details
// with an issue each) and the OAuth2 shape (error, error_description).
type apiError struct {
	Name             string `json:"name"`
	Message          string `json:"message"`
	DebugID          string `json:"debug_id"`
	Details          []struct{ Issue, Description string }
	Error            string `json:"error"`
	ErrorDescription string `json:"error_description"`
}

var provider = httpx.Provider{Name: "paypal", Title: "PayPal", NotOwn: "no " + wire.DebugIDHeader, RefName: "debug id"}

// classify sorts an answer that is not a success; token is true for the
// token endpoint's. An answer without a debug id is not PayPal's. PayPal's
// own 5xx is no answer (a journaled 500 would burn a key still good): a
// retry gets the first request's latest status.
func classify(status int, debugID string, body []byte, token bool) *refund.Failure {
	var e apiError
	_ = json.Unmarshal(body, &e) // a body that says nothing leaves e empty
	return provider.Failure(status, debugID != "", e.code(), e.message(), debugID, func(f *refund.Failure) bool {
		switch {
		case status >= 500:
			f.Class, f.Status = refund.ClassRetry, 0
		case status == http.StatusConflict:
			f.Class = refund.ClassRetry
		case token && status != http.StatusTooManyRequests:
			f.Class = refund.ClassFatal
		default:
			return false
		}
		return true
	})
}

// code is the error's most precise name: its first issue, name or OAuth2 error.
func (e *apiError) code() string {
	for _, d := range e.Details {
		if d.Issue != "" {
			return d.Issue
		}
	}
	return cmp.Or(e.Name, e.Error)
}

func (e *apiError) message() string {
	var parts []string
	for _, s := range []string{e.Message, e.ErrorDescription} {
		if s != "" {
			parts = append(parts, s)
		}
	}
	for _, d := range e.Details {
		if d.Description != "" {
			parts = append(parts, d.Description)
			break
		}
	}
	return strings.Join(parts, ": ")
}

// Why a request is not sent.
var (
	errNoCapture  = errors.New("paypal: the item names no capture")
	errNoCurrency = errors.New("paypal: a partial refund needs the item's currency")
	errNoCancel   = errors.New("paypal: a refund cannot be canceled through PayPal's API")
)
