package stripesim

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76"
)

// fakeClock is a time that moves only when a test says so: buckets refill
// exactly as much as the test advanced it, whatever the machine's speed.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// newClocked makes a simulator whose clock is clk, for handler-level tests.
func newClocked(cfg Config, clk *fakeClock) *Server {
	s := New(cfg)
	s.now = clk.now // before any request: nothing reads it yet
	return s
}

// startClocked serves a simulator whose clock is clk on loopback, for the
// real stripe-go client. The clock is set before the server's goroutines
// start, so the race detector sees the order.
func startClocked(t *testing.T, cfg Config, clk *fakeClock) *Server {
	t.Helper()
	s := newClocked(cfg, clk)
	t.Cleanup(s.Close)
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	s.url = ts.URL
	return s
}

// limited is a simulator config with rate limits and charges for the
// endpoints that take an id.
func limited(l RateLimits) Config {
	return Config{Charges: GenerateCharges(3, 1), Faults: Faults{RateLimits: l}}
}

// endpoint requests, one per limited route, each answered 200 (or 404 for
// the cancel of a refund that does not exist: the endpoint still ran).
var endpointRequests = map[string]struct{ method, path, form string }{
	"POST /v1/refunds":             {"POST", "/v1/refunds", "charge=ch_sim0000001&amount=1"},
	"GET /v1/refunds":              {"GET", "/v1/refunds?charge=ch_sim0000001", ""},
	"GET /v1/refunds/{id}":         {"GET", "/v1/refunds/re_sim0000000999", ""},
	"POST /v1/refunds/{id}/cancel": {"POST", "/v1/refunds/re_sim0000000999/cancel", ""},
	"GET /v1/charges/{id}":         {"GET", "/v1/charges/ch_sim0000002", ""},
	"other":                        {"DELETE", "/v1/refunds", ""},
}

// call sends one request of the named endpoint straight to the handler.
func call(t *testing.T, s *Server, endpoint string) *httptest.ResponseRecorder {
	t.Helper()
	e, ok := endpointRequests[endpoint]
	if !ok {
		t.Fatalf("no request for endpoint %q", endpoint)
	}
	req := httptest.NewRequest(e.method, e.path, strings.NewReader(e.form))
	if e.form != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	return rec
}

// admitted sends n requests of an endpoint and fails unless none of them
// was rate limited.
func admitted(t *testing.T, s *Server, endpoint string, n int) {
	t.Helper()
	for i := range n {
		if rec := call(t, s, endpoint); rec.Code == http.StatusTooManyRequests {
			t.Fatalf("%s: request %d of %d refused (%s): %s", endpoint, i+1, n, rec.Header().Get("Stripe-Rate-Limited-Reason"), rec.Body)
		}
	}
}

// limitedWith sends one request and fails unless it is a rate-limit 429 with
// the reason given.
func limitedWith(t *testing.T, s *Server, endpoint, reason string) {
	t.Helper()
	rec := call(t, s, endpoint)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Stripe-Rate-Limited-Reason") != reason {
		t.Fatalf("%s: %d reason %q, want 429 %s: %s", endpoint, rec.Code, rec.Header().Get("Stripe-Rate-Limited-Reason"), reason, rec.Body)
	}
}

func TestRateLimitsOffByDefault(t *testing.T) {
	clk := newFakeClock() // frozen: nothing refills
	s := newClocked(Config{Charges: GenerateCharges(3, 1)}, clk)
	admitted(t, s, "GET /v1/charges/{id}", 200)
	if s.limiter.Load() != nil {
		t.Error("a limiter without rate limits")
	}
	s = newClocked(limited(RateLimits{Mode: RateLimitsOff}), clk)
	admitted(t, s, "GET /v1/charges/{id}", 200)
}

