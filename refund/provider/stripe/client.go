// Package stripe is refundkit's Stripe provider: refund.Provider over
// stripe-go, the only code that knows Stripe's API.
package stripe

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	stripego "github.com/stripe/stripe-go/v76"
	stripecharge "github.com/stripe/stripe-go/v76/charge"
	striperefund "github.com/stripe/stripe-go/v76/refund"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/money"
	"github.com/refundkit/refundkit/refund/provider/httpx"
)

// DefaultAPIBase is Stripe's API.
const DefaultAPIBase = "https://api.stripe.com"

// Client is the part of Stripe's API refundkit uses. stripe-go's retries
// are off: the engine, where the checkpoint is, decides.
type Client struct {
	refunds striperefund.Client
	charges stripecharge.Client
	read    httpx.Payments // captured charges Find read, for the Payment that follows
}

var _ refund.Provider = (*Client)(nil)

// New returns a client for the API at base (DefaultAPIBase when empty) with key.
func New(base, key string, conns int) *Client {
	hc := httpx.Client(conns)
	hc.Transport = noteTransport{hc.Transport}
	backend := stripego.GetBackendWithConfig(stripego.APIBackend, &stripego.BackendConfig{
		URL:               stripego.String(cmp.Or(base, DefaultAPIBase)),
		HTTPClient:        hc,
		MaxNetworkRetries: stripego.Int64(0),
		LeveledLogger:     &stripego.LeveledLogger{Level: stripego.LevelNull},
	})
	return &Client{refunds: striperefund.Client{B: backend, Key: key}, charges: stripecharge.Client{B: backend, Key: key}}
}

// Facts are Stripe's: a call answered with its own 500 may still complete
// (LateOutcomes); retries are spaced within its rate limits. A nil *Client
// has them too.
func (*Client) Facts() refund.Facts {
	return refund.Facts{Name: "Stripe", KeyTTL: 24 * time.Hour, LateOutcomes: true, Payments: []string{"charge", "payment_intent"},
		Backoff: refund.Backoff{Base: 250 * time.Millisecond, Max: 16 * time.Second}}
}

// Create sends one refund request for attempt of it under its key.
func (c *Client) Create(ctx context.Context, it *refund.Item, attempt int) (refund.Answer, error) {
	params := &stripego.RefundParams{}
	note := noted(ctx, &params.Context)
	params.SetIdempotencyKey(refund.IdempotencyKey(it.Batch, it.Item, attempt))
	if it.Charge != "" {
		params.Charge = stripego.String(it.Charge)
	} else {
		params.PaymentIntent = stripego.String(it.PaymentIntent)
	}
	if it.Amount > 0 {
		params.Amount = stripego.Int64(it.Amount)
	}
	if it.Reason != "" {
		params.Reason = stripego.String(it.Reason)
	}
	for k, v := range it.Metadata {
		params.AddMetadata(k, v)
	}
	params.AddMetadata(refund.MetaBatch, it.Batch)
	params.AddMetadata(refund.MetaItem, it.Item)
	params.AddMetadata(refund.MetaAttempt, strconv.Itoa(attempt))
	r, err := c.refunds.New(params)
	if err != nil {
		return refund.Answer{}, note.failure(err)
	}
	a := refund.Answer{Refund: toRefund(r)}
	if r.LastResponse != nil {
		a.HTTPStatus = r.LastResponse.StatusCode
		a.Replayed = r.LastResponse.Header.Get("Idempotent-Replayed") == "true"
	}
	return a, nil
}

