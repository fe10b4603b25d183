// Package adyen is refundkit's Adyen provider: refund.Provider over
// Adyen's Checkout API on net/http. Adyen answers a refund only
// "received", its outcome comes later as a signed notification that
// adyen-webhook keeps, and it has no API to list a payment's refunds: the
// client reads outcomes and refunds from the kept notifications.
package adyen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
	"github.com/refundkit/refundkit/refund/provider/httpx"
)

// Adyen's Checkout API: the test environment (the live one's host is the
// merchant's own prefix, so it must be given).
const (
	TestAPIBase = "https://checkout-test.adyen.com"
	APIVersion  = "v71"
)

// KeyTTL is how long refundkit counts on Adyen keeping an idempotency key.
const KeyTTL = wire.KeyTTL

// Notifications are those a receiver kept (refund/provider/adyen/notes),
// each verified (HMAC) before it is returned.
type Notifications interface {
	ForRefund(ctx context.Context, psp string) ([]wire.Notification, error)
	ForPayment(ctx context.Context, psp string) ([]wire.Notification, error)
	All(ctx context.Context) ([]wire.Notification, error)
}

// Config is what a client needs. APIKey and Merchant come from the
// environment only (ADYEN_API_KEY, ADYEN_MERCHANT_ACCOUNT).
type Config struct {
	Base     string // the Checkout API, TestAPIBase when empty
	APIKey   string
	Merchant string        // the merchant account refunds are made on
	Notes    Notifications // nil: every refund stays pending, nothing can be looked up
	Conns    int           // connections kept open
}

// Client is the part of Adyen's API refundkit uses. It repeats no call.
type Client struct {
	base, key, merchant string
	notes               Notifications
	http                *http.Client
}

var _ refund.Provider = (*Client)(nil)

// New returns a client for cfg.
func New(cfg Config) *Client {
	base := cfg.Base
	if base == "" {
		base = TestAPIBase
	}
	return &Client{base: strings.TrimSuffix(base, "/"), key: cfg.APIKey, merchant: cfg.Merchant, notes: cfg.Notes,
		http: httpx.Client(max(cfg.Conns, 2))}
}

// Close closes the notifications, when they can be.
func (c *Client) Close() error {
	if cl, ok := c.notes.(interface{ Close() error }); ok {
		return cl.Close()
	}
	return nil
}

// APIBase is the API the client calls.
func (c *Client) APIBase() string { return c.base }

// Facts are Adyen's. Find knows only the refunds notifications told of
// (PartialLookup): finding none proves nothing, so an item in doubt is
// sent again only under its same key while Adyen surely keeps it.
func (*Client) Facts() refund.Facts {
	return refund.Facts{Name: "Adyen", KeyTTL: KeyTTL, Backoff: Backoff, Payments: []string{"psp_reference"},
		PartialLookup: true, AmountRequired: true, MaxBatchItem: wire.MaxBatchItem, LookupName: "notification look-up", CheckAt: "Adyen's Customer Area"}
}

// refundRequest is the body of POST /payments/{psp}/refunds (always with
// an amount: Adyen has no "refund the rest").
type refundRequest struct {
	Amount          wire.Amount `json:"amount"`
	MerchantAccount string      `json:"merchantAccount"`
	Reference       string      `json:"reference"`
}

// refundAnswer is Adyen's answer to it: "received", never an outcome.
type refundAnswer struct {
	MerchantAccount     string      `json:"merchantAccount"`
	PaymentPSPReference string      `json:"paymentPspReference"`
	PSPReference        string      `json:"pspReference"`
	Reference           string      `json:"reference"`
	Status              string      `json:"status"`
	Amount              wire.Amount `json:"amount"`
}

// Create asks for the refund under the Idempotency-Key of attempt
// (wire.Key) with a reference naming batch, item and attempt, which the
// notifications echo. The answer is a pending refund.
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
	var a refundAnswer
	status, err := c.post(ctx, path, data, wire.Key(it.Batch, it.Item, attempt), &a)
	if err != nil {
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

// Get returns refund id as its notifications tell it (Outcome): pending
// until one says how it ended.
func (c *Client) Get(ctx context.Context, id string) (refund.Refund, error) {
	if c.notes == nil {
		return refund.Refund{}, refund.ErrNoLookup
	}
	notes, err := c.notes.ForRefund(ctx, id)
	if err != nil {
		return refund.Refund{}, notesFailed(err)
	}
	r, ok := Outcome(id, notes)
	if !ok {
		return refund.Refund{ID: id, Status: refund.RefundPending}, nil
	}
	return r, nil
}

// Find returns the refunds of payment p that notifications told of,
// newest first, with the metadata their references name.
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

// Told returns every refund the notifications tell of, newest first, for
// audit to find those of items no journal knows.
func (c *Client) Told(ctx context.Context) ([]refund.Refund, error) {
	if c.notes == nil {
		return nil, nil
	}
	notes, err := c.notes.All(ctx)
	if err != nil {
		return nil, fmt.Errorf("adyen: read the notifications: %w", err)
	}
	return Refunds(notes), nil
}

// post sends one POST with the API key and the idempotency key, and
// decodes a success into out; its error is a *refund.Failure.
func (c *Client) post(ctx context.Context, path string, body []byte, key string, out any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("X-API-Key", c.key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Idempotency-Key", key)
	res, data, err := httpx.Do(c.http, req)
	if err != nil {
		return 0, err
	}
	if res.StatusCode != http.StatusOK && res.StatusCode != http.StatusCreated {
		return res.StatusCode, classify(res.StatusCode, res.Header, data)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return res.StatusCode, refund.Unreadable("adyen", res.StatusCode, err)
	}
	return res.StatusCode, nil
}

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
