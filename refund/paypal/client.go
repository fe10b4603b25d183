// Package paypal is refundkit's PayPal provider: refund.Provider over
// PayPal's REST API (Payments v2), hand-written on net/http. It is the only
// code that knows PayPal's API: its token, request ids, amounts, where a
// refund says whose it is, how its errors classify, and its limits.
package paypal

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/refundkit/refundkit/refund"
)

// PayPal's APIs: the sandbox, refundkit's default, and the live one, which
// moves real money.
const (
	SandboxAPIBase = "https://api-m.sandbox.paypal.com"
	LiveAPIBase    = "https://api-m.paypal.com"
)

// KeyTTL is how long PayPal keeps a PayPal-Request-Id: "The server stores
// keys for 45 days" (Payments v2, captures.refund).
const KeyTTL = 45 * 24 * time.Hour

// maxAnswer bounds the body of an answer that is read.
const maxAnswer = 1 << 20

// Client is the part of PayPal's API refundkit uses. It repeats no call of
// its own accord but one: a call PayPal refused for its access token is
// sent again, once, with a new token and the same request id.
type Client struct {
	base, id, secret string
	http             *http.Client
	now              func() time.Time
	tokens           tokens
}

var _ refund.Provider = (*Client)(nil)

// New returns a client for the API at base (SandboxAPIBase when empty)
// that authenticates with the app's client id and secret. conns bounds the
// connections kept open.
func New(base, id, secret string, conns int) *Client {
	if base == "" {
		base = SandboxAPIBase
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = conns
	return &Client{base: strings.TrimSuffix(base, "/"), id: id, secret: secret,
		http: &http.Client{Transport: transport, Timeout: 80 * time.Second}, now: time.Now}
}

// APIBase is the API the client calls: the sandbox, the live API or a
// simulator.
func (c *Client) APIBase() string { return c.base }

// Facts are PayPal's. Request ids are kept 45 days. No answer is saved
// under a request id that a retry would not update (a retry gets the
// request's latest status), so no call is indeterminate and none completes
// late behind a saved error. PayPal has no API that lists a capture's
// refunds with what refundkit wrote on them (see Find).
func (*Client) Facts() refund.Facts {
	return refund.Facts{Name: "PayPal", KeyTTL: KeyTTL, Backoff: Backoff, Payments: []string{"capture"}}
}

// refundRequest is the body of a refund: no amount refunds what is left of
// the capture.
type refundRequest struct {
	Amount   *amountJSON `json:"amount,omitempty"`
	CustomID string      `json:"custom_id,omitempty"`
}

// amountJSON is PayPal's money object.
type amountJSON struct {
	CurrencyCode string `json:"currency_code"`
	Value        string `json:"value"`
}

// Create refunds the item's capture under the PayPal-Request-Id of
// attempt (refund.IdempotencyKey: PayPal takes ids of up to 10,000
// characters, so it is sent as it is, the id the journal names). A partial
// refund's amount is converted from minor units exactly; a full refund
// sends no amount. custom_id names batch, item and attempt (see customID).
func (c *Client) Create(ctx context.Context, it *refund.Item, attempt int) (refund.Answer, error) {
	if it.Capture == "" {
		return refund.Answer{}, refusedHere("capture_required", errNoCapture)
	}
	body := refundRequest{CustomID: customID(it.Batch, it.Item, attempt)}
	if it.Amount > 0 {
		if it.Currency == "" {
			return refund.Answer{}, refusedHere("currency_required", errNoCurrency)
		}
		v, err := formatValue(it.Amount, it.Currency)
		if err != nil {
			return refund.Answer{}, refusedHere("DECIMALS_NOT_SUPPORTED", err)
		}
		body.Amount = &amountJSON{CurrencyCode: strings.ToUpper(it.Currency), Value: v}
	}
	data, err := json.Marshal(body)
	if err != nil {
		return refund.Answer{}, err
	}
	path := "/v2/payments/captures/" + url.PathEscape(it.Capture) + "/refund"
	var r paypalRefund
	status, err := c.do(ctx, http.MethodPost, path, data, refund.IdempotencyKey(it.Batch, it.Item, attempt), &r)
	if err != nil {
		return refund.Answer{}, err
	}
	out, err := r.refund(func(custom string) map[string]string { return matchCustomID(custom, it, attempt) })
	if err != nil {
		return refund.Answer{}, unreadable(status, err)
	}
	// 201: the refund was made now; 200: the answer of an earlier request
	// under this id, in its latest status.
	return refund.Answer{Refund: out, HTTPStatus: status, Replayed: status == http.StatusOK}, nil
}

// Find cannot be answered reliably: Payments v2 shows a capture without
// its refunds; transaction search shows a transaction up to three hours
// after it happened; an order (Orders v2) lists its refunds, but an item
// names a capture, not its order. refundkit trusts its checkpoint and
// PayPal's request ids instead (Facts.KeyTTL).
func (*Client) Find(context.Context, refund.Payment) ([]refund.Refund, error) {
	return nil, refund.ErrNoLookup
}

// Charges: a capture is one payment; PayPal has no payment intents.
func (*Client) Charges(context.Context, string) ([]string, error) { return nil, nil }

// Cancel: PayPal's API cannot cancel a refund.
func (*Client) Cancel(context.Context, string) (refund.Refund, error) {
	return refund.Refund{}, refusedHere("cancel_unsupported", errNoCancel)
}

// Get reads refund id as PayPal holds it now: a PENDING refund settles
// into COMPLETED, FAILED or CANCELLED.
func (c *Client) Get(ctx context.Context, id string) (refund.Refund, error) {
	var r paypalRefund
	status, err := c.do(ctx, http.MethodGet, "/v2/payments/refunds/"+url.PathEscape(id), nil, "", &r)
	if err != nil {
		return refund.Refund{}, err
	}
	out, err := r.refund(metadata)
	if err != nil {
		return refund.Refund{}, unreadable(status, err)
	}
	return out, nil
}

// do sends one request with the current access token and decodes a
// success into out; its error is a *refund.Failure. A 401 from PayPal
// (an expired or revoked token) renews the token and sends the same
// request again once, with the same body and the same requestID.
func (c *Client) do(ctx context.Context, method, path string, body []byte, requestID string, out any) (int, error) {
	stale := ""
	for try := 0; ; try++ {
		token, err := c.accessToken(ctx, stale)
		if err != nil {
			return 0, err
		}
		status, debugID, data, err := c.send(ctx, method, path, body, requestID, token)
		if err != nil {
			return 0, noAnswer(err)
		}
		if status >= 200 && status < 300 { // 200 or 201; any other has no refund to read
			if err := json.Unmarshal(data, out); err != nil {
				return status, unreadable(status, err)
			}
			return status, nil
		}
		if status == http.StatusUnauthorized && debugID != "" && try == 0 {
			stale = token
			continue
		}
		return status, classify(status, debugID, data, false)
	}
}

// send makes one HTTP request and reads its answer.
func (c *Client) send(ctx context.Context, method, path string, body []byte, requestID, token string) (status int, debugID string, data []byte, err error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, "", nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
		// The whole refund in the answer, custom_id and amount included
		// (the default, return=minimal, gives only id and status).
		req.Header.Set("Prefer", "return=representation")
	}
	if requestID != "" {
		req.Header.Set("PayPal-Request-Id", requestID)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer res.Body.Close()
	data, err = io.ReadAll(io.LimitReader(res.Body, maxAnswer))
	if err != nil {
		return 0, "", nil, err
	}
	return res.StatusCode, res.Header.Get(DebugIDHeader), data, nil
}

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
	Amount     *amountJSON `json:"amount"`
	CustomID   string      `json:"custom_id"`
	CreateTime string      `json:"create_time"`
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
	amount, err := parseValue(r.Amount.Value, r.Amount.CurrencyCode)
	if err != nil {
		return refund.Refund{}, err
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

// capture is the id of the capture the refund refunds, from its "up" link
// (.../v2/payments/captures/{id}); "" when it has none.
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

// Why a request was not sent, or an answer not understood.
var (
	errNoCapture  = errors.New("paypal: the item names no capture")
	errNoCurrency = errors.New("paypal: a partial refund needs the item's currency")
	errNoCancel   = errors.New("paypal: a refund cannot be canceled through PayPal's API")
	errNoID       = errors.New("refund without an id")
	errNoAmount   = errors.New("refund without an amount")
)

type statusError struct{ status string }

func (e *statusError) Error() string { return "refund status " + strconv.Quote(e.status) + " unknown" }
