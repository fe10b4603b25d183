package paypalsim

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund/sim"
)

// TestFaultsOnRefunds: each of the knobs Stripe's routes have, on PayPal's
// refund route, then the same request id with the knobs off: what the
// fault left behind is exactly one refund (or none) and the retry's answer.
func TestFaultsOnRefunds(t *testing.T) {
	body := `{"amount":{"value":"1.00","currency_code":"USD"}}`
	for _, tt := range []struct {
		name    string
		f       sim.Faults
		status  int    // the faulty answer; 0: no answer at all
		debugID bool   // the answer is PayPal's own (a Paypal-Debug-Id)
		want    string // in the faulty answer's body
		made    int64  // refunds made by the faulty request
	}{
		{"rate limit", sim.Faults{RateLimitShare: 1}, 429, true, `"name":"RATE_LIMIT_REACHED"`, 0},
		{"500 before commit", sim.Faults{ErrorBeforeCommitShare: 1}, 500, true, `"name":"INTERNAL_SERVER_ERROR"`, 0},
		{"500 after commit", sim.Faults{ErrorAfterCommitShare: 1}, 500, true, `"name":"INTERNAL_SERVER_ERROR"`, 1},
		{"dropped after commit", sim.Faults{DropAfterCommitShare: 1}, 0, false, "", 1},
		{"gateway 502 after commit", sim.Faults{GatewayErrorAfterCommitShare: 1}, 502, false, "<html>", 1},
		{"gateway 503 json", sim.Faults{GatewayErrorAfterCommitShare: 1, GatewayStatus: 503, GatewayStripeBody: true}, 503, false, `"name":"INTERNAL_SERVER_ERROR"`, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, tt.f, usd("CAP1", 1000))
			a := h.refund("CAP1", "rid-1", body)
			if a.status != tt.status || (a.header.Get(DebugIDHeader) != "") != tt.debugID || !strings.Contains(a.body, tt.want) {
				t.Errorf("faulty answer: %d %v %s", a.status, a.header, a.body)
			}
			if h.created() != tt.made {
				t.Errorf("%d refunds made, want %d", h.created(), tt.made)
			}
			h.setFaults(sim.Faults{})
			retry := h.refund("CAP1", "rid-1", body)
			if retry.status != 201 || retry.str("status") != StatusCompleted || h.created() != 1 || len(h.s.Refunds()) != 1 {
				t.Errorf("retry: %d %s, %d created", retry.status, retry.body, h.created())
			}
		})
	}
}

// TestGatewayTimeoutOnRefund: the gateway answers 504 at once while the
// refund goes on holding its request id: a retry meanwhile gets 409, after
// it the refund.
func TestGatewayTimeoutOnRefund(t *testing.T) {
	h := start(t, sim.Faults{GatewayTimeoutShare: 1}, usd("CAP1", 1000))
	release := make(chan struct{})
	h.s.SetCreateHook(func(string) { <-release })
	a := h.refund("CAP1", "rid-1", "")
	if a.status != 504 || a.header.Get(DebugIDHeader) != "" || !strings.HasPrefix(a.body, "<html>") {
		t.Errorf("gateway: %d %v %s", a.status, a.header, a.body)
	}
	h.setFaults(sim.Faults{})
	if r := h.refund("CAP1", "rid-1", ""); r.status != 409 || h.created() != 0 {
		t.Errorf("retry in flight: %d %s", r.status, r.body)
	}
	// Forgetting ids keeps the one in flight.
	h.core.Keys.Forget()
	if r := h.refund("CAP1", "rid-1", ""); r.status != 409 {
		t.Errorf("in flight after forget: %d %s", r.status, r.body)
	}
	close(release)
	if err := h.core.Settle(context.Background()); err != nil {
		t.Fatal(err)
	}
	r := h.refund("CAP1", "rid-1", "")
	if r.status != 201 || r.str("amount.value") != "10.00" || h.created() != 1 || h.core.Count.GatewayTimeouts.Load() != 1 {
		t.Errorf("after: %d %s, %d created", r.status, r.body, h.created())
	}
}

// TestLatencyAndRateLimitOnEveryRoute: latency holds every PayPal route
// (the token's too) and the 429 share refuses any of them, never saving
// the answer under a request id.
func TestLatencyAndRateLimitOnEveryRoute(t *testing.T) {
	h := start(t, sim.Faults{}, usd("CAP1", 1000))
	h.setFaults(sim.Faults{Latency: 20 * time.Millisecond})
	for _, send := range []func() answer{
		func() answer {
			return h.raw("POST", "/v1/oauth2/token", "client-1:secret-1", "", "grant_type=client_credentials")
		},
		func() answer { return h.refund("CAP1", "rid-lat", `{"amount":{"value":"1.00","currency_code":"USD"}}`) },
		func() answer { return h.get("/v2/payments/captures/CAP1") },
		func() answer { return h.get("/v2/payments/refunds/" + h.s.refunds.ID(1)) },
		func() answer { return h.get("/v2/checkout/orders/ORDSIM00000000001") },
	} {
		t0 := time.Now()
		if a := send(); a.status/100 != 2 {
			t.Errorf("%d %s", a.status, a.body)
		}
		if d := time.Since(t0); d < 20*time.Millisecond {
			t.Errorf("answered in %v, under the 20ms latency", d)
		}
	}
	h.setFaults(sim.Faults{RateLimitShare: 1})
	for _, a := range []answer{
		h.raw("POST", "/v1/oauth2/token", "client-1:secret-1", "", "grant_type=client_credentials"),
		h.refund("CAP1", "rid-429", ""),
		h.get("/v2/payments/captures/CAP1"),
		h.get("/v2/payments/refunds/" + h.s.refunds.ID(1)),
		h.get("/v2/checkout/orders/ORDSIM00000000001"),
	} {
		if a.status != 429 || a.str("name") != "RATE_LIMIT_REACHED" {
			t.Errorf("%d %s", a.status, a.body)
		}
	}
	h.setFaults(sim.Faults{})
	if a := h.refund("CAP1", "rid-429", ""); a.status != 201 || a.str("amount.value") != "9.00" {
		t.Errorf("after 429: %d %s", a.status, a.body)
	}
}
