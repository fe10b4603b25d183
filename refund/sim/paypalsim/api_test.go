package paypalsim

import (
	"strings"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund/sim"
)

// TestTokens: client credentials get a token; API calls without one, with
// an unknown one or an expired one are refused 401 as PayPal refuses them,
// and the secret or token never comes back in an answer.
func TestTokens(t *testing.T) {
	h := start(t, sim.Faults{PayPalTokenTTL: 90 * time.Second}, usd("CAP1", 1000))
	for _, tt := range []struct {
		name, basic, form string
		status            int
		want              string
	}{
		{"no secret", "client-1:", "grant_type=client_credentials", 401, `"error":"invalid_client"`},
		{"no id", ":secret-1", "grant_type=client_credentials", 401, `"error":"invalid_client"`},
		{"other grant", "client-1:secret-1", "grant_type=password", 400, `"error":"unsupported_grant_type"`},
		{"ok", "client-1:secret-1", "grant_type=client_credentials", 200, `"expires_in":90,`},
	} {
		a := h.raw("POST", "/v1/oauth2/token", tt.basic, "", tt.form)
		if a.status != tt.status || !strings.Contains(a.body, tt.want) || strings.Contains(a.body, "secret-1") {
			t.Errorf("%s: %d %s, want %d with %s", tt.name, a.status, a.body, tt.status, tt.want)
		}
	}
	if a := h.raw("GET", "/v2/payments/captures/CAP1", "", "-", ""); a.status != 401 || a.str("name") != "AUTHENTICATION_FAILURE" {
		t.Errorf("no token: %d %s", a.status, a.body)
	}
	if a := h.raw("GET", "/v2/payments/captures/CAP1", "", "A21AAforged", ""); a.status != 401 || a.str("error") != "invalid_token" {
		t.Errorf("unknown token: %d %s", a.status, a.body)
	}
	h.token = h.newToken() // one of 90 seconds
	if a := h.get("/v2/payments/captures/CAP1"); a.status != 200 {
		t.Fatalf("valid token: %d %s", a.status, a.body)
	}

	// The token expires: the refund request is refused, nothing is made;
	// a new token and the same request id make it once.
	h.clock.advance(90 * time.Second)
	a := h.refund("CAP1", "rid-1", `{"amount":{"value":"1.00","currency_code":"USD"}}`)
	if a.status != 401 || a.str("error") != "invalid_token" || strings.Contains(a.body, h.token) {
		t.Fatalf("expired token: %d %s", a.status, a.body)
	}
	if h.created() != 0 || h.s.Stats().TokensExpired != 1 {
		t.Fatalf("expired token made %d refunds (%+v)", h.created(), h.s.Stats())
	}
	h.token = h.newToken()
	first := h.refund("CAP1", "rid-1", `{"amount":{"value":"1.00","currency_code":"USD"}}`)
	again := h.refund("CAP1", "rid-1", `{"amount":{"value":"1.00","currency_code":"USD"}}`)
	if first.status != 201 || again.status != 201 || first.str("id") != again.str("id") || h.created() != 1 {
		t.Errorf("after renewal: %d %s / %d %s, %d created", first.status, first.body, again.status, again.body, h.created())
	}
}

