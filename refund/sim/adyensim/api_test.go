package adyensim

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
	"github.com/refundkit/refundkit/refund/sim"
)

var refundIDRE = regexp.MustCompile(`^[A-Z0-9]{16}$`)

func TestCreateReceived(t *testing.T) {
	h := start(t, sim.Faults{}, Config{}, false)
	key := wire.Key("b", "i1", 1)
	a := h.refund("PAY1", body(2500, "EUR", "refundkit:b:i1:1"), key)
	r := h.created(a)
	if !refundIDRE.MatchString(r.PSPReference) || r.PaymentPSPReference != "PAY1" || r.Status != "received" ||
		r.MerchantAccount != DefaultMerchantAccount || r.Reference != "refundkit:b:i1:1" || r.Amount != (wire.Amount{Currency: "EUR", Value: 2500}) {
		t.Errorf("answer %s", a.body)
	}
	if a.key != key || a.transient {
		t.Errorf("headers: key %q transient %v, want the key echoed", a.key, a.transient)
	}
	refunds := h.s.Refunds()
	if len(refunds) != 1 || refunds[0].ID != r.PSPReference || refunds[0].Status != StatusReceived || refunds[0].Outcome != OutcomeRefunded ||
		refunds[0].IdempotencyKey != key || refunds[0].Payment != "PAY1" {
		t.Errorf("refunds %+v", refunds)
	}
	if p, _ := h.s.Payment("PAY1"); p.Refunded != 2500 || p.Refunds != 1 {
		t.Errorf("payment %+v", p)
	}
	// No key: made, and nothing echoed.
	if a := h.refund("PAY1", body(100, "EUR", ""), ""); a.status != http.StatusCreated || a.key != "" {
		t.Errorf("no key: %d %q", a.status, a.key)
	}
}

func TestReplayFirstAnswer(t *testing.T) {
	h := start(t, sim.Faults{}, Config{}, false)
	first := h.refund("PAY1", body(2500, "EUR", "r1"), "k1")
	again := h.refund("PAY1", body(2500, "EUR", "r1"), "k1")
	if again.status != first.status || again.body != first.body || again.key != "k1" {
		t.Errorf("replay %d %s, want %d %s", again.status, again.body, first.status, first.body)
	}
	// Other parameters under the key: Adyen documents no check, it
	// returns "the response to the first attempt"; counted apart.
	other := h.refund("PAY2", body(700, "EUR", "r2"), "k1")
	if other.body != first.body {
		t.Errorf("other parameters: %d %s, want the first answer", other.status, other.body)
	}
	st := h.s.Stats()
	if len(h.s.Refunds()) != 1 || st.RefundsCreated != 1 || st.Replayed != 2 || st.ReplayedOtherParams != 1 {
		t.Errorf("stats %+v, %d refunds", st, len(h.s.Refunds()))
	}
}

func TestConcurrentDuplicate704(t *testing.T) {
	for _, tt := range []struct {
		status, want int
	}{{0, http.StatusUnprocessableEntity}, {409, http.StatusConflict}} {
		h := start(t, sim.Faults{AdyenConflictStatus: tt.status}, Config{}, false)
		held, release := make(chan struct{}), make(chan struct{})
		h.s.SetCreateHook(func(key string) {
			if key == "k1" {
				close(held)
				<-release
			}
		})
		done := make(chan answer)
		go func() { done <- h.refund("PAY1", body(100, "EUR", ""), "k1") }()
		<-held
		dup := h.refund("PAY1", body(100, "EUR", ""), "k1")
		wantError(t, dup, tt.want, "704", "validation")
		if !dup.transient || dup.key != "" {
			t.Errorf("704: transient %v key %q, want transient and no key", dup.transient, dup.key)
		}
		// Other parameters while in flight: the same 704.
		wantError(t, h.refund("PAY1", body(999, "EUR", ""), "k1"), tt.want, "704", "validation")
		close(release)
		first := <-done
		h.created(first)
		if again := h.refund("PAY1", body(100, "EUR", ""), "k1"); again.body != first.body {
			t.Errorf("after the first: %s, want %s", again.body, first.body)
		}
		if st := h.s.Stats(); st.KeyInUse != 2 || len(h.s.Refunds()) != 1 {
			t.Errorf("stats %+v", st)
		}
	}
}