// TestRateLimitBurst: a full bucket admits exactly its burst at once, the
// next request is refused, and time refills it at its rate.
func TestRateLimitBurst(t *testing.T) {
	clk := newFakeClock()
	s := newClocked(limited(RateLimits{Mode: RateLimitsLive}), clk)
	admitted(t, s, "GET /v1/charges/{id}", 25)
	limitedWith(t, s, "GET /v1/charges/{id}", ReasonEndpointRate)
	limitedWith(t, s, "GET /v1/charges/{id}", ReasonEndpointRate)

	clk.advance(39 * time.Millisecond) // 0.975 of a token at 25/s
	limitedWith(t, s, "GET /v1/charges/{id}", ReasonEndpointRate)
	clk.advance(time.Millisecond)
	admitted(t, s, "GET /v1/charges/{id}", 1)
	limitedWith(t, s, "GET /v1/charges/{id}", ReasonEndpointRate)

	clk.advance(time.Hour) // a long pause fills the bucket, no more
	admitted(t, s, "GET /v1/charges/{id}", 25)
	limitedWith(t, s, "GET /v1/charges/{id}", ReasonEndpointRate)
}

// TestRateLimitEndpointsSeparate: each endpoint, a method and a route, has
// a bucket of its own; ids in the path share their route's.
func TestRateLimitEndpointsSeparate(t *testing.T) {
	clk := newFakeClock()
	s := newClocked(limited(RateLimits{Mode: RateLimitsLive}), clk)
	for _, ep := range []string{"POST /v1/refunds", "GET /v1/refunds", "GET /v1/refunds/{id}"} {
		admitted(t, s, ep, 25)
		limitedWith(t, s, ep, ReasonEndpointRate)
	}
	// With 100 of the live mode's 100 taken, the global bucket is empty
	// too, and says so first.
	admitted(t, s, "POST /v1/refunds/{id}/cancel", 25)
	limitedWith(t, s, "POST /v1/refunds/{id}/cancel", ReasonGlobalRate)
	limitedWith(t, s, "GET /v1/charges/{id}", ReasonGlobalRate)
	limitedWith(t, s, "other", ReasonGlobalRate)

	// Another id, the same route and bucket.
	s = newClocked(limited(RateLimits{Mode: RateLimitsLive}), clk)
	admitted(t, s, "GET /v1/charges/{id}", 25)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/v1/charges/ch_sim0000003", nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != 429 {
		t.Errorf("another charge id: %d, want 429: the route is one endpoint", rec.Code)
	}
}

// TestRateLimitModes: test mode gives the account 25 requests a second,
// live mode 100, each endpoint 25 in both.
func TestRateLimitModes(t *testing.T) {
	for _, tt := range []struct {
		mode   string
		global int
	}{{RateLimitsTest, 25}, {RateLimitsLive, 100}} {
		t.Run(tt.mode, func(t *testing.T) {
			e := RateLimits{Mode: tt.mode}.Effective()
			if want := (RateLimits{Mode: tt.mode, GlobalRate: float64(tt.global), GlobalBurst: tt.global, EndpointRate: 25, EndpointBurst: 25}); e != want {
				t.Errorf("effective = %+v, want %+v", e, want)
			}
			clk := newFakeClock()
			s := newClocked(limited(RateLimits{Mode: tt.mode}), clk)
			// Spread over the endpoints so no endpoint bucket runs dry
			// before the global one.
			eps := []string{"POST /v1/refunds", "GET /v1/refunds", "GET /v1/refunds/{id}", "POST /v1/refunds/{id}/cancel", "GET /v1/charges/{id}"}
			for i := range tt.global {
				admitted(t, s, eps[i%len(eps)], 1)
			}
			for _, ep := range eps {
				limitedWith(t, s, ep, ReasonGlobalRate)
			}
			// One second later: the global rate's worth again.
			clk.advance(time.Second)
			for i := range tt.global {
				admitted(t, s, eps[i%len(eps)], 1)
			}
			limitedWith(t, s, "other", ReasonGlobalRate)
		})
	}
}

