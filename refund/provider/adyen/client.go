// Package adyen is refundkit's Adyen provider: refund.Provider over
// Adyen's Checkout API. Adyen answers a refund only "received" and cannot
// list refunds: outcomes and refunds are read from the signed
// notifications adyen-webhook kept.
package adyen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
	"github.com/refundkit/refundkit/refund/provider/httpx"
)

// Adyen's test Checkout API (the live host has the merchant's own prefix).
const (
	TestAPIBase = "https://checkout-test.adyen.com"
	APIVersion  = "v71"
)

// KeyTTL is how long refundkit counts on Adyen keeping an idempotency key.
const KeyTTL = wire.KeyTTL

// Notifications are those a receiver kept (adyen/notes), each verified.
type Notifications interface {
	ForRefund(ctx context.Context, psp string) ([]wire.Notification, error)
	ForPayment(ctx context.Context, psp string) ([]wire.Notification, error)
	All(ctx context.Context) ([]wire.Notification, error)
}

// Config is what a client needs (APIKey and Merchant from the environment only).
type Config struct {
	Base     string // the Checkout API, TestAPIBase when empty
	APIKey   string
	Merchant string        // the merchant account refunds are made on
	Notes    Notifications // nil: every refund stays pending, nothing can be looked up
	Conns    int           // connections kept open
}

// Client is the part of Adyen's API refundkit uses. It repeats no call.
type Client struct {
	httpx.API
	key, merchant string
	notes         Notifications
}

var _ refund.Provider = (*Client)(nil)

// New returns a client for cfg.
func New(cfg Config) *Client {
	return &Client{API: httpx.NewAPI(cfg.Base, TestAPIBase, max(cfg.Conns, 2)), key: cfg.APIKey, merchant: cfg.Merchant, notes: cfg.Notes}
}

// Close closes the notifications, when they can be.
func (c *Client) Close() error {
	if cl, ok := c.notes.(interface{ Close() error }); ok {
		return cl.Close()
	}
	return nil
}

// Facts are Adyen's: Find knows only what notifications told
// (PartialLookup), so finding none proves nothing.
func (*Client) Facts() refund.Facts {
	return refund.Facts{Name: "Adyen", KeyTTL: KeyTTL, Backoff: Backoff, Payments: []string{"psp_reference"},
		PartialLookup: true, AmountRequired: true, MaxBatchItem: wire.MaxBatchItem, LookupName: "notification look-up", CheckAt: "Adyen's Customer Area"}
}

// refundRequest is the body of a refund: Adyen has no "refund the rest".
type refundRequest struct {
	Amount          wire.Amount `json:"amount"`
	MerchantAccount string      `json:"merchantAccount"`
	Reference       string      `json:"reference"`
}

// Create asks for the refund under wire.Key of attempt: a pending refund.
func (c *Client) Create(ctx context.Context, it *refund.Item, attempt int) (refund.Answer, error) {
	switch {
	case it.PSPReference == "":
		return refund.Answer{}, refund.RefusedHere("psp_reference_required", errNoPayment)
	case it.Amount <= 0 || it.Currency == "":
		return refund.Answer{}, refund.RefusedHere("amount_required", errNoAmount)
	}
	body := refundRequest{Amount: wire.Amount{Currency: strings.ToUpper(it.Currency), Value: it.Amount},
		MerchantAccount: c.merchant, Reference: wire.Reference(it.Batch, it.Item, attempt)}
	data, err := json.Marshal(body)
	if err != nil {
		return refund.Answer{}, err
	}
	path := "/" + APIVersion + "/payments/" + url.PathEscape(it.PSPReference) + "/refunds"
	res, data, err := c.Send(ctx, http.MethodPost, path, data, "X-API-Key", c.key, "Content-Type", "application/json",
		"Accept", "application/json", "Idempotency-Key", wire.Key(it.Batch, it.Item, attempt))
	if err != nil {
		return refund.Answer{}, err
	}
	status := res.StatusCode
	if status != http.StatusOK && status != http.StatusCreated {
		return refund.Answer{}, classify(status, res.Header, data)
	}
	var a wire.RefundAnswer
	if err := provider.Decode(status, data, &a); err != nil {
		return refund.Answer{}, err
	}
	if a.PSPReference == "" || a.Status != "received" {
		return refund.Answer{}, refund.Unreadable("adyen", status, fmt.Errorf("no pspReference, or status %q, not \"received\"", a.Status))
	}
	r := refund.Refund{ID: a.PSPReference, PSPReference: a.PaymentPSPReference, Amount: a.Amount.Value,
		Currency: strings.ToLower(a.Amount.Currency), Status: refund.RefundPending,
		Metadata: metadata(a.Reference)}
	return refund.Answer{Refund: r, HTTPStatus: status}, nil
}

