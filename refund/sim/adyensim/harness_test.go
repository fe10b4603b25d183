package adyensim

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
	"github.com/refundkit/refundkit/refund/sim"
)

// testHMACKey is the notifications' key in the tests, as Adyen shows it.
const testHMACKey = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"

// fakeClock is a clock that tests move by hand.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// harness is Adyen's routes on a loopback server, with the core, a clock
// the test controls and, when asked for, a notification receiver.
type harness struct {
	t     *testing.T
	s     *Server
	core  *sim.Core
	clock *fakeClock
	url   string
	recv  *receiver
}

// start serves Adyen's routes with cfg (payments PAY1 100.00 EUR and
// PAY2 50.00 EUR added) and the knobs f; withReceiver points the
// notifications at a receiver of the test's.
func start(t *testing.T, f sim.Faults, cfg Config, withReceiver bool) *harness {
	t.Helper()
	clk := &fakeClock{}
	clk.ns.Store(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	core := sim.NewCore(1, f)
	h := &harness{t: t, core: core, clock: clk}
	if withReceiver {
		h.recv = newReceiver(t)
		cfg.NotifyURL = h.recv.srv.URL
		cfg.HMACKey, _ = wire.ParseHMACKey(testHMACKey)
		if cfg.NotifyBackoff == 0 {
			cfg.NotifyBackoff = time.Millisecond
		}
	}
	cfg.Payments = append([]Payment{{PSPReference: "PAY1", Amount: 10000}, {PSPReference: "PAY2", Currency: "eur", Amount: 5000}}, cfg.Payments...)
	s, err := New(core, cfg, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	s.Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		core.CutLatency()
		srv.Close()
		core.StopBackground()
		core.Settle(context.Background())
		s.Close()
	})
	h.s, h.url = s, srv.URL
	return h
}

// answer is one API answer as a test reads it.
type answer struct {
	status    int
	body      string
	key       string // the Idempotency-Key echoed
	transient bool
}

// refund posts a refund of psp with the simulator's API key.
func (h *harness) refund(psp, body, key string) answer {
	return h.refundWithAPIKey(psp, body, key, DefaultAPIKey)
}

func (h *harness) refundWithAPIKey(psp, body, key, apiKey string) answer {
	h.t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.url+"/v71/payments/"+psp+"/refunds", strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if apiKey != "" {
		req.Header.Set("X-API-Key", apiKey)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return answer{status: res.StatusCode, body: string(b), key: res.Header.Get("Idempotency-Key"),
		transient: res.Header.Get("Transient-Error") == "true"}
}

// body is a refund request's JSON on the simulator's merchant account.
func body(value int64, currency, reference string) string {
	return string(sim.MustJSON(refundRequest{Amount: &wire.Amount{Currency: currency, Value: value}, MerchantAccount: DefaultMerchantAccount, Reference: reference}))
}

// created decodes a 201.
func (h *harness) created(a answer) wire.RefundAnswer {
	h.t.Helper()
	if a.status != http.StatusCreated {
		h.t.Fatalf("answer %d %s, want 201", a.status, a.body)
	}
	var r wire.RefundAnswer
	if err := json.Unmarshal([]byte(a.body), &r); err != nil {
		h.t.Fatal(err)
	}
	return r
}

// wantError checks an error answer's status and errorCode.
func wantError(t *testing.T, a answer, status int, code, errType string) {
	t.Helper()
	var e sim.Error
	if err := json.Unmarshal([]byte(a.body), &e); err != nil {
		t.Fatalf("answer %d %q: %v", a.status, a.body, err)
	}
	if a.status != status || e.Status != status || e.ErrorCode != code || e.ErrorType != errType || e.Message == "" {
		t.Fatalf("answer %d %s, want %d errorCode %s errorType %s", a.status, a.body, status, code, errType)
	}
}

// flush waits for every queued notification, bounded by a minute (a guard
// against a hang, not a wait).
func (h *harness) flush() NotifyStats {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := h.s.Flush(ctx)
	if err != nil {
		h.t.Fatalf("flush: %v (%+v)", err, st)
	}
	return st
}

// receiver is a notification endpoint: it verifies and records every
// item, and answers what answer says for the n-th request (from 0).
type receiver struct {
	t   *testing.T
	srv *httptest.Server
	key []byte

	mu     sync.Mutex
	n      int
	items  []wire.Item // accepted ones, in the order they came
	answer func(n int) (int, string)
	bad    []string // what did not verify or parse
}

func newReceiver(t *testing.T) *receiver {
	key, _ := wire.ParseHMACKey(testHMACKey)
	rc := &receiver{t: t, key: key, answer: func(int) (int, string) { return http.StatusOK, wire.Accepted }}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	var req wire.Request
	err := json.NewDecoder(r.Body).Decode(&req)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	n := rc.n
	rc.n++
	status, text := rc.answer(n)
	switch {
	case err != nil || len(req.NotificationItems) != 1 || req.Live != "false" || r.Header.Get("Content-Type") != "application/json":
		rc.bad = append(rc.bad, "not one item: "+r.Header.Get("Content-Type"))
	case !wire.Verify(&req.NotificationItems[0].NotificationRequestItem, rc.key):
		rc.bad = append(rc.bad, "signature: "+req.NotificationItems[0].NotificationRequestItem.PSPReference)
	case text == wire.Accepted && status == http.StatusOK:
		rc.items = append(rc.items, req.NotificationItems[0].NotificationRequestItem)
	}
	w.WriteHeader(status)
	io.WriteString(w, text)
}

// accepted returns the items accepted so far, and fails on any that did
// not verify.
func (rc *receiver) accepted() []wire.Item {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.bad) > 0 {
		rc.t.Fatalf("receiver got bad notifications: %v", rc.bad)
	}
	return append([]wire.Item(nil), rc.items...)
}

func (rc *receiver) requests() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.n
}

// events writes items as EVENT:psp:success, for comparisons.
func events(items []wire.Item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.EventCode + ":" + it.PSPReference + ":" + it.Success
	}
	return out
}
