package paypal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/provider/paypal/wire"
)

func item(amount int64, currency string) *refund.Item {
	return &refund.Item{Batch: "b1", Item: "order:42", Capture: "CAP123", Amount: amount, Currency: currency}
}

// TestCreate is the request a refund sends (request id, body, headers)
// and the refund it reads back, for a partial and a full refund. Neither
// 201 nor 200 says whether PayPal replayed an earlier request's answer:
// Replayed is never claimed.
func TestCreate(t *testing.T) {
	for _, tc := range []struct {
		name     string
		it       *refund.Item
		status   int
		wantBody string
		value    string // what PayPal answers
	}{
		{"partial usd", item(1050, "usd"), 201, `{"amount":{"currency_code":"USD","value":"10.50"},"custom_id":"refundkit,b1,order,42,1"}`, "10.50"},
		{"partial jpy", item(500, "jpy"), 201, `{"amount":{"currency_code":"JPY","value":"500"},"custom_id":"refundkit,b1,order,42,1"}`, "500"},
		{"partial kwd", item(1500, "kwd"), 201, `{"amount":{"currency_code":"KWD","value":"1.500"},"custom_id":"refundkit,b1,order,42,1"}`, "1.500"},
		{"partial huf, whole at paypal", item(150000, "huf"), 201, `{"amount":{"currency_code":"HUF","value":"1500"},"custom_id":"refundkit,b1,order,42,1"}`, "1500"},
		{"full", item(0, ""), 201, `{"custom_id":"refundkit,b1,order,42,1"}`, "25.00"},
		{"200", item(1050, "usd"), 200, `{"amount":{"currency_code":"USD","value":"10.50"},"custom_id":"refundkit,b1,order,42,1"}`, "10.50"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			currency := tc.it.Currency
			if currency == "" {
				currency = "usd"
			}
			f.api = func(w http.ResponseWriter, r *http.Request, body []byte, n int) {
				var req refundRequest
				_ = json.Unmarshal(body, &req)
				answer(w, tc.status, refundJSON("R1", "COMPLETED", tc.value, currency, req.CustomID, "CAP123"))
			}
			a, err := f.client().Create(context.Background(), tc.it, 1)
			if err != nil {
				t.Fatal(err)
			}
			sent := f.sent()
			if len(sent) != 1 {
				t.Fatalf("%d requests, want 1", len(sent))
			}
			s := sent[0]
			if s.method != "POST" || s.path != "/v2/payments/captures/CAP123/refund" || string(s.body) != tc.wantBody {
				t.Errorf("sent %s %s %s\nwant POST /v2/payments/captures/CAP123/refund %s", s.method, s.path, s.body, tc.wantBody)
			}
			if s.requestID != refund.IdempotencyKey("b1", "order:42", 1) || s.auth != "Bearer tok-1" || s.prefer != "return=representation" {
				t.Errorf("headers: request id %q, authorization %q, prefer %q", s.requestID, s.auth, s.prefer)
			}
			want := refund.Refund{ID: "R1", Capture: "CAP123", Amount: tc.it.Amount, Currency: currency, Status: refund.RefundSucceeded,
				Created: time.Date(2026, 11, 30, 20, 0, 0, 0, time.UTC).Unix()}
			if tc.it.Amount == 0 {
				want.Amount = 2500
			}
			got := a.Refund
			meta := got.Metadata
			got.Metadata = nil
			if !reflect.DeepEqual(got, want) || a.HTTPStatus != tc.status || a.Replayed {
				t.Errorf("answer %+v (status %d, replayed %v)\nwant %+v", got, a.HTTPStatus, a.Replayed, want)
			}
			if !refund.Matches(&a.Refund, "b1", "order:42") || meta[refund.MetaAttempt] != "1" {
				t.Errorf("metadata %v: not the item's", meta)
			}
		})
	}
}