// Find returns every refund of the payment, newest first.
func (c *Client) Find(ctx context.Context, p refund.Payment) ([]refund.Refund, error) {
	params := &stripego.RefundListParams{}
	note := noted(ctx, &params.Context)
	params.Limit = stripego.Int64(100)
	var out []refund.Refund
	if p.Charge != "" {
		// One read answers both questions: the charge with its refunds,
		// its amount kept for Payment. A sublist that does not hold them
		// all is listed again whole, relying on no order of its own.
		cp := &stripego.ChargeParams{}
		cp.Context = params.Context
		cp.AddExpand("refunds")
		ch, err := c.charges.Get(p.Charge, cp)
		if err != nil {
			return nil, note.failure(err)
		}
		if ch.Refunds == nil {
			err := fmt.Errorf("charge %s came without its refunds, asked for with expand[]=refunds", p.Charge)
			return nil, refund.Unreadable("stripe", http.StatusOK, err)
		}
		if ch.Captured && ch.Status == stripego.ChargeStatusSucceeded {
			if info, err := chargeInfo(p.Charge, false, ch); err == nil {
				c.read.Put(p.Charge, info)
			}
		}
		if !ch.Refunds.HasMore {
			for _, r := range ch.Refunds.Data {
				out = append(out, toRefund(r))
			}
			return out, nil
		}
		params.Charge = stripego.String(p.Charge)
	} else {
		params.PaymentIntent = stripego.String(p.PaymentIntent)
	}
	iter := c.refunds.List(params)
	for iter.Next() {
		out = append(out, toRefund(iter.Refund()))
	}
	if err := iter.Err(); err != nil {
		return nil, note.failure(err)
	}
	return out, nil
}

// Kept is what Find read of a captured charge (refund.PaymentKeeper); a
// payment intent's ("" charge) is never kept.
func (c *Client) Kept(p refund.Payment) (refund.PaymentInfo, bool) { return c.read.Get(p.Charge) }

// Payment reads what a charge, or a payment intent's charges, captured. A
// captured charge's, once Find read it, is never read again: it cannot change.
func (c *Client) Payment(ctx context.Context, p refund.Payment) (refund.PaymentInfo, error) {
	if p.Charge != "" {
		if info, ok := c.read.Get(p.Charge); ok {
			return info, nil
		}
		params := &stripego.ChargeParams{}
		note := noted(ctx, &params.Context)
		ch, err := c.charges.Get(p.Charge, params)
		if err != nil {
			return refund.PaymentInfo{}, note.failure(err)
		}
		return chargeInfo(p.Charge, false, ch)
	}
	params := &stripego.ChargeListParams{PaymentIntent: stripego.String(p.PaymentIntent)}
	note := noted(ctx, &params.Context)
	params.Limit = stripego.Int64(100)
	iter := c.charges.List(params)
	var charges []*stripego.Charge
	for iter.Next() {
		charges = append(charges, iter.Charge())
	}
	if err := iter.Err(); err != nil {
		return refund.PaymentInfo{}, note.failure(err)
	}
	return chargeInfo(p.PaymentIntent, true, charges...)
}

// chargeInfo is what the charges of payment id captured, and in which
// currency (a succeeded charge's), with an intent's charges named.
func chargeInfo(id string, intent bool, charges ...*stripego.Charge) (refund.PaymentInfo, error) {
	var info refund.PaymentInfo
	var over error // the charges' captured amounts summed beyond int64
	for _, ch := range charges {
		if intent {
			info.Charges = append(info.Charges, ch.ID)
		}
		if ch.Status == stripego.ChargeStatusSucceeded && over == nil {
			info.Amount, over = money.Add(info.Amount, ch.AmountCaptured, string(ch.Currency))
		}
		if info.Currency == "" || ch.Status == stripego.ChargeStatusSucceeded {
			info.Currency = string(ch.Currency)
		}
	}
	if over != nil { // no payment captures that much: not understood, for good
		return refund.PaymentInfo{}, &refund.Failure{Class: refund.ClassFinal, Code: refund.CodeLookupFailed, Err: over,
			Message: fmt.Sprintf("the captured amounts of %s: %v", id, over)}
	}
	return info, nil
}

// Cancel cancels a refund that requires action, under a key a repeat can reuse.
func (c *Client) Cancel(ctx context.Context, id string) (refund.Refund, error) {
	params := &stripego.RefundCancelParams{}
	note := noted(ctx, &params.Context)
	params.SetIdempotencyKey("refundkit:cancel:" + id)
	r, err := c.refunds.Cancel(id, params)
	if err != nil {
		return refund.Refund{}, note.failure(err)
	}
	return toRefund(r), nil
}

// Get reads refund id as Stripe holds it now.
func (c *Client) Get(ctx context.Context, id string) (refund.Refund, error) {
	params := &stripego.RefundParams{}
	note := noted(ctx, &params.Context)
	r, err := c.refunds.Get(id, params)
	if err != nil {
		return refund.Refund{}, note.failure(err)
	}
	return toRefund(r), nil
}

