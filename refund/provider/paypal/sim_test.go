package paypal_test

// The client against the simulator's PayPal routes (refund/sim/paypalsim on
// the simulator's port): PayPal's semantics as the simulator keeps them.

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/provider/paypal"
	"github.com/refundkit/refundkit/refund/sim/paypalsim"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/refund/sim/stripesim/simtest"
)

func startSim(t *testing.T, faults stripesim.Faults, captures ...paypalsim.Capture) (*simtest.Sim, *paypal.Client) {
	t.Helper()
	s := simtest.Start(t, stripesim.Config{Faults: faults, Seed: 7, PayPal: paypalsim.Config{Captures: captures}})
	return s, paypal.New(s.URL, "sim-client", "sim-secret", 2)
}

func capItem(item, capture string, amount int64, currency string) *refund.Item {
	return &refund.Item{Batch: "sim-b1", Item: item, Capture: capture, Amount: amount, Currency: currency}
}

// TestSimReplayedRequestID: the same attempt sent twice is one refund; the
// second answer is the first refund, in its latest status.
func TestSimReplayedRequestID(t *testing.T) {
	s, c := startSim(t, stripesim.Faults{}, paypalsim.Capture{ID: "CAPUSD", Currency: "USD", Amount: 5000})
	it := capItem("order:1", "CAPUSD", 1050, "usd")
	first, err := c.Create(context.Background(), it, 1)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Create(context.Background(), it, 1)
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != first.ID || first.Amount != 1050 || first.Capture != "CAPUSD" || !refund.Matches(&again.Refund, "sim-b1", "order:1") {
		t.Errorf("first %+v\nagain %+v: want the same refund of 1050, the item's", first.Refund, again.Refund)
	}
	if n := len(s.PayPal().Refunds()); n != 1 {
		t.Errorf("%d refunds at the simulator, want 1", n)
	}
	if st, _ := s.PayPal().Capture("CAPUSD"); st.Refunded != 1050 {
		t.Errorf("capture refunded %d, want 1050", st.Refunded)
	}
}

// TestSimLostAnswers: answers dropped after the refund was made, and
// PayPal's 500 after it, are met by sending the same request id again,
// which gets the refund: one refund per item, in every currency.
func TestSimLostAnswers(t *testing.T) {
	s, c := startSim(t, stripesim.Faults{DropAfterCommitShare: 1},
		paypalsim.Capture{ID: "CAPUSD", Currency: "USD", Amount: 5000},
		paypalsim.Capture{ID: "CAPJPY", Currency: "JPY", Amount: 9000},
		paypalsim.Capture{ID: "CAPKWD", Currency: "KWD", Amount: 20000})
	items := []*refund.Item{
		capItem("usd", "CAPUSD", 1050, "usd"), capItem("jpy", "CAPJPY", 500, "jpy"),
		capItem("kwd", "CAPKWD", 1500, "kwd"), capItem("full", "CAPUSD", 0, ""),
	}
	for i, it := range items {
		if i == 2 {
			if err := s.SetFaults(stripesim.Faults{ErrorAfterCommitShare: 1}); err != nil {
				t.Fatal(err)
			}
		}
		_, err := c.Create(context.Background(), it, 1)
		if f := refund.Classify(err); err == nil || f.Class != refund.ClassRetry || f.Status != 0 {
			t.Fatalf("%s: %v (%+v), want no answer to retry", it.Item, err, f)
		}
	}
	if err := s.SetFaults(stripesim.Faults{}); err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		a, err := c.Create(context.Background(), it, 1)
		want := it.Amount
		if it.Item == "full" {
			want = 5000 - 1050
		}
		if err != nil || a.Amount != want || a.Status != refund.RefundSucceeded || !refund.Matches(&a.Refund, "sim-b1", it.Item) {
			t.Errorf("%s: %+v, %v; want the refund of %d made by the first call", it.Item, a.Refund, err, want)
		}
	}
	if n := len(s.PayPal().Refunds()); n != len(items) {
		t.Errorf("%d refunds at the simulator, want %d", n, len(items))
	}
}