// TestRefundAmounts: an empty body refunds the rest, an amount part of it,
// converted exactly for currencies with 2, 0 and 3 decimals and for HUF,
// which PayPal writes whole; the capture shows what was refunded.
func TestRefundAmounts(t *testing.T) {
	h := start(t, sim.Faults{}, usd("CAPUSD", 2500), Capture{ID: "CAPJPY", Currency: "JPY", Amount: 1000},
		Capture{ID: "CAPKWD", Currency: "KWD", Amount: 2000}, Capture{ID: "CAPHUF", Currency: "HUF", Amount: 500000})
	for _, tt := range []struct {
		capture, body, value, currency, total, captureStatus string
		minor                                                int64
	}{
		{"CAPUSD", `{"amount":{"value":"10.5","currency_code":"USD"},"custom_id":"refundkit,b,i,1","invoice_id":"INV-1","note_to_payer":"sorry"}`, "10.50", "USD", "10.50", "PARTIALLY_REFUNDED", 1050},
		{"CAPUSD", ``, "14.50", "USD", "25.00", "REFUNDED", 1450},
		{"CAPJPY", `{"amount":{"value":"500","currency_code":"JPY"}}`, "500", "JPY", "500", "PARTIALLY_REFUNDED", 500},
		{"CAPKWD", `{"amount":{"value":"1.5","currency_code":"KWD"}}`, "1.500", "KWD", "1.500", "PARTIALLY_REFUNDED", 1500},
		{"CAPKWD", `{}`, "0.500", "KWD", "2.000", "REFUNDED", 500},
		{"CAPHUF", `{"amount":{"value":"1500","currency_code":"HUF"}}`, "1500", "HUF", "1500", "PARTIALLY_REFUNDED", 150000},
		{"CAPHUF", ``, "3500", "HUF", "5000", "REFUNDED", 350000},
	} {
		a := h.refund(tt.capture, "", tt.body)
		if a.status != 201 || a.str("status") != "COMPLETED" || a.str("amount.value") != tt.value || a.str("amount.currency_code") != tt.currency ||
			a.str("seller_payable_breakdown.total_refunded_amount.value") != tt.total || a.header.Get(DebugIDHeader) == "" {
			t.Errorf("%s %s: %d %s", tt.capture, tt.body, a.status, a.body)
			continue
		}
		id := a.str("id")
		if got := h.get("/v2/payments/refunds/" + id); got.status != 200 || got.str("amount.value") != tt.value || got.str("links.0.href") != h.url+"/v2/payments/refunds/"+id {
			t.Errorf("show %s: %d %s", id, got.status, got.body)
		}
		if c := h.get("/v2/payments/captures/" + tt.capture); c.status != 200 || c.str("status") != tt.captureStatus {
			t.Errorf("capture %s: %d %s", tt.capture, c.status, c.body)
		}
	}
	refunds := h.s.Refunds()
	if len(refunds) != 7 || refunds[0].Amount != 1050 || refunds[0].CustomID != "refundkit,b,i,1" || refunds[0].InvoiceID != "INV-1" ||
		refunds[0].NoteToPayer != "sorry" || refunds[4].Amount != 500 || refunds[4].Currency != "KWD" {
		t.Errorf("refunds: %+v", refunds)
	}
	if c, _ := h.s.Capture("CAPJPY"); c.Refunded != 500 || c.Status != "PARTIALLY_REFUNDED" {
		t.Errorf("capture state %+v", c)
	}
	if c, _ := h.s.Capture("CAPHUF"); c.Refunded != 500000 || refunds[5].Amount != 150000 {
		t.Errorf("HUF: capture %+v, refund %+v", c, refunds[5])
	}
}

// TestRequestIDReplaysLatestStatus: the same PayPal-Request-Id again gets
// the request's latest status, the same refund, whatever the body says;
// without a request id PayPal makes the refund again.
func TestRequestIDReplaysLatestStatus(t *testing.T) {
	h := start(t, sim.Faults{}, usd("CAP1", 1000))
	body := `{"amount":{"value":"1.00","currency_code":"USD"}}`
	first := h.refund("CAP1", "rid-1", body)
	again := h.refund("CAP1", "rid-1", body)
	other := h.refund("CAP1", "rid-1", `{"amount":{"value":"2.00","currency_code":"USD"}}`)
	for _, a := range []answer{first, again, other} {
		if a.status != 201 || a.str("id") != first.str("id") || a.str("amount.value") != "1.00" {
			t.Errorf("answer %d %s, want refund %s of 1.00", a.status, a.body, first.str("id"))
		}
	}
	if h.created() != 1 || h.core.Count.Replayed.Load() != 2 {
		t.Errorf("%d created, %d replayed", h.created(), h.core.Count.Replayed.Load())
	}
	h.refund("CAP1", "", body)
	h.refund("CAP1", "", body)
	if h.created() != 3 {
		t.Errorf("without a request id: %d created, want 3", h.created())
	}
}

// TestRequestIDInFlight: a request with the id of one still running gets
// 409 and makes nothing; once the first finished, its refund.
func TestRequestIDInFlight(t *testing.T) {
	h := start(t, sim.Faults{}, usd("CAP1", 1000))
	entered, release := make(chan string), make(chan struct{})
	h.s.SetCreateHook(func(id string) { entered <- id; <-release })
	done := make(chan answer)
	go func() { done <- h.refund("CAP1", "rid-1", "") }()
	if id := <-entered; id != "rid-1" {
		t.Fatalf("hook saw %q", id)
	}
	for _, body := range []string{"", `{"amount":{"value":"1.00","currency_code":"USD"}}`} {
		a := h.refund("CAP1", "rid-1", body)
		if a.status != 409 || a.str("name") != "RESOURCE_CONFLICT" || a.issue() != "PREVIOUS_REQUEST_IN_PROGRESS" {
			t.Errorf("in flight, body %q: %d %s", body, a.status, a.body)
		}
	}
	h.s.SetCreateHook(nil)
	close(release)
	first := <-done
	after := h.refund("CAP1", "rid-1", "")
	if first.status != 201 || after.status != 201 || after.str("id") != first.str("id") || h.created() != 1 || h.core.Count.KeyInUse.Load() != 2 {
		t.Errorf("first %d %s, after %d %s, %d created", first.status, first.body, after.status, after.body, h.created())
	}
}