// TestRateLimitRefusalTakesNothing: a request one bucket refuses takes no
// token from the other.
func TestRateLimitRefusalTakesNothing(t *testing.T) {
	clk := newFakeClock()
	// The global bucket refills fast, endpoints next to never.
	s := newClocked(limited(RateLimits{Mode: RateLimitsLive, GlobalRate: 1000, GlobalBurst: 12, EndpointRate: 0.001, EndpointBurst: 5}), clk)

	admitted(t, s, "GET /v1/charges/{id}", 5)
	for range 10 { // endpoint-refused: the global bucket keeps its 7
		limitedWith(t, s, "GET /v1/charges/{id}", ReasonEndpointRate)
	}
	admitted(t, s, "GET /v1/refunds", 5)
	admitted(t, s, "GET /v1/refunds/{id}", 2) // the global bucket's last 2
	for range 10 {                            // global-refused: the endpoint keeps its 3
		limitedWith(t, s, "GET /v1/refunds/{id}", ReasonGlobalRate)
	}
	clk.advance(10 * time.Millisecond) // 10 global tokens, 0.00001 for endpoints
	admitted(t, s, "GET /v1/refunds/{id}", 3)
	limitedWith(t, s, "GET /v1/refunds/{id}", ReasonEndpointRate)

	st := s.Stats()
	if st.RateLimited != 21 || st.RateLimitedReasons[ReasonGlobalRate] != 10 || st.RateLimitedReasons[ReasonEndpointRate] != 11 ||
		st.RateLimitedRoutes["GET /v1/charges/{id}"] != 10 || st.RateLimitedRoutes["GET /v1/refunds/{id}"] != 11 || st.RateLimitedRoutes["GET /v1/refunds"] != 0 {
		t.Errorf("stats: %d rate limited, reasons %v, routes %v", st.RateLimited, st.RateLimitedReasons, st.RateLimitedRoutes)
	}
	if st.Requests["GET /v1/refunds/{id}"] != 16 {
		t.Errorf("refused requests are requests too: %v", st.Requests)
	}
}