func toRefund(r *stripego.Refund) refund.Refund {
	out := refund.Refund{ID: r.ID, Amount: r.Amount, Currency: string(r.Currency), Status: string(r.Status),
		FailureReason: string(r.FailureReason), Created: r.Created, Metadata: r.Metadata}
	if r.Charge != nil {
		out.Charge = r.Charge.ID
	}
	if r.PaymentIntent != nil {
		out.PaymentIntent = r.PaymentIntent.ID
	}
	return out
}

// Stripe's rate limits per second (docs.stripe.com/rate-limits): account, endpoint.
const (
	LiveRate     = 100
	TestRate     = 25
	EndpointRate = 25
)

// Limits is share (0 to 1] of Stripe's limits for the mode.
func Limits(live bool, share float64) refund.Limits {
	global := float64(TestRate)
	if live {
		global = LiveRate
	}
	e := EndpointRate * share
	return refund.Limits{Global: global * share, Create: e, List: e, Charges: e, Get: e}
}

// Stripe's errors: which answers may be repeated under the same key.

// noteKey carries an *answerNote in a request's context.
type noteKey struct{}

// answerNote is what an answer says beyond what stripe-go keeps.
type answerNote struct {
	mu              sync.Mutex
	status          int // the HTTP status of the last answer
	rateLimitReason string
}

// noted sets *into, a call's context, to ctx carrying a new note for it.
func noted(ctx context.Context, into *context.Context) *answerNote {
	n := new(answerNote)
	*into = context.WithValue(ctx, noteKey{}, n)
	return n
}

// noteTransport fills the request's answerNote from the answer's headers.
type noteTransport struct{ next http.RoundTripper }

func (t noteTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := t.next.RoundTrip(req)
	if n, ok := req.Context().Value(noteKey{}).(*answerNote); ok && res != nil {
		n.mu.Lock()
		n.status = res.StatusCode
		n.rateLimitReason = res.Header.Get("Stripe-Rate-Limited-Reason")
		n.mu.Unlock()
	}
	return res, err
}

// failure classifies err, from stripe-go, with what the note saw.
func (n *answerNote) failure(err error) *refund.Failure {
	n.mu.Lock()
	defer n.mu.Unlock()
	return classify(err, n.status, n.rateLimitReason)
}

// classify sorts an error from stripe-go; answered is the HTTP status of
// the answer (0: none). Only Stripe's own 500 (api_error, with a
// Request-Id) is saved under the key; a 502, 504 or an answer not Stripe's
// is a gateway's: no answer, retried with the same key.
func classify(err error, answered int, reason string) *refund.Failure {
	f := &refund.Failure{Class: refund.ClassRetry, Err: err, Message: err.Error()}
	var se *stripego.Error
	if !errors.As(err, &se) {
		f.Code = "network_error"
		if answered != 0 {
			f.Code = "gateway_" + strconv.Itoa(answered)
		}
		return f
	}
	if se.Msg != "" {
		f.Message = se.Msg
	}
	if se.HTTPStatusCode == 0 {
		f.Code = "network_error"
		return f
	}
	status := se.HTTPStatusCode
	f.Status, f.Code = status, cmp.Or(string(se.Code), string(se.Type))
	switch {
	case status == http.StatusInternalServerError && se.Type == stripego.ErrorTypeAPI && se.RequestID != "":
		f.Class = refund.ClassIndeterminate
	case status >= 500 && (se.RequestID == "" || status != http.StatusServiceUnavailable):
		f.Status, f.Code = 0, "gateway_"+strconv.Itoa(status)
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		f.Class = refund.ClassFatal
	case se.Type == stripego.ErrorTypeIdempotency && status == http.StatusBadRequest:
		f.Class, f.Code = refund.ClassKeyReused, "idempotency_key_reused"
	case status == http.StatusTooManyRequests:
		f.RateLimited = true
		f.AccountLimit = reason == "global-rate" || reason == "global-concurrency"
	case status == http.StatusConflict, status == http.StatusServiceUnavailable:
	default:
		f.Class = refund.ClassFinal
	}
	return f
}