func TestRefusals(t *testing.T) {
	h := start(t, sim.Faults{}, Config{Payments: []Payment{{PSPReference: "OTHER1", Amount: 500, MerchantAccount: "OtherShop"}}}, false)
	other := `{"amount":{"value":100,"currency":"EUR"},"merchantAccount":"OtherShop"}`
	for _, tt := range []struct {
		name, psp, body, key string
		status               int
		code, errType        string
	}{
		{"unknown payment", "NOSUCH", body(100, "EUR", ""), "", 422, "167", "validation"},
		{"payment of another account", "PAY1", other, "", 422, "167", "validation"},
		{"unknown merchant account", "PAY1", `{"amount":{"value":100,"currency":"EUR"},"merchantAccount":"Nobody"}`, "", 403, "901", "security"},
		{"no merchant account", "PAY1", `{"amount":{"value":100,"currency":"EUR"}}`, "", 403, "901", "security"},
		{"no amount", "PAY1", `{"merchantAccount":"RefundkitSim"}`, "", 422, "100", "validation"},
		{"zero amount", "PAY1", body(0, "EUR", ""), "", 422, "137", "validation"},
		{"other currency", "PAY1", body(100, "USD", ""), "", 422, "137", "validation"},
		{"not JSON", "PAY1", `{"amount":`, "", 400, "000", "validation"},
		{"key too long", "PAY1", body(100, "EUR", ""), strings.Repeat("k", 65), 422, "000", "validation"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := h.refund(tt.psp, tt.body, tt.key)
			wantError(t, a, tt.status, tt.code, tt.errType)
			if a.transient {
				t.Error("a refusal marked transient")
			}
		})
	}
	wantError(t, h.refundWithAPIKey("PAY1", body(100, "EUR", ""), "", ""), 401, "000", "security")
	wantError(t, h.refundWithAPIKey("PAY1", body(100, "EUR", ""), "", "wrong"), 401, "000", "security")
	// The account a payment names is one the key acts for.
	h.created(h.refund("OTHER1", other, ""))
	if n := len(h.s.Refunds()); n != 1 {
		t.Errorf("%d refunds, want 1", n)
	}
	// A business refusal is saved under its key; a body that does not
	// parse is not.
	h.refund("NOSUCH", body(100, "EUR", ""), "k-refused")
	if err := h.s.AddPayments(Payment{PSPReference: "NOSUCH", Amount: 1000}); err != nil {
		t.Fatal(err)
	}
	wantError(t, h.refund("NOSUCH", body(100, "EUR", ""), "k-refused"), 422, "167", "validation")
	h.refund("NOSUCH", `{`, "k-unparsed")
	h.created(h.refund("NOSUCH", body(100, "EUR", ""), "k-unparsed"))
}

func TestOverRefund(t *testing.T) {
	// Adyen's way: received, refused by its REFUND notification.
	h := start(t, sim.Faults{}, Config{}, true)
	h.created(h.refund("PAY2", body(4000, "EUR", "a"), "k1"))
	over := h.created(h.refund("PAY2", body(1001, "EUR", "b"), "k2"))
	h.created(h.refund("PAY2", body(1000, "EUR", "c"), "k3"))
	h.flush()
	var got *wire.Item
	for _, it := range h.recv.accepted() {
		if it.PSPReference == over.PSPReference {
			got = &it
		}
	}
	if got == nil || got.EventCode != wire.EventRefund || got.Success != "false" || got.Reason != "Insufficient balance on payment" {
		t.Fatalf("notification of the over-refund: %+v", got)
	}
	if p, _ := h.s.Payment("PAY2"); p.Refunded != 5000 {
		t.Errorf("refunded %d, want 5000", p.Refunded)
	}
	// At once, with the knob.
	h.core.StoreFaults(sim.Faults{AdyenOverRefund422: true})
	wantError(t, h.refund("PAY2", body(1, "EUR", ""), "k4"), 422, "137", "validation")
}