// TestPendingSettles: a PENDING refund (reason ECHECK) holds its amount,
// is PENDING until its time, then COMPLETED, or FAILED, giving the amount
// back; a look-up, a replay and the capture all see the change.
func TestPendingSettles(t *testing.T) {
	for _, final := range []string{StatusCompleted, StatusFailed} {
		t.Run(final, func(t *testing.T) {
			f := sim.Faults{PayPalPendingShare: 1, PayPalPendingFor: time.Hour}
			if final == StatusFailed {
				f.PayPalFailedShare = 1
			}
			h := start(t, f, usd("CAP1", 1000))
			a := h.refund("CAP1", "rid-1", "")
			id := a.str("id")
			if a.status != 201 || a.str("status") != StatusPending || a.str("status_details.reason") != "ECHECK" {
				t.Fatalf("create: %d %s", a.status, a.body)
			}
			if r := h.refund("CAP1", "rid-2", ""); r.issue() != "CAPTURE_FULLY_REFUNDED" {
				t.Errorf("a pending refund holds its amount: %d %s", r.status, r.body)
			}
			h.clock.advance(time.Hour - time.Nanosecond)
			if g := h.get("/v2/payments/refunds/" + id); g.str("status") != StatusPending {
				t.Errorf("before its time: %s", g.body)
			}
			h.clock.advance(time.Nanosecond)
			g := h.get("/v2/payments/refunds/" + id)
			replay := h.refund("CAP1", "rid-1", "")
			if g.str("status") != final || replay.str("status") != final || replay.str("id") != id {
				t.Errorf("settled: look-up %s, replay %s, want %s", g.body, replay.body, final)
			}
			wantCapture, wantReason := "REFUNDED", ""
			if final == StatusFailed {
				wantCapture, wantReason = "COMPLETED", "ECHECK"
			}
			if c := h.get("/v2/payments/captures/CAP1"); c.str("status") != wantCapture || g.str("status_details.reason") != wantReason {
				t.Errorf("capture %s, refund %s", c.body, g.body)
			}
			if st := h.s.Stats().Refunds; st[final] != 1 || st[StatusPending] != 0 {
				t.Errorf("stats %v", st)
			}
		})
	}
}

