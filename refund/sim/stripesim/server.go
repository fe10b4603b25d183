// Package stripesim is a stateful simulator of Stripe's refund API: a real
// HTTP server on loopback that the real stripe-go client talks to, with
// Stripe's validation, idempotency-key semantics (replay, 400 on other
// parameters, 409 while in flight, expiry) and list pagination, plus knobs
// for the faults refundkit must survive: latency, 429s, 500s before and
// after the refund is committed, connections dropped after the commit,
// refunds that need action, a gateway in front of the API that answers
// 502 or 504 on its own (at once while the request goes on, or after the
// commit), and Stripe's documented rate limits as token buckets (global and
// per endpoint, test or live mode), so a client's pacing can be measured
// against them.
//
// The same server serves PayPal's refund API on the same port
// (refund/sim/paypalsim: OAuth2 tokens, refunds under PayPal-Request-Id,
// PENDING refunds that settle) and Adyen's (refund/sim/adyensim: refunds
// under Idempotency-Key, their outcome in signed notifications posted to a
// receiver), with the same fault knobs: the knobs, their draws, the
// idempotency keys and the shared counters live in refund/sim.
//
// Tests, the demo, chaos runs and benchmarks all use it; cmd/stripe-sim
// serves it as a process with control endpoints under /_sim/.
package stripesim

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/refundkit/refundkit/refund/sim"
	"github.com/refundkit/refundkit/refund/sim/adyensim"
	"github.com/refundkit/refundkit/refund/sim/paypalsim"
)

// Config is what a simulator starts with.
type Config struct {
	// Charges are seeded before the first request.
	Charges []Charge
	// Faults are the initial fault knobs; SetFaults changes them at run time.
	Faults Faults
	// Seed makes fault draws deterministic for a given request order.
	Seed int64
	// KeyTTL forgets completed idempotency keys this long after their first
	// request (Stripe: 24 hours); 0 keeps them until ForgetKeys. PayPal's
	// request ids are kept 45 days (paypalsim.RequestIDTTL).
	KeyTTL time.Duration
	// PayPal configures PayPal's routes, served on the same port.
	PayPal paypalsim.Config
	// Adyen configures Adyen's routes, served on the same port.
	Adyen adyensim.Config
}

// Server is one simulated Stripe account. It is safe for concurrent use.
type Server struct {
	core    *sim.Core         // knobs, draws, keys, counters shared with PayPal's routes
	paypal  *paypalsim.Server // PayPal's routes (paypalsim)
	adyen   *adyensim.Server  // Adyen's routes (adyensim)
	keyTTL  time.Duration
	now     func() time.Time // replaced by tests that move time
	mux     *http.ServeMux   // the route table (routes.go)
	handler http.Handler

	hook sim.Hook

	// limiter holds the rate-limit buckets of faults.RateLimits, nil when
	// off; limitsMu orders SetFaults calls that replace it.
	limiter  atomic.Pointer[rateLimiter]
	limitsMu sync.Mutex

	chargesMu sync.RWMutex
	charges   map[string]*charge
	byIntent  map[string]*charge

	// refunds holds every refund in creation order, refund n with id
	// re_sim%010d(n).
	refunds sim.Numbered[*refund]

	stats counters

	httpSrv *http.Server
	url     string
}

// New makes a simulator to serve through Handler. It panics if a seeded
// charge is invalid or given twice (use Start or Listen to get an error).
func New(cfg Config) *Server {
	s, err := newServer(cfg)
	if err != nil {
		panic("stripesim: " + err.Error())
	}
	return s
}

func newServer(cfg Config) (*Server, error) {
	if err := cfg.Faults.Validate(); err != nil {
		return nil, err
	}
	if cfg.KeyTTL < 0 {
		return nil, fmt.Errorf("key ttl %v: want zero (keep) or more", cfg.KeyTTL)
	}
	s := &Server{
		core:     sim.NewCore(cfg.Seed, cfg.Faults),
		keyTTL:   cfg.KeyTTL,
		now:      time.Now,
		charges:  make(map[string]*charge),
		byIntent: make(map[string]*charge),
		refunds:  sim.Numbered[*refund]{Prefix: refundPrefix, Width: 10},
	}
	s.limiter.Store(newRateLimiter(cfg.Faults.RateLimits, s.clock))
	pp, err := paypalsim.New(s.core, cfg.PayPal, s.clock)
	if err != nil {
		return nil, err
	}
	s.paypal = pp
	ad, err := adyensim.New(s.core, cfg.Adyen, s.clock)
	if err != nil {
		return nil, err
	}
	s.adyen = ad
	s.mux = s.routes()
	s.handler = http.HandlerFunc(s.serveHTTP)
	if err := s.AddCharges(cfg.Charges...); err != nil {
		ad.Close()
		return nil, err
	}
	return s, nil
}