// TestSimPendingSettles: a PENDING refund (ECHECK) is said as pending,
// and Get settles it once PayPal has.
func TestSimPendingSettles(t *testing.T) {
	_, c := startSim(t, stripesim.Faults{PayPalPendingShare: 1, PayPalPendingFor: 300 * time.Millisecond},
		paypalsim.Capture{ID: "CAPUSD", Currency: "USD", Amount: 5000})
	a, err := c.Create(context.Background(), capItem("p", "CAPUSD", 700, "usd"), 1)
	if err != nil {
		t.Fatal(err)
	}
	if a.Status != refund.RefundPending || a.FailureReason != "ECHECK" {
		t.Fatalf("created %+v, want pending (ECHECK)", a.Refund)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := c.Get(context.Background(), a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != refund.RefundPending {
			if r.Status != refund.RefundSucceeded || r.Amount != 700 || !refund.Matches(&r, "sim-b1", "p") {
				t.Errorf("settled as %+v, want succeeded, 700, the item's", r)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still pending after 20s: %+v", r)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSimRefusals: PayPal's 422s are final, with PayPal's issue as code.
func TestSimRefusals(t *testing.T) {
	s, c := startSim(t, stripesim.Faults{}, paypalsim.Capture{ID: "CAPUSD", Currency: "USD", Amount: 5000})
	_, err := c.Create(context.Background(), capItem("over", "CAPUSD", 6000, "usd"), 1)
	if f := refund.Classify(err); f.Class != refund.ClassFinal || f.Status != 422 || f.Code != "REFUND_AMOUNT_EXCEEDED" {
		t.Errorf("over the capture: %+v", f)
	}
	if _, err := c.Create(context.Background(), capItem("all", "CAPUSD", 0, ""), 1); err != nil {
		t.Fatal(err)
	}
	_, err = c.Create(context.Background(), capItem("again", "CAPUSD", 0, ""), 1)
	if f := refund.Classify(err); f.Class != refund.ClassFinal || f.Status != 422 || f.Code != "CAPTURE_FULLY_REFUNDED" {
		t.Errorf("refunded already: %+v", f)
	}
	_, err = c.Create(context.Background(), capItem("unknown", "CAPNONE", 100, "usd"), 1)
	if f := refund.Classify(err); f.Class != refund.ClassFinal || f.Status != 404 {
		t.Errorf("unknown capture: %+v", f)
	}
	if n := len(s.PayPal().Refunds()); n != 1 {
		t.Errorf("%d refunds, want 1", n)
	}
}

// TestSimTokenExpires: tokens that expire within a run are renewed before
// they do; no call is refused for its token.
func TestSimTokenExpires(t *testing.T) {
	s, c := startSim(t, stripesim.Faults{PayPalTokenTTL: 2 * time.Second}, paypalsim.Capture{ID: "CAPUSD", Currency: "USD", Amount: 5000})
	a, err := c.Create(context.Background(), capItem("t", "CAPUSD", 100, "usd"), 1)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // past half the token's life: renewed before use
	if _, err := c.Get(context.Background(), a.ID); err != nil {
		t.Fatal(err)
	}
	if n := s.Calls(simtest.PayPalToken); n != 2 {
		t.Errorf("%d tokens fetched, want 2", n)
	}
	if st := s.Stats(); st.Requests[simtest.PayPalRefund]+st.Requests[simtest.PayPalGetRefund] != 2 {
		t.Errorf("requests %v: one each, none refused", st.Requests)
	}
}

// TestSimInFlight: a second call under a request id whose first call is
// still running is refused 409, to be sent again; once the first is done,
// the same id gets its refund.
func TestSimInFlight(t *testing.T) {
	s, c := startSim(t, stripesim.Faults{}, paypalsim.Capture{ID: "CAPUSD", Currency: "USD", Amount: 5000})
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s.PayPal().SetCreateHook(func(string) {
		once.Do(func() { close(entered); <-release })
	})
	it := capItem("f", "CAPUSD", 300, "usd")
	first := make(chan refund.Answer, 1)
	go func() {
		a, err := c.Create(context.Background(), it, 1)
		if err != nil {
			t.Error(err)
		}
		first <- a
	}()
	<-entered
	_, err := c.Create(context.Background(), it, 1)
	if f := refund.Classify(err); f.Class != refund.ClassRetry || f.Status != 409 {
		t.Errorf("while in flight: %+v, want 409 to retry", f)
	}
	close(release)
	a := <-first
	again, err := c.Create(context.Background(), it, 1)
	if err != nil || again.ID != a.ID || len(s.PayPal().Refunds()) != 1 {
		t.Errorf("after: %+v, %v; want %s, one refund", again.Refund, err, a.ID)
	}
}