// TestCreateRefusedHere: a request PayPal could not take is not sent.
func TestCreateRefusedHere(t *testing.T) {
	f := newFake(t)
	f.api = func(w http.ResponseWriter, r *http.Request, body []byte, n int) { t.Error("a request was sent") }
	for _, it := range []*refund.Item{
		{Batch: "b", Item: "i", Capture: "", Amount: 100, Currency: "usd"}, // no capture
		{Batch: "b", Item: "i", Capture: "C", Amount: 100},                 // a partial refund without currency
		{Batch: "b", Item: "i", Capture: "C", Amount: 150050, Currency: "huf"},
	} {
		_, err := f.client().Create(context.Background(), it, 1)
		if got := refund.Classify(err); got.Class != refund.ClassFinal || got.Status != 0 {
			t.Errorf("%+v: %+v, want final with no status", it, got)
		}
	}
}

// TestTokenCachedAndRenewedBeforeExpiry: one token serves every call
// until five minutes before it expires; then a new one is fetched.
func TestTokenCachedAndRenewedBeforeExpiry(t *testing.T) {
	f := newFake(t)
	f.tokenTTL = 3600
	f.api = func(w http.ResponseWriter, r *http.Request, body []byte, n int) {
		answer(w, 200, refundJSON("R1", "COMPLETED", "1.00", "USD", "", "C"))
	}
	c := f.client()
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c.now = clk.now
	get := func() {
		t.Helper()
		if _, err := c.Get(context.Background(), "R1"); err != nil {
			t.Fatal(err)
		}
	}
	get()
	clk.add(55*time.Minute - time.Second)
	get()
	if n := f.tokensIssued(); n != 1 {
		t.Fatalf("%d tokens fetched before expiry, want 1", n)
	}
	clk.add(time.Second)
	get()
	if n := f.tokensIssued(); n != 2 {
		t.Fatalf("%d tokens fetched, want 2: renewed 5 minutes before expiry", n)
	}
	calls := f.sent()
	if calls[1].auth != "Bearer tok-1" || calls[2].auth != "Bearer tok-2" {
		t.Errorf("tokens used: %q %q, want tok-1 then tok-2", calls[1].auth, calls[2].auth)
	}
}

// TestTokenRenewedOn401KeepsRequestID: PayPal refuses a token it no longer
// takes (401 invalid_token); the refund is sent again with a new token and
// the same PayPal-Request-Id and body, so PayPal can refund at most once.
func TestTokenRenewedOn401KeepsRequestID(t *testing.T) {
	f := newFake(t)
	f.api = func(w http.ResponseWriter, r *http.Request, body []byte, n int) {
		if r.Header.Get("Authorization") == "Bearer tok-1" {
			answer(w, 401, `{"error":"invalid_token","error_description":"Token signature verification failed"}`)
			return
		}
		answer(w, 201, refundJSON("R1", "COMPLETED", "10.50", "USD", "refundkit,b1,order,42,3", "CAP123"))
	}
	a, err := f.client().Create(context.Background(), item(1050, "usd"), 3)
	if err != nil {
		t.Fatal(err)
	}
	sent := f.sent()
	if len(sent) != 2 || f.tokensIssued() != 2 {
		t.Fatalf("%d refund requests, %d tokens; want 2 and 2", len(sent), f.tokensIssued())
	}
	want := refund.IdempotencyKey("b1", "order:42", 3)
	for i, s := range sent {
		if s.requestID != want || string(s.body) != string(sent[0].body) {
			t.Errorf("request %d: id %q body %s, want id %q and the first body", i, s.requestID, s.body, want)
		}
	}
	if sent[1].auth != "Bearer tok-2" || a.ID != "R1" {
		t.Errorf("retry with %q answered %+v", sent[1].auth, a)
	}
}

// TestCredentialsRefused: a 401 with a renewed token, or the token
// endpoint's own refusal, halts the run; neither the secret nor a token
// is in the error.
func TestCredentialsRefused(t *testing.T) {
	t.Run("401 after renewal", func(t *testing.T) {
		f := newFake(t)
		f.api = func(w http.ResponseWriter, r *http.Request, body []byte, n int) {
			answer(w, 401, `{"name":"AUTHENTICATION_FAILURE","message":"Authentication failed due to invalid authentication credentials or a missing Authorization header."}`)
		}
		_, err := f.client().Create(context.Background(), item(100, "usd"), 1)
		got := refund.Classify(err)
		if got.Class != refund.ClassFatal || got.Status != 401 || got.Code != "AUTHENTICATION_FAILURE" {
			t.Errorf("%+v, want fatal 401 AUTHENTICATION_FAILURE", got)
		}
		if n := len(f.sent()); n != 2 {
			t.Errorf("%d refund requests, want 2 (one renewal)", n)
		}
		noSecrets(t, err.Error())
	})
	t.Run("invalid_client", func(t *testing.T) {
		f := newFake(t)
		f.tokenFail = func() bool { return true }
		f.api = func(w http.ResponseWriter, r *http.Request, body []byte, n int) {
			t.Error("a refund was sent without a token")
		}
		_, err := f.client().Create(context.Background(), item(100, "usd"), 1)
		got := refund.Classify(err)
		if got.Class != refund.ClassFatal || got.Code != "invalid_client" {
			t.Errorf("%+v, want fatal invalid_client", got)
		}
		noSecrets(t, err.Error())
	})
}

