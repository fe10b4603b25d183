package paypal

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund/provider/paypal/wire"
)

const (
	testID     = "client-id-1"
	testSecret = "s3cret-never-shown"
)

// fake is a PayPal that a test scripts: its token endpoint checks the
// app's credentials and hands out tok-1, tok-2...; the API answers with
// what api says. It records what the client sent.
type fake struct {
	t         *testing.T
	srv       *httptest.Server
	mu        sync.Mutex
	issued    int         // tokens handed out
	tokenTTL  int         // expires_in of each token, seconds
	tokenFail func() bool // answer the token endpoint 401 invalid_client
	api       func(w http.ResponseWriter, r *http.Request, body []byte, n int)
	calls     []sentRequest // API requests, in order
}

type sentRequest struct {
	method, path, requestID, auth, prefer string
	body                                  []byte
}

func newFake(t *testing.T) *fake {
	f := &fake{t: t, tokenTTL: 32400}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fake) client() *Client { return New(f.srv.URL, testID, testSecret, 2) }

func (f *fake) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	if r.URL.Path == "/v1/oauth2/token" {
		id, secret, ok := r.BasicAuth()
		w.Header().Set(wire.DebugIDHeader, "dbg-token")
		if !ok || id != testID || secret != testSecret || string(body) != "grant_type=client_credentials" || (f.tokenFail != nil && f.tokenFail()) {
			f.mu.Unlock()
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":"invalid_client","error_description":"Client Authentication failed"}`)
			return
		}
		f.issued++
		n, ttl := f.issued, f.tokenTTL
		f.mu.Unlock()
		fmt.Fprintf(w, `{"scope":"https://uri.paypal.com/services/payments/refund","access_token":"tok-%d","token_type":"Bearer","app_id":"APP-1","expires_in":%d,"nonce":"n"}`, n, ttl)
		return
	}
	f.calls = append(f.calls, sentRequest{method: r.Method, path: r.URL.Path, requestID: r.Header.Get("PayPal-Request-Id"),
		auth: r.Header.Get("Authorization"), prefer: r.Header.Get("Prefer"), body: body})
	n := len(f.calls)
	f.mu.Unlock()
	f.api(w, r, body, n)
}

func (f *fake) sent() []sentRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]sentRequest(nil), f.calls...)
}

func (f *fake) tokensIssued() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.issued
}

// answer writes a PayPal answer: its status, a debug id, and body.
func answer(w http.ResponseWriter, status int, body string) {
	w.Header().Set(wire.DebugIDHeader, "dbg-1")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprint(w, body)
}

// refundJSON is a refund of capture as PayPal shows it.
func refundJSON(id, status, value, currency, custom, capture string) string {
	r := map[string]any{
		"id": id, "status": status, "amount": map[string]string{"value": value, "currency_code": currency},
		"custom_id": custom, "create_time": "2026-11-30T20:00:00Z",
		"links": []map[string]string{
			{"rel": "self", "method": "GET", "href": "https://api-m.sandbox.paypal.com/v2/payments/refunds/" + id},
			{"rel": "up", "method": "GET", "href": "https://api-m.sandbox.paypal.com/v2/payments/captures/" + capture},
		},
	}
	if status == "PENDING" {
		r["status_details"] = map[string]string{"reason": "ECHECK"}
	}
	b, _ := json.Marshal(r)
	return string(b)
}

// clock is a test's time, moved by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// noSecrets fails the test if text holds the app's secret or a token.
func noSecrets(t *testing.T, text string) {
	t.Helper()
	if strings.Contains(text, testSecret) || strings.Contains(text, "tok-") {
		t.Errorf("a secret in %q", text)
	}
}
