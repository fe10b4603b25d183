package paypalsim

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	domain "github.com/refundkit/refundkit/refund"
	ppevents "github.com/refundkit/refundkit/refund/provider/paypal/events"
	"github.com/refundkit/refundkit/refund/sim"
)

const simWebhookID = "WH-SIM-7XK2"

// startEvents is start with PayPal's events sent to url.
func startEvents(t *testing.T, f sim.Faults, ev EventsConfig, captures ...Capture) *harness {
	t.Helper()
	clk := &fakeClock{}
	clk.ns.Store(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixNano())
	core := sim.NewCore(1, sim.Faults{})
	ev.WebhookID = simWebhookID
	s, err := New(core, Config{Captures: captures, Events: ev}, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	s.Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		core.CutLatency()
		srv.Close()
		s.Close()
		core.StopBackground()
	})
	h := &harness{t: t, s: s, core: core, clock: clk, url: srv.URL}
	h.token = h.newToken()
	core.StoreFaults(f)
	return h
}

// lateHandler is a receiver's handler set once the simulator, whose
// root it trusts, is made.
type lateHandler struct{ h atomic.Pointer[http.Handler] }

func (l *lateHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*l.h.Load()).ServeHTTP(w, r)
}

func flush(t *testing.T, h *harness) EventStats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := h.s.FlushEvents(ctx)
	if err != nil {
		t.Fatalf("flush: %v (%+v)", err, st)
	}
	return st
}

// TestEventsSettleThroughTheReceiver: the real receiver, trusting the
// simulator's root alone, keeps every event once and refuses every
// forgery; what it keeps tells each refund as PayPal shows it.
func TestEventsSettleThroughTheReceiver(t *testing.T) {
	late := &lateHandler{}
	rcvSrv := httptest.NewServer(late)
	defer rcvSrv.Close()
	h := startEvents(t, sim.Faults{PayPalPendingShare: 0.6, PayPalPendingFor: 80 * time.Millisecond, PayPalFailedShare: 0.5},
		EventsConfig{URL: rcvSrv.URL, DuplicateShare: 0.5, ReorderShare: 0.3, ForgedShare: 0.5, Backoff: 5 * time.Millisecond},
		usd("CAP1", 100000))

	root, host, certURL, ok := h.s.EventsCerts()
	if !ok || host != "127.0.0.1" || certURL == "" {
		t.Fatalf("EventsCerts: %v %q %q", ok, host, certURL)
	}
	v, err := ppevents.PrivateVerifier(simWebhookID, root, host)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "paypal.jsonl")
	file, err := ppevents.OpenEvents(path, v, true)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	rcv, err := ppevents.NewReceiver(ppevents.ReceiverConfig{Verifier: v, Events: file})
	if err != nil {
		t.Fatal(err)
	}
	var hh http.Handler = rcv
	late.h.Store(&hh)

	const n = 16
	var ids []string
	for i := range n {
		a := h.refund("CAP1", fmt.Sprint("req-", i), `{"amount":{"value":"1.00","currency_code":"USD"},"custom_id":"refundkit,b1,i`+fmt.Sprint(i)+`,1"}`)
		if a.status != http.StatusCreated {
			t.Fatalf("refund %d: %d %s", i, a.status, a.body)
		}
		ids = append(ids, a.str("id"))
	}
	st := flush(t, h)
	h.clock.advance(time.Second) // the simulator's clock past every settling
	if st.ForgedAccepted != 0 || st.Forged == 0 || st.Duplicates == 0 || st.Settled == 0 || st.Pending != 0 {
		t.Fatalf("event stats %+v", st)
	}
	rs := rcv.Stats()
	if rs.Added != st.Sent || rs.Rejected[ppevents.RefusedSignature] != st.Forged || rs.Accepted != st.Delivered {
		t.Fatalf("receiver %+v, simulator %+v", rs, st)
	}
	if st.CertFetches != 1 {
		t.Errorf("the receiver fetched the certificate %d times, want once", st.CertFetches)
	}

	// A reader of the file verifies every line again and tells each
	// refund's status as GET shows it now, with no request to PayPal.
	rv, _ := ppevents.PrivateVerifier(simWebhookID, root, host)
	rd, err := ppevents.OpenEvents(path, rv, false)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	tell := &ppevents.Telling{Events: rd}
	want := map[string]string{StatusCompleted: domain.RefundSucceeded, StatusFailed: domain.RefundFailed, StatusPending: domain.RefundPending}
	for i, id := range ids {
		got, ok, err := tell.Told(context.Background(), id)
		a := h.get("/v2/payments/refunds/" + id)
		if err != nil || !ok || got.Status != want[a.str("status")] || got.Amount != 100 || got.Metadata[domain.MetaItem] != fmt.Sprint("i", i) {
			t.Errorf("Told %s: %+v %v %v; GET says %s", id, got, ok, err, a.str("status"))
		}
	}
}

// TestEventsResourceAsShown: each event's resource is the refund byte for
// byte as GET shows it when the event is made; a receiver that fails is
// posted to again until it accepts.
func TestEventsResourceAsShown(t *testing.T) {
	var mu sync.Mutex
	var got []map[string]json.RawMessage
	var refusals atomic.Int64
	rcvSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if refusals.Add(1) <= 3 { // down at first
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		b, _ := io.ReadAll(r.Body)
		var e map[string]json.RawMessage
		json.Unmarshal(b, &e)
		mu.Lock()
		got = append(got, e)
		mu.Unlock()
	}))
	defer rcvSrv.Close()
	h := startEvents(t, sim.Faults{PayPalPendingShare: 1, PayPalPendingFor: 50 * time.Millisecond},
		EventsConfig{URL: rcvSrv.URL, Backoff: 2 * time.Millisecond}, usd("CAP1", 1000))
	a := h.refund("CAP1", "req-1", `{"amount":{"value":"2.50","currency_code":"USD"}}`)
	if a.status != http.StatusCreated || a.str("status") != StatusPending {
		t.Fatalf("refund: %d %s", a.status, a.body)
	}
	pendingGET := h.get("/v2/payments/refunds/" + a.str("id")).body
	st := flush(t, h)
	h.clock.advance(time.Second)
	doneGET := h.get("/v2/payments/refunds/" + a.str("id")).body
	if st.Sent != 2 || st.Delivered != 2 || st.Retries < 3 {
		t.Fatalf("stats %+v", st)
	}
	mu.Lock()
	defer mu.Unlock()
	byType := map[string]string{}
	for _, e := range got {
		var typ string
		json.Unmarshal(e["event_type"], &typ)
		byType[typ] = string(e["resource"])
	}
	if byType[EventRefundPending] != pendingGET || byType[EventCaptureRefunded] != doneGET {
		t.Fatalf("resources\n%v\nwant pending %s\n done %s", byType, pendingGET, doneGET)
	}
}

func TestEventsConfigRefused(t *testing.T) {
	for _, c := range []EventsConfig{
		{URL: "http://example.com/x", WebhookID: "WH-1"},
		{URL: "http://127.0.0.1:1/x"},
		{URL: "http://127.0.0.1:1/x", WebhookID: "WH-1", DuplicateShare: 2},
	} {
		if _, err := New(sim.NewCore(1, sim.Faults{}), Config{Events: c}, time.Now); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}