// TestErrorClasses: every answer class as the engine reads it, through
// the real client; the secret and tokens are never in an error.
func TestErrorClasses(t *testing.T) {
	paypalsError := func(name, issue string) string {
		return fmt.Sprintf(`{"name":%q,"message":"said","debug_id":"dbg-1","details":[{"issue":%q,"description":"described"}]}`, name, issue)
	}
	for _, tc := range []struct {
		name   string
		status int
		debug  bool
		body   string
		want   refund.Failure
	}{
		{"business refusal", 422, true, paypalsError("UNPROCESSABLE_ENTITY", "CAPTURE_FULLY_REFUNDED"),
			refund.Failure{Class: refund.ClassFinal, Status: 422, Code: "CAPTURE_FULLY_REFUNDED"}},
		{"amount exceeded", 422, true, paypalsError("UNPROCESSABLE_ENTITY", "REFUND_AMOUNT_EXCEEDED"),
			refund.Failure{Class: refund.ClassFinal, Status: 422, Code: "REFUND_AMOUNT_EXCEEDED"}},
		{"rate limited", 429, true, `{"name":"RATE_LIMIT_REACHED","message":"Too many requests. Blocked due to rate limiting.","debug_id":"dbg-1"}`,
			refund.Failure{Class: refund.ClassRetry, Status: 429, Code: "RATE_LIMIT_REACHED", RateLimited: true, AccountLimit: true}},
		{"in progress", 409, true, `{"name":"RESOURCE_CONFLICT","message":"previous request in progress","debug_id":"dbg-1"}`,
			refund.Failure{Class: refund.ClassRetry, Status: 409, Code: "RESOURCE_CONFLICT"}},
		{"paypal's 500", 500, true, `{"name":"INTERNAL_SERVER_ERROR","message":"An internal server error occurred.","debug_id":"dbg-1"}`,
			refund.Failure{Class: refund.ClassRetry, Code: "INTERNAL_SERVER_ERROR"}},
		{"paypal's 503 without a body", 503, true, ``,
			refund.Failure{Class: refund.ClassRetry, Code: "http_503"}},
		{"gateway 502", 502, false, `<html>bad gateway</html>`,
			refund.Failure{Class: refund.ClassRetry, Code: "gateway_502"}},
		{"gateway 504 in paypal's shape", 504, false, `{"name":"INTERNAL_SERVER_ERROR","message":"x"}`,
			refund.Failure{Class: refund.ClassRetry, Code: "gateway_504"}},
		{"a proxy's 401", 401, false, `denied`,
			refund.Failure{Class: refund.ClassRetry, Code: "gateway_401"}},
		{"not permitted", 403, true, `{"name":"NOT_AUTHORIZED","message":"Authorization failed due to insufficient permissions.","debug_id":"dbg-1"}`,
			refund.Failure{Class: refund.ClassFatal, Status: 403, Code: "NOT_AUTHORIZED"}},
		{"unknown capture", 404, true, `{"name":"RESOURCE_NOT_FOUND","details":[{"issue":"INVALID_RESOURCE_ID"}],"debug_id":"dbg-1"}`,
			refund.Failure{Class: refund.ClassFinal, Status: 404, Code: "INVALID_RESOURCE_ID"}},
		{"malformed request", 400, true, paypalsError("INVALID_REQUEST", "INVALID_PARAMETER_SYNTAX"),
			refund.Failure{Class: refund.ClassFinal, Status: 400, Code: "INVALID_PARAMETER_SYNTAX"}},
		{"a success without a body", 204, true, ``,
			refund.Failure{Class: refund.ClassRetry, Code: "unreadable_answer"}},
		{"a success that is not a refund", 201, false, `<html>welcome</html>`,
			refund.Failure{Class: refund.ClassRetry, Code: "unreadable_answer"}},
		{"an unknown status", 201, true, `{"id":"R1","status":"WEIRD","amount":{"value":"1.00","currency_code":"USD"}}`,
			refund.Failure{Class: refund.ClassRetry, Code: "unreadable_answer"}},
		{"an amount that is not exact", 201, true, `{"id":"R1","status":"COMPLETED","amount":{"value":"1.005","currency_code":"USD"}}`,
			refund.Failure{Class: refund.ClassRetry, Code: "unreadable_answer"}},
		{"a zero amount", 201, true, `{"id":"R1","status":"COMPLETED","amount":{"value":"0.00","currency_code":"USD"}}`,
			refund.Failure{Class: refund.ClassRetry, Code: "unreadable_answer"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			f.api = func(w http.ResponseWriter, r *http.Request, body []byte, n int) {
				if tc.debug {
					w.Header().Set(wire.DebugIDHeader, "dbg-1")
				}
				w.WriteHeader(tc.status)
				fmt.Fprint(w, tc.body)
			}
			_, err := f.client().Create(context.Background(), item(100, "usd"), 1)
			if err == nil {
				t.Fatal("no error")
			}
			got := refund.Classify(fmt.Errorf("wrapped: %w", err))
			got.Err, got.Message = nil, ""
			if got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			noSecrets(t, err.Error())
			if n := len(f.sent()); n != 1 {
				t.Errorf("%d requests: the client repeats no call of its own", n)
			}
		})
	}
}