// TestRefusals: PayPal's 422 issues and 404 are saved under the request id
// (the same id again gets them again), its 400s are not (the id is free
// for the corrected request).
func TestRefusals(t *testing.T) {
	h := start(t, sim.Faults{}, usd("CAP1", 1000), Capture{ID: "CAPJPY", Currency: "JPY", Amount: 100},
		Capture{ID: "CAPHUF", Currency: "HUF", Amount: 100000}, Capture{ID: "CAPTWD", Currency: "TWD", Amount: 100000})
	for _, tt := range []struct {
		capture, body string
		status        int
		name, issue   string
	}{
		{"CAP1", `{"amount":{"value":"10.01","currency_code":"USD"}}`, 422, "UNPROCESSABLE_ENTITY", "REFUND_AMOUNT_EXCEEDED"},
		{"CAP1", `{"amount":{"value":"1.00","currency_code":"EUR"}}`, 422, "UNPROCESSABLE_ENTITY", "REFUND_CAPTURE_CURRENCY_MISMATCH"},
		{"CAPJPY", `{"amount":{"value":"1.5","currency_code":"JPY"}}`, 422, "UNPROCESSABLE_ENTITY", "DECIMALS_NOT_SUPPORTED"},
		{"CAPHUF", `{"amount":{"value":"10.50","currency_code":"HUF"}}`, 422, "UNPROCESSABLE_ENTITY", "DECIMALS_NOT_SUPPORTED"},
		{"CAPHUF", `{"amount":{"value":"10.00","currency_code":"HUF"}}`, 422, "UNPROCESSABLE_ENTITY", "DECIMALS_NOT_SUPPORTED"},
		{"CAPTWD", `{"amount":{"value":"1.5","currency_code":"TWD"}}`, 422, "UNPROCESSABLE_ENTITY", "DECIMALS_NOT_SUPPORTED"},
		{"CAP1", `{"amount":{"value":"0.00","currency_code":"USD"}}`, 422, "UNPROCESSABLE_ENTITY", "CANNOT_BE_ZERO_OR_NEGATIVE"},
		{"CAP1", `{"amount":{"value":"-1","currency_code":"USD"}}`, 422, "UNPROCESSABLE_ENTITY", "CANNOT_BE_ZERO_OR_NEGATIVE"},
		{"CAP1", `{"amount":{"value":"1.001","currency_code":"USD"}}`, 422, "UNPROCESSABLE_ENTITY", "DECIMAL_PRECISION"},
		{"NOSUCH", ``, 404, "RESOURCE_NOT_FOUND", "INVALID_RESOURCE_ID"},
		{"CAP1", `{"amount":`, 400, "INVALID_REQUEST", "MALFORMED_REQUEST_JSON"},
		{"CAP1", `{"amount":{"value":"1.00","currency_code":"USD"},"metadata":{}}`, 400, "INVALID_REQUEST", "MALFORMED_REQUEST_JSON"},
		{"CAP1", `{"amount":{"value":"1e2","currency_code":"USD"}}`, 400, "INVALID_REQUEST", "INVALID_PARAMETER_SYNTAX"},
		{"CAP1", `{"amount":{"currency_code":"USD"}}`, 400, "INVALID_REQUEST", "MISSING_REQUIRED_PARAMETER"},
		{"CAP1", `{"custom_id":"batch:item"}`, 400, "INVALID_REQUEST", "INVALID_PARAMETER_SYNTAX"},
		{"CAP1", `{"custom_id":"` + strings.Repeat("a", 128) + `"}`, 400, "INVALID_REQUEST", "INVALID_STRING_LENGTH"},
	} {
		rid := "rid-" + tt.capture + tt.body
		a := h.refund(tt.capture, rid, tt.body)
		if a.status != tt.status || a.str("name") != tt.name || a.issue() != tt.issue || a.str("debug_id") != a.header.Get(DebugIDHeader) {
			t.Errorf("%s %s: %d %s, want %d %s", tt.capture, tt.body, a.status, a.body, tt.status, tt.issue)
		}
		// Saved or not: the id again with a good request.
		again := h.refund("CAP1", rid, `{"amount":{"value":"0.01","currency_code":"USD"}}`)
		if saved := tt.status != 400; saved && (again.status != tt.status || again.issue() != tt.issue) || !saved && again.status != 201 {
			t.Errorf("%s %s, same id again: %d %s", tt.capture, tt.body, again.status, again.body)
		}
	}
	h.refund("CAP1", "", "")
	if a := h.refund("CAP1", "", ""); a.status != 422 || a.issue() != "CAPTURE_FULLY_REFUNDED" {
		t.Errorf("refunded capture: %d %s", a.status, a.body)
	}
	if a := h.get("/v2/payments/refunds/REFSIM99999999999"); a.status != 404 || a.issue() != "INVALID_RESOURCE_ID" {
		t.Errorf("unknown refund: %d %s", a.status, a.body)
	}
	if a := h.get("/v2/payments/captures/NOSUCH"); a.status != 404 {
		t.Errorf("unknown capture: %d %s", a.status, a.body)
	}
}

// TestForgottenRequestIDs: once PayPal forgot a request id (45 days, or
// the control endpoint), the same request makes a second refund; a request
// still in flight keeps its id.
func TestForgottenRequestIDs(t *testing.T) {
	h := start(t, sim.Faults{}, usd("CAP1", 1000))
	body := `{"amount":{"value":"1.00","currency_code":"USD"}}`
	first := h.refund("CAP1", "rid-1", body)
	if n := h.core.Keys.Forget(); n != 1 {
		t.Errorf("forgot %d ids, want 1", n)
	}
	second := h.refund("CAP1", "rid-1", body)
	if second.status != 201 || second.str("id") == first.str("id") || h.created() != 2 {
		t.Errorf("after forgetting: %s then %s, %d created", first.body, second.body, h.created())
	}
	// Expiry: 45 days after the request.
	h.clock.advance(RequestIDTTL - time.Second)
	h.token = h.newToken() // nine hours' tokens are long gone
	if a := h.refund("CAP1", "rid-1", body); a.str("id") != second.str("id") {
		t.Errorf("before 45 days: %s", a.body)
	}
	h.clock.advance(time.Second)
	h.token = h.newToken()
	if a := h.refund("CAP1", "rid-1", body); a.status != 201 || a.str("id") == second.str("id") || h.created() != 3 {
		t.Errorf("after 45 days: %s, %d created", a.body, h.created())
	}
}