// Payment: Adyen's Checkout API cannot read a payment.
func (*Client) Payment(context.Context, refund.Payment) (refund.PaymentInfo, error) {
	return refund.PaymentInfo{}, refund.ErrNoLookup
}

// Cancel: a refund Adyen received cannot be canceled through its API.
func (*Client) Cancel(context.Context, string) (refund.Refund, error) {
	return refund.Refund{}, refund.RefusedHere("cancel_unsupported", errNoCancel)
}

// Get returns refund id as its notifications tell it, pending until they end it.
func (c *Client) Get(ctx context.Context, id string) (refund.Refund, error) {
	if c.notes == nil {
		return refund.Refund{}, refund.ErrNoLookup
	}
	notes, err := c.notes.ForRefund(ctx, id)
	if err != nil {
		return refund.Refund{}, notesFailed(err)
	}
	if r, ok := Outcome(id, notes); ok {
		return r, nil
	}
	return refund.Refund{ID: id, Status: refund.RefundPending}, nil
}

// Find returns the refunds of payment p that notifications told of.
func (c *Client) Find(ctx context.Context, p refund.Payment) ([]refund.Refund, error) {
	if c.notes == nil || p.PSPReference == "" {
		return nil, refund.ErrNoLookup
	}
	notes, err := c.notes.ForPayment(ctx, p.PSPReference)
	if err != nil {
		return nil, notesFailed(err)
	}
	return Refunds(notes), nil
}

// AllTold returns every refund the notifications tell of, for audit.
func (c *Client) AllTold(ctx context.Context) ([]refund.Refund, error) {
	if c.notes == nil {
		return nil, nil
	}
	notes, err := c.notes.All(ctx)
	if err != nil {
		return nil, fmt.Errorf("adyen: read the notifications: %w", err)
	}
	return Refunds(notes), nil
}

// Rate is a guess of the refunds per second Adyen takes (it publishes no limit).
const Rate = 10

// Limits is share (0 to 1] of Rate: only creations go to Adyen.
func Limits(share float64) refund.Limits {
	return refund.Limits{Create: Rate * share}
}

// Backoff spaces retries of a call Adyen asks to repeat.
var Backoff = refund.Backoff{Base: 250 * time.Millisecond, Max: 20 * time.Second}

// Adyen's errors: which answers may be repeated under the same key.

// apiError is Adyen's error body.
type apiError struct {
	Status       int    `json:"status"`
	ErrorCode    string `json:"errorCode"`
	Message      string `json:"message"`
	ErrorType    string `json:"errorType"`
	PSPReference string `json:"pspReference"`
}

// Adyen's error codes that refundkit decides by.
const (
	codeIdempotencyUnavailable = "703" // the idempotency store is unavailable: retry with the same key
	codeInProgress             = "704" // a request with this key is already processed or in progress
)

// transientHeader marks an error that may be retried with the same key.
const transientHeader = "Transient-Error"

var provider = httpx.Provider{Name: "adyen", Title: "Adyen", NotOwn: "no Adyen error body", RefName: "pspReference"}

// classify sorts an answer that is not a success by Adyen's idempotency
// rules: without Adyen's error body (but a 429) it is not Adyen's. Adyen's
// own 5xx is indeterminate: no look-up can tell whether the refund exists.
func classify(status int, h http.Header, body []byte) *refund.Failure {
	var e apiError
	_ = json.Unmarshal(body, &e) // a body that says nothing leaves e empty
	own := e.ErrorCode != "" || e.ErrorType != "" || status == http.StatusTooManyRequests
	return provider.Failure(status, own, e.ErrorCode, e.Message, e.PSPReference, func(f *refund.Failure) bool {
		switch {
		case strings.EqualFold(h.Get(transientHeader), "true"), e.ErrorCode == codeIdempotencyUnavailable, e.ErrorCode == codeInProgress:
			f.Class, f.Status = refund.ClassRetry, 0
		case status == http.StatusTooManyRequests:
			f.Status = 0 // not saved under the key; rate limited, as for any provider
			return false
		case status >= 500:
			f.Class = refund.ClassIndeterminate
		default:
			return false
		}
		return true
	})
}

// notesFailed is a notification store that could not be read: asked again.
func notesFailed(err error) *refund.Failure {
	return &refund.Failure{Class: refund.ClassRetry, Code: "notifications_unreadable", Message: err.Error(),
		Err: fmt.Errorf("adyen: read the notifications: %w", err)}
}

// Why a request is not sent.
var (
	errNoPayment = errors.New("adyen: the item names no psp_reference")
	errNoAmount  = errors.New("adyen: a refund needs the item's amount and currency (Adyen has no \"refund the rest\")")
	errNoCancel  = errors.New("adyen: a refund Adyen received cannot be canceled through its API")
)