// TestNoAnswer: a connection that drops, or a call stopped, is no answer;
// a stop stays a stop.
func TestNoAnswer(t *testing.T) {
	f := newFake(t)
	f.api = func(w http.ResponseWriter, r *http.Request, body []byte, n int) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}
	c := f.client()
	_, err := c.Create(context.Background(), item(100, "usd"), 1)
	if got := refund.Classify(err); got.Class != refund.ClassRetry || got.Code != "network_error" || got.Status != 0 {
		t.Errorf("dropped: %+v, want retry network_error", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = c.Get(ctx, "R1")
	if got := refund.Classify(err); got.Class != refund.ClassStopped || !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %+v, want stopped", got)
	}
}

// TestStatuses: PayPal's refund statuses in refundkit's words, as Get
// reads them; a pending refund says why.
func TestStatuses(t *testing.T) {
	for paypal, want := range map[string]string{
		"COMPLETED": refund.RefundSucceeded, "PENDING": refund.RefundPending,
		"FAILED": refund.RefundFailed, "CANCELLED": refund.RefundCanceled,
	} {
		f := newFake(t)
		f.api = func(w http.ResponseWriter, r *http.Request, body []byte, n int) {
			if r.Method != "GET" || r.URL.Path != "/v2/payments/refunds/R9" {
				t.Errorf("%s %s", r.Method, r.URL.Path)
			}
			answer(w, 200, refundJSON("R9", paypal, "7", "JPY", "refundkit,b2,i,2", "CAP9"))
		}
		r, err := f.client().Get(context.Background(), "R9")
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != want || r.Amount != 7 || r.Currency != "jpy" || r.Capture != "CAP9" || !refund.Matches(&r, "b2", "i") {
			t.Errorf("%s: %+v", paypal, r)
		}
		if (paypal == "PENDING") != (r.FailureReason == "ECHECK") {
			t.Errorf("%s: reason %q", paypal, r.FailureReason)
		}
	}
}

// TestNoCancel: what PayPal's API cannot do is said, not faked.
func TestNoCancel(t *testing.T) {
	c := New("", testID, testSecret, 1)
	if _, err := c.Cancel(context.Background(), "R1"); refund.Classify(err).Class != refund.ClassFinal {
		t.Errorf("Cancel: %v, want a final refusal", err)
	}
	if f := c.Facts(); f.KeyTTL != 45*24*time.Hour || f.LateOutcomes || f.Name != "PayPal" {
		t.Errorf("Facts %+v", f)
	}
}
