// Package paypal is refundkit's PayPal provider: refund.Provider over
// PayPal's REST API (Payments v2).
package paypal

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/provider/httpx"
	"github.com/refundkit/refundkit/refund/provider/paypal/wire"
)

// PayPal's APIs: the sandbox, refundkit's default, and the live one.
const (
	SandboxAPIBase = "https://api-m.sandbox.paypal.com"
	LiveAPIBase    = "https://api-m.paypal.com"
)

// KeyTTL is how long PayPal keeps a PayPal-Request-Id (45 days).
const KeyTTL = wire.RequestIDTTL

// Client is the part of PayPal's API refundkit uses. It repeats only a
// call PayPal refused for its access token, once.
type Client struct {
	httpx.API
	id, secret string
	now        func() time.Time
	tokens     tokens
	captured   httpx.Payments
}

var _ refund.Provider = (*Client)(nil)

// New returns a client for the API at base (SandboxAPIBase when empty).
func New(base, id, secret string, conns int) *Client {
	return &Client{API: httpx.NewAPI(base, SandboxAPIBase, conns), id: id, secret: secret, now: time.Now}
}

// Facts are PayPal's: a retry gets the request's latest status, so no call
// is indeterminate or late. Retries are spaced further than Stripe's:
// PayPal judges its rate over a minute.
func (*Client) Facts() refund.Facts {
	return refund.Facts{Name: "PayPal", KeyTTL: KeyTTL, Payments: []string{"capture"}, LookupRequests: lookupRequests,
		Backoff: refund.Backoff{Base: 500 * time.Millisecond, Max: 30 * time.Second}}
}

// refundRequest is the body of a refund: no amount refunds the rest.
type refundRequest struct {
	Amount   *amountJSON `json:"amount,omitempty"`
	CustomID string      `json:"custom_id,omitempty"`
}

// amountJSON is PayPal's money object.
type amountJSON struct {
	CurrencyCode string `json:"currency_code"`
	Value        string `json:"value"`
}