// Start serves a new simulator on a free port of 127.0.0.1.
func Start(cfg Config) (*Server, error) { return Listen(cfg, "127.0.0.1:0") }

// Listen serves a new simulator on addr, which must be a loopback address:
// the simulator accepts any test key and must never face a network.
func Listen(cfg Config, addr string) (*Server, error) {
	if err := CheckLoopback(addr); err != nil {
		return nil, err
	}
	s, err := newServer(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		s.adyen.Close()
		return nil, err
	}
	tcp, ok := ln.Addr().(*net.TCPAddr)
	if !ok || !tcp.IP.IsLoopback() { // "localhost" could resolve elsewhere
		ln.Close()
		s.adyen.Close()
		return nil, fmt.Errorf("address %s: resolved to %v, not a loopback address", addr, ln.Addr())
	}
	s.url = "http://" + tcp.String()
	s.httpSrv = &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	go s.httpSrv.Serve(ln) // returns ErrServerClosed on Close
	return s, nil
}

// CheckLoopback reports an error unless addr (host:port) names a loopback
// address: 127.0.0.0/8, ::1 or localhost.
func CheckLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q: %v", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("address %q: the simulator listens only on loopback (127.0.0.1, [::1] or localhost)", addr)
}

// Handler serves the API and the /_sim/ control endpoints.
func (s *Server) Handler() http.Handler { return s.handler }

// URL is the base URL of a started simulator (http://127.0.0.1:PORT), to
// give stripe-go as its backend URL; empty for one made with New.
func (s *Server) URL() string { return s.url }

// Close stops serving at once, dropping open connections, and waits for
// requests still running behind a gateway timeout, cutting their injected
// latency short (a create hook that blocks holds Close until it returns);
// then it stops sending Adyen's notifications.
func (s *Server) Close() {
	s.core.CutLatency()
	if s.httpSrv != nil {
		s.httpSrv.Close()
	}
	s.core.StopBackground()
	s.Settle(context.Background())
	s.adyen.Close()
}

// Shutdown stops accepting connections and waits for requests in flight,
// those behind a gateway timeout included, cutting injected latency short,
// until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.core.CutLatency()
	var err error
	if s.httpSrv != nil {
		err = s.httpSrv.Shutdown(ctx)
	}
	s.core.StopBackground()
	if err2 := s.Settle(ctx); err == nil {
		err = err2
	}
	s.adyen.Close() // notifications not yet accepted stay pending
	return err
}

// Settle waits until every request that a gateway timeout answered early
// has finished at the simulator (its refund committed and its answer saved
// under its key), or ctx ends. Tests call it before they check what a
// retry replays, instead of sleeping.
func (s *Server) Settle(ctx context.Context) error { return s.core.Settle(ctx) }

// PayPal is PayPal's side of the simulator: its captures, refunds and
// create hook.
func (s *Server) PayPal() *paypalsim.Server { return s.paypal }

// Adyen is Adyen's side of the simulator: its payments, refunds,
// notifications and create hook.
func (s *Server) Adyen() *adyensim.Server { return s.adyen }

// SetFaults replaces the fault knobs for requests that arrive from now on.
// Rate-limit buckets start full when the rate limits change, and keep their
// tokens when they stay as they were.
func (s *Server) SetFaults(f Faults) error {
	if err := f.Validate(); err != nil {
		return err
	}
	s.limitsMu.Lock()
	defer s.limitsMu.Unlock()
	if cur := s.limiter.Load(); cur == nil && f.RateLimits.Enabled() || cur != nil && cur.limits != f.RateLimits {
		s.limiter.Store(newRateLimiter(f.RateLimits, s.clock))
	}
	s.core.StoreFaults(f)
	return nil
}

// clock reads s.now when called, so a test that replaces s.now moves the
// rate-limit buckets' time too.
func (s *Server) clock() time.Time { return s.now() }

// Faults returns the fault knobs in force.
func (s *Server) Faults() Faults { return *s.core.Faults() }

// ForgetKeys forgets every completed idempotency key, as Stripe does after
// 24 hours, every PayPal-Request-Id, as PayPal does after 45 days, and
// every Adyen Idempotency-Key, as Adyen does after 31 days, and returns
// how many it forgot. Keys whose first request is
// still in flight are kept.
func (s *Server) ForgetKeys() int { return s.core.Keys.Forget() }

// SetCreateHook makes every POST /v1/refunds call fn with its idempotency
// key once the key is reserved and before the refund is created; the request
// stays in flight while fn blocks. Tests use it to hold a request at a known
// point. nil removes the hook. Behind a gateway timeout fn runs after the
// gateway answered, and Close waits for it to return.
func (s *Server) SetCreateHook(fn func(idempotencyKey string)) { s.hook.Set(fn) }

// AddCharges adds charges and their seeded refunds. Nothing is added if one