func TestFaultsOnRefunds(t *testing.T) {
	h := start(t, sim.Faults{ErrorBeforeCommitShare: 1}, Config{}, false)
	a := h.refund("PAY1", body(100, "EUR", ""), "k1")
	wantError(t, a, 500, "701", "internal")
	if !a.transient || a.key != "" || len(h.s.Refunds()) != 0 {
		t.Errorf("500 before commit: transient %v key %q, %d refunds", a.transient, a.key, len(h.s.Refunds()))
	}
	// Transient: the retry with the key runs as the first.
	h.core.StoreFaults(sim.Faults{})
	h.created(h.refund("PAY1", body(100, "EUR", ""), "k1"))

	// After the commit: the 500 is saved, and replayed.
	h.core.StoreFaults(sim.Faults{ErrorAfterCommitShare: 1})
	a = h.refund("PAY1", body(100, "EUR", ""), "k2")
	wantError(t, a, 500, "701", "internal")
	if a.transient || a.key != "k2" {
		t.Errorf("500 after commit: transient %v key %q, want saved", a.transient, a.key)
	}
	h.core.StoreFaults(sim.Faults{})
	if again := h.refund("PAY1", body(100, "EUR", ""), "k2"); again.status != 500 || again.body != a.body {
		t.Errorf("replay of the 500: %d %s", again.status, again.body)
	}
	if n := len(h.s.Refunds()); n != 2 {
		t.Errorf("%d refunds, want 2", n)
	}

	h.core.StoreFaults(sim.Faults{RateLimitShare: 1})
	a = h.refund("PAY1", body(100, "EUR", ""), "k3")
	if wantError(t, a, 429, "000", "validation"); !a.transient {
		t.Error("429 not transient")
	}

	// The gateway: 504 at once while the refund goes on, then the success.
	h.core.StoreFaults(sim.Faults{GatewayTimeoutShare: 1, GatewayStripeBody: true})
	a = h.refund("PAY1", body(100, "EUR", ""), "k4")
	if a.status != 504 || a.key != "" || !strings.Contains(a.body, `"errorType":"internal"`) || strings.Contains(a.body, "pspReference") {
		t.Errorf("gateway: %d %q %s", a.status, a.key, a.body)
	}
	h.core.StoreFaults(sim.Faults{})
	h.flush() // settles the request behind the gateway
	h.created(h.refund("PAY1", body(100, "EUR", ""), "k4"))
	if n := len(h.s.Refunds()); n != 3 {
		t.Errorf("%d refunds, want 3", n)
	}
}

func TestKeyTTLAndForget(t *testing.T) {
	h := start(t, sim.Faults{}, Config{KeyTTL: KeyTTL}, false)
	first := h.created(h.refund("PAY1", body(100, "EUR", ""), "k1"))
	h.clock.advance(KeyTTL - time.Second)
	if again := h.created(h.refund("PAY1", body(100, "EUR", ""), "k1")); again.PSPReference != first.PSPReference {
		t.Errorf("within the ttl: a new refund %s", again.PSPReference)
	}
	h.clock.advance(time.Second)
	if again := h.created(h.refund("PAY1", body(100, "EUR", ""), "k1")); again.PSPReference == first.PSPReference {
		t.Error("past the ttl: the first answer replayed")
	}
	// ForgetKeys forgets Adyen's keys only.
	h.core.Keys.Begin("stripe\x00x", "POST", "/v1/refunds", "", h.clock.now(), 0)
	h.refund("PAY1", body(100, "EUR", ""), "k2")
	if n := h.s.ForgetKeys(); n != 2 {
		t.Errorf("forgot %d keys, want 2", n)
	}
	if n := h.core.Keys.Size(); n != 1 {
		t.Errorf("%d keys left, want Stripe's in flight", n)
	}
	if n := len(h.s.Refunds()); n != 3 {
		t.Fatalf("%d refunds, want 3", n)
	}
	h.created(h.refund("PAY1", body(100, "EUR", ""), "k2"))
	if n := len(h.s.Refunds()); n != 4 {
		t.Errorf("after forgetting: %d refunds, want 4", n)
	}
}

func TestReadPayments(t *testing.T) {
	ps, err := ReadPayments(strings.NewReader(`{"psp_reference":"A1","amount":5}`+"\n\n"+`{"psp_reference":"B2","currency":"usd","amount":7,"merchant_account":"Shop"}`), "p.jsonl")
	if err != nil || len(ps) != 2 || ps[1].MerchantAccount != "Shop" {
		t.Fatalf("%+v %v", ps, err)
	}
	for in, want := range map[string]string{
		`{"psp_reference":"A-1","amount":5}`:                                              "p.jsonl:1: psp_reference \"A-1\": want 1-64 letters and digits",
		`{"psp_reference":"A1","amount":0}`:                                               "p.jsonl:1: amount 0: want a positive whole number of minor units",
		`{"psp_reference":"A1","amount":5,"x":1}`:                                         "p.jsonl:1: not a payment: unknown field \"x\"",
		`{"psp_reference":"A1","amount":5,"currency":"EU"}`:                               "p.jsonl:1: currency \"EU\": want a three-letter ISO code",
		"{\"psp_reference\":\"A1\",\"amount\":5}\n" + `{"psp_reference":"A1","amount":6}`: "p.jsonl:2: payment A1: already given on line 1",
	} {
		if _, err := ReadPayments(strings.NewReader(in), "p.jsonl"); err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %s", in, err, want)
		}
	}
	g := GeneratePayments(3, 7)
	if len(g) != 3 || g[2].PSPReference != "SIMPAY0000000003" || !refundIDRE.MatchString(g[0].PSPReference) || g[0].Currency != "EUR" {
		t.Errorf("generated %+v", g)
	}
	if again := GeneratePayments(3, 7); again[1] != g[1] {
		t.Error("not the same payments for the same seed")
	}
}