// Create refunds the item's capture under refundkit's own key (PayPal
// takes up to 10,000 characters), its custom_id naming the attempt.
func (c *Client) Create(ctx context.Context, it *refund.Item, attempt int) (refund.Answer, error) {
	if it.Capture == "" {
		return refund.Answer{}, refund.RefusedHere("capture_required", errNoCapture)
	}
	body := refundRequest{CustomID: customID(it.Batch, it.Item, attempt)}
	if it.Amount > 0 {
		if it.Currency == "" {
			return refund.Answer{}, refund.RefusedHere("currency_required", errNoCurrency)
		}
		v, err := wire.Value(it.Amount, it.Currency)
		if err != nil {
			return refund.Answer{}, refund.RefusedHere("DECIMALS_NOT_SUPPORTED", err)
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
		return refund.Answer{}, refund.Unreadable("paypal", status, err)
	}
	// Replayed stays false: nothing in PayPal's answer says it is a replay.
	return refund.Answer{Refund: out, HTTPStatus: status}, nil
}

// Kept is what a look-up read of capture p (refund.PaymentKeeper).
func (c *Client) Kept(p refund.Payment) (refund.PaymentInfo, bool) { return c.captured.Get(p.Capture) }

// Payment reads capture p: what it captured and in which currency.
func (c *Client) Payment(ctx context.Context, p refund.Payment) (refund.PaymentInfo, error) {
	if p.Capture == "" {
		return refund.PaymentInfo{}, refund.RefusedHere("capture_required", errNoCapture)
	}
	if info, ok := c.captured.Get(p.Capture); ok {
		return info, nil // read by the look-up just before: it never changes
	}
	cp, status, err := c.capture(ctx, p.Capture)
	if err != nil {
		return refund.PaymentInfo{}, err
	}
	if cp.Amount == nil {
		return refund.PaymentInfo{}, refund.Unreadable("paypal", status, fmt.Errorf("capture %s: no amount", p.Capture))
	}
	amount, err := wire.ParseValue(cp.Amount.Value, cp.Amount.CurrencyCode)
	if err != nil {
		return refund.PaymentInfo{}, refund.Unreadable("paypal", status, fmt.Errorf("capture %s: amount: %w", p.Capture, err))
	}
	return refund.PaymentInfo{Amount: amount, Currency: strings.ToLower(cp.Amount.CurrencyCode)}, nil
}

// Cancel: PayPal's API cannot cancel a refund.
func (*Client) Cancel(context.Context, string) (refund.Refund, error) {
	return refund.Refund{}, refund.RefusedHere("cancel_unsupported", errNoCancel)
}

// Get reads refund id as PayPal holds it now.
func (c *Client) Get(ctx context.Context, id string) (refund.Refund, error) {
	var r paypalRefund
	status, err := c.do(ctx, http.MethodGet, "/v2/payments/refunds/"+url.PathEscape(id), nil, "", &r)
	if err != nil {
		return refund.Refund{}, err
	}
	out, err := r.refund(metadata)
	if err != nil {
		return refund.Refund{}, refund.Unreadable("paypal", status, err)
	}
	return out, nil
}

// Rate is a guess of the requests per second PayPal takes (it publishes no limit).
const Rate = 10

// Limits is share (0 to 1] of Rate for each endpoint; a look-up is two requests.
func Limits(share float64) refund.Limits {
	r := Rate * share
	return refund.Limits{Global: r, Create: r, List: r / lookupRequests, Charges: r, Get: r, ListRequests: lookupRequests}
}

const lookupRequests = 2

// do sends one request with the current access token and decodes a
// success into out. A 401 from PayPal (a token expired or revoked) renews
// the token and sends the same request again, once.
func (c *Client) do(ctx context.Context, method, path string, body []byte, requestID string, out any) (int, error) {
	header := []string{"Accept", "application/json"}
	if body != nil {
		// The whole refund in the answer (return=minimal gives id and status).
		header = append(header, "Content-Type", "application/json", "Prefer", "return=representation")
	}
	if requestID != "" {
		header = append(header, wire.RequestIDHeader, requestID)
	}
	stale := ""
	for try := 0; ; try++ {
		token, err := c.accessToken(ctx, stale)
		if err != nil {
			return 0, err
		}
		res, data, err := c.Send(ctx, method, path, body, append(header, "Authorization", "Bearer "+token)...)
		if err != nil {
			return 0, err
		}
		status, debugID := res.StatusCode, res.Header.Get(wire.DebugIDHeader)
		if status >= 200 && status < 300 { // 200 or 201; any other has no refund to read
			return status, provider.Decode(status, data, out)
		}
		if status == http.StatusUnauthorized && debugID != "" && try == 0 {
			stale = token
			continue
		}
		return status, classify(status, debugID, data, false)
	}
}

// The OAuth2 access token every call shares: renewed before it expires,
// and when PayPal refuses it.

// renewBefore is how long before its expiry a token is renewed.
const renewBefore = 5 * time.Minute

// tokens holds the current access token. Its zero value has none.
type tokens struct {
	mu      sync.Mutex
	token   string
	expires time.Time
}

// tokenAnswer is the token endpoint's answer.
type tokenAnswer struct {
	AccessToken string `json:"access_token"`
	TokenType   string `json:"token_type"`
	ExpiresIn   int64  `json:"expires_in"` // seconds
}

// accessToken returns a token good for renewBefore (or half its life);
// stale, a token PayPal refused, is dropped unless renewed already.
func (c *Client) accessToken(ctx context.Context, stale string) (string, error) {
	t := &c.tokens
	t.mu.Lock()
	defer t.mu.Unlock()
	if stale != "" && t.token == stale {
		t.token = ""
	}
	if t.token != "" && c.now().Before(t.expires) {
		return t.token, nil
	}
	a, err := c.fetchToken(ctx)
	if err != nil {
		return "", err
	}
	life := time.Duration(a.ExpiresIn) * time.Second
	margin := min(renewBefore, life/2)
	t.token, t.expires = a.AccessToken, c.now().Add(life-margin)
	return t.token, nil
}

// fetchToken asks for a new token; its errors never show the secret or a token.
func (c *Client) fetchToken(ctx context.Context) (tokenAnswer, error) {
	form := url.Values{"grant_type": {"client_credentials"}}.Encode()
	basic := base64.StdEncoding.EncodeToString([]byte(c.id + ":" + c.secret)) // as http.Request.SetBasicAuth
	res, data, err := c.Send(ctx, http.MethodPost, "/v1/oauth2/token", []byte(form), "Authorization", "Basic "+basic,
		"Content-Type", "application/x-www-form-urlencoded", "Accept", "application/json")
	if err != nil {
		return tokenAnswer{}, err
	}
	if res.StatusCode != http.StatusOK {
		return tokenAnswer{}, classify(res.StatusCode, res.Header.Get(wire.DebugIDHeader), data, true)
	}
	var a tokenAnswer
	if err := json.Unmarshal(data, &a); err != nil || a.AccessToken == "" || a.ExpiresIn <= 0 {
		if err == nil {
			err = fmt.Errorf("no access_token or expires_in")
		}
		return tokenAnswer{}, refund.Unreadable("paypal", res.StatusCode, err)
	}
	return a, nil
}