// TestRateLimitAnswer: Stripe's 429, with the reason header and a
// Request-Id of its own, and nothing an answer that ran would carry.
func TestRateLimitAnswer(t *testing.T) {
	clk := newFakeClock()
	s := newClocked(limited(RateLimits{Mode: RateLimitsTest, EndpointBurst: 1}), clk)
	admitted(t, s, "POST /v1/refunds", 1)
	var ids []string
	for range 2 {
		e := endpointRequests["POST /v1/refunds"]
		req := httptest.NewRequest(e.method, e.path, strings.NewReader(e.form))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer "+testKey)
		req.Header.Set("Idempotency-Key", "k")
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		h := rec.Header()
		if rec.Code != 429 || h.Get("Stripe-Rate-Limited-Reason") != ReasonEndpointRate || h.Get("Content-Type") != "application/json" ||
			!strings.HasPrefix(h.Get("Request-Id"), "req_") || h.Get("Idempotent-Replayed") != "" {
			t.Fatalf("%d %v", rec.Code, h)
		}
		ids = append(ids, h.Get("Request-Id"))
		var body struct {
			Error map[string]string `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatal(err)
		}
		if len(body.Error) != 3 || body.Error["type"] != "invalid_request_error" || body.Error["code"] != "rate_limit" ||
			!strings.Contains(body.Error["message"], "rate limit") {
			t.Errorf("body %s", rec.Body)
		}
	}
	if ids[0] == ids[1] {
		t.Errorf("two answers with Request-Id %s", ids[0])
	}
	if n := s.core.Keys.Size(); n != 0 {
		t.Errorf("%d idempotency keys held after 429s, want 0", n)
	}
}

// TestRateLimitNotSavedUnderKey: through stripe-go, a refund refused 429
// is created once its retry with the same key comes after the bucket
// refilled, exactly once, and its answer is not a replay.
func TestRateLimitNotSavedUnderKey(t *testing.T) {
	clk := newFakeClock()
	s := startClocked(t, Config{Charges: oneCharge(1000).Charges, Faults: Faults{RateLimits: RateLimits{Mode: RateLimitsTest, EndpointBurst: 1}}}, clk)
	c := newClients(s, clientOpts{keepAlive: true})

	if _, err := c.refunds.New(refundParams("ch_a", 100, "k1")); err != nil {
		t.Fatal(err)
	}
	_, err := c.refunds.New(refundParams("ch_a", 100, "k2"))
	se := stripeErr(t, err)
	if se.HTTPStatusCode != 429 || se.Code != stripe.ErrorCodeRateLimit || se.Type != stripe.ErrorTypeInvalidRequest || se.RequestID == "" {
		t.Fatalf("got %d %s %s (request %q), want 429 invalid_request_error rate_limit", se.HTTPStatusCode, se.Type, se.Code, se.RequestID)
	}
	if se.LastResponse == nil || se.LastResponse.Header.Get("Stripe-Rate-Limited-Reason") != ReasonEndpointRate {
		t.Errorf("last response %+v: want the reason header", se.LastResponse)
	}
	// Reads have their own bucket: the charge is there to look at.
	if _, err := c.charges.Get("ch_a", nil); err != nil {
		t.Errorf("a read after a refused create: %v", err)
	}

	clk.advance(time.Second / StripeEndpointRate)
	re, err := c.refunds.New(refundParams("ch_a", 100, "k2"))
	if err != nil {
		t.Fatal(err)
	}
	if replayed(re.LastResponse) {
		t.Error("the retry replayed a saved answer")
	}
	var forK2 int
	for _, r := range s.Refunds() {
		if r.IdempotencyKey == "k2" {
			forK2++
		}
	}
	if all := len(s.Refunds()); forK2 != 1 || all != 2 {
		t.Errorf("%d refunds for k2 of %d, want 1 of 2", forK2, all)
	}
	// And the key now replays its success, as any key does.
	clk.advance(time.Second / StripeEndpointRate)
	again, err := c.refunds.New(refundParams("ch_a", 100, "k2"))
	if err != nil || again.ID != re.ID || !replayed(again.LastResponse) {
		t.Errorf("the key's success was not saved: %v, %v", again, err)
	}
}

// TestRateLimitExemptions: control endpoints and requests without a valid
// key are never limited and take no token.
func TestRateLimitExemptions(t *testing.T) {
	clk := newFakeClock()
	s := newClocked(limited(RateLimits{Mode: RateLimitsTest, GlobalBurst: 3, EndpointBurst: 2}), clk)
	for range 10 {
		for _, path := range []string{"/_sim/stats", "/_sim/faults"} {
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
			if rec.Code != 200 {
				t.Fatalf("%s: %d", path, rec.Code)
			}
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/charges/ch_sim0000001", nil))
		if rec.Code != 401 {
			t.Fatalf("no key: %d", rec.Code)
		}
	}
	admitted(t, s, "GET /v1/charges/{id}", 2)
	limitedWith(t, s, "GET /v1/charges/{id}", ReasonEndpointRate)
	admitted(t, s, "GET /v1/refunds", 1)
	limitedWith(t, s, "GET /v1/refunds", ReasonGlobalRate)
}

// TestRateLimitsAcrossSetFaults: other knobs change without refilling the
// buckets; new limits start full buckets; no limits remove them.
func TestRateLimitsAcrossSetFaults(t *testing.T) {
	clk := newFakeClock()
	l := RateLimits{Mode: RateLimitsTest, EndpointBurst: 3}
	s := newClocked(limited(l), clk)
	admitted(t, s, "GET /v1/charges/{id}", 3)
	limitedWith(t, s, "GET /v1/charges/{id}", ReasonEndpointRate)

	if err := s.SetFaults(Faults{RequiresActionShare: 1, RateLimits: l}); err != nil {
		t.Fatal(err)
	}
	limitedWith(t, s, "GET /v1/charges/{id}", ReasonEndpointRate)

	if err := s.SetFaults(Faults{RateLimits: RateLimits{Mode: RateLimitsTest, EndpointBurst: 4}}); err != nil {
		t.Fatal(err)
	}
	admitted(t, s, "GET /v1/charges/{id}", 4)
	limitedWith(t, s, "GET /v1/charges/{id}", ReasonEndpointRate)

	if err := s.SetFaults(Faults{}); err != nil {
		t.Fatal(err)
	}
	admitted(t, s, "GET /v1/charges/{id}", 50)
	if err := s.SetFaults(Faults{RateLimits: RateLimits{Mode: RateLimitsTest, EndpointBurst: 4}}); err != nil {
		t.Fatal(err)
	}
	admitted(t, s, "GET /v1/charges/{id}", 4)
	limitedWith(t, s, "GET /v1/charges/{id}", ReasonEndpointRate)

	if err := s.SetFaults(Faults{RateLimits: RateLimits{GlobalRate: 5}}); err == nil {
		t.Error("numbers without a mode accepted")
	}
	limitedWith(t, s, "GET /v1/charges/{id}", ReasonEndpointRate) // a refused SetFaults changes nothing
}

// TestRateLimitConcurrent: concurrent requests never take more than a
// bucket holds.
func TestRateLimitConcurrent(t *testing.T) {
	clk := newFakeClock()
	s := newClocked(limited(RateLimits{Mode: RateLimitsLive}), clk)
	var ok, limitedN atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, ep := range []string{"GET /v1/charges/{id}", "GET /v1/refunds"} {
				for range 20 {
					if call(t, s, ep).Code == 429 {
						limitedN.Add(1)
					} else {
						ok.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 50 || limitedN.Load() != 270 {
		t.Errorf("%d admitted, %d limited; want 50 (25 per endpoint) and 270", ok.Load(), limitedN.Load())
	}
}

func TestRateLimitsValidateAndJSON(t *testing.T) {
	for _, tt := range []struct {
		l   RateLimits
		err string
	}{
		{RateLimits{}, ""},
		{RateLimits{Mode: "off"}, ""},
		{RateLimits{Mode: "test"}, ""},
		{RateLimits{Mode: "live", GlobalRate: 0.5, GlobalBurst: 1, EndpointRate: 2.5, EndpointBurst: 7}, ""},
		{RateLimits{Mode: "sandbox"}, `rate_limits.mode "sandbox": want "test", "live" or "off"`},
		{RateLimits{GlobalRate: 10}, `rate_limits: numbers without a mode: want mode "test" or "live"`},
		{RateLimits{Mode: "off", EndpointBurst: 1}, `rate_limits: numbers without a mode`},
		{RateLimits{Mode: "test", GlobalRate: -1}, "rate_limits.global_rate -1: want requests per second, or 0 for Stripe's"},
		{RateLimits{Mode: "test", EndpointRate: math.NaN()}, "rate_limits.endpoint_rate NaN"},
		{RateLimits{Mode: "test", EndpointRate: math.Inf(1)}, "rate_limits.endpoint_rate +Inf"},
		{RateLimits{Mode: "live", GlobalBurst: -2}, "rate_limits.global_burst -2: want a number of requests, or 0 for one second's worth"},
		{RateLimits{Mode: "live", EndpointBurst: -1}, "rate_limits.endpoint_burst -1"},
	} {
		f := Faults{RateLimits: tt.l}
		err := f.Validate()
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.err)) {
			t.Errorf("Validate(%+v) = %v, want %q", tt.l, err, tt.err)
		}
	}

	for _, tt := range []struct {
		l    RateLimits
		want string
	}{
		{RateLimits{}, "off"},
		{RateLimits{Mode: "test"}, "test mode, 25 requests/s for the account (burst 25), 25 per endpoint (burst 25)"},
		{RateLimits{Mode: "live"}, "live mode, 100 requests/s for the account (burst 100), 25 per endpoint (burst 25)"},
		{RateLimits{Mode: "live", GlobalRate: 0.5, EndpointRate: 2.5, EndpointBurst: 7}, "live mode, 0.5 requests/s for the account (burst 1), 2.5 per endpoint (burst 7)"},
	} {
		if got := tt.l.String(); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.l, got, tt.want)
		}
	}

	s := start(t, oneCharge(1000))
	in := `{"latency":"1ms","rate_limits":{"mode":"live","endpoint_rate":10,"endpoint_burst":2}}`
	if code, body := control(t, s, "POST", "/_sim/faults", in); code != 200 {
		t.Fatalf("set faults: %d %s", code, body)
	}
	want := Faults{Latency: time.Millisecond, RateLimits: RateLimits{Mode: "live", EndpointRate: 10, EndpointBurst: 2}}
	if s.Faults() != want {
		t.Errorf("faults = %+v, want %+v", s.Faults(), want)
	}
	_, body := control(t, s, "GET", "/_sim/faults", "")
	var back Faults
	if err := json.Unmarshal([]byte(body), &back); err != nil || back != want ||
		!strings.Contains(body, `"rate_limits":{"mode":"live","global_rate":0,"global_burst":0,"endpoint_rate":10,"endpoint_burst":2}`) {
		t.Errorf("get faults: %s (%v)", body, err)
	}
	for _, bad := range []string{`{"rate_limits":{"mode":"fast"}}`, `{"rate_limits":{"mode":"test","rate":5}}`, `{"rate_limits":"test"}`,
		`{"rate_limits":{"global_rate":5}}`, `{"rate_limits":{"mode":"test","global_burst":1.5}}`} {
		if code, _ := control(t, s, "POST", "/_sim/faults", bad); code != 400 {
			t.Errorf("faults %s: %d, want 400", bad, code)
		}
	}
	if s.Faults() != want {
		t.Error("a refused faults request changed the faults")
	}
}
