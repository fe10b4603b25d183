// Package stripesim is a stateful simulator of Stripe's refund API, a real
// HTTP server on loopback for the real stripe-go client: Stripe's
// validation, idempotency keys and list pagination, with the fault knobs of
// refund/sim and Stripe's rate limits. The same port serves PayPal's API
// (paypalsim) and Adyen's (adyensim) over the same core, and the control
// endpoints under /_sim/ that cmd/stripe-sim, tests and scripts use.
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
	// Faults are the initial knobs (SetFaults changes them).
	Faults Faults
	// Seed makes fault draws deterministic for a given request order.
	Seed int64
	// KeyTTL forgets a completed key this long after its first request
	// (Stripe: 24 hours); 0 keeps them until ForgetKeys.
	KeyTTL time.Duration
	// PayPal and Adyen configure their APIs' routes.
	PayPal paypalsim.Config
	Adyen  adyensim.Config
	// Events configures Stripe's webhook events; none without a URL.
	Events EventsConfig
}

// Server is one simulated Stripe account. It is safe for concurrent use.
type Server struct {
	core    *sim.Core // shared with PayPal's and Adyen's routes
	paypal  *paypalsim.Server
	adyen   *adyensim.Server
	keyTTL  time.Duration
	now     func() time.Time // replaced by tests that move time
	mux     *http.ServeMux   // the route table (routes.go)
	handler http.Handler

	hook sim.Hook

	// limiter holds the buckets of RateLimits (nil when off); limitsMu
	// orders the SetFaults that replace it.
	limiter  atomic.Pointer[rateLimiter]
	limitsMu sync.Mutex

	charges, byIntent sim.Store[*charge] // AddCharges locks both

	refunds sim.Numbered[*refund]

	events  *events   // nil without Config.Events.URL
	settles settler   // pending refunds to settle
	untold  sim.Gauge // pending refunds no receiver was told the end of

	stats counters

	httpSrv *http.Server
	url     string
}

// New makes a simulator to serve through Handler; it panics where Start
// would fail.
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
		core:    sim.NewCore(cfg.Seed, cfg.Faults),
		keyTTL:  cfg.KeyTTL,
		now:     time.Now,
		refunds: sim.Numbered[*refund]{Prefix: refundPrefix, Width: 10},
	}
	s.limiter.Store(newRateLimiter(cfg.Faults.RateLimits, s.clock))
	pp, err := paypalsim.New(s.core, cfg.PayPal, s.clock)
	if err != nil {
		return nil, err
	}
	s.paypal = pp
	ad, err := adyensim.New(s.core, cfg.Adyen, s.clock)
	if err != nil {
		pp.Close()
		return nil, err
	}
	s.adyen = ad
	if cfg.Events.URL != "" {
		ev, err := newEvents(s.core, cfg.Events)
		if err != nil {
			ad.Close()
			pp.Close()
			return nil, err
		}
		s.events = ev
	}
	s.mux = s.routes()
	s.handler = http.HandlerFunc(s.serveHTTP)
	if err := s.AddCharges(cfg.Charges...); err != nil {
		s.closeSenders()
		return nil, err
	}
	return s, nil
}

// Start serves a new simulator on a free port of 127.0.0.1.
func Start(cfg Config) (*Server, error) { return Listen(cfg, "127.0.0.1:0") }

// Listen serves a new simulator on addr, which must be loopback: the
// simulator accepts any test key.
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
		s.closeSenders()
		return nil, err
	}
	tcp, ok := ln.Addr().(*net.TCPAddr)
	if !ok || !tcp.IP.IsLoopback() { // "localhost" could resolve elsewhere
		ln.Close()
		s.closeSenders()
		return nil, fmt.Errorf("address %s: resolved to %v, not a loopback address", addr, ln.Addr())
	}
	s.url = "http://" + tcp.String()
	s.httpSrv = &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	go s.httpSrv.Serve(ln) // returns ErrServerClosed on Close
	return s, nil
}

// CheckLoopback reports an error unless addr (host:port) is loopback.
func CheckLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q: %v", addr, err)
	}
	if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("address %q: the simulator listens only on loopback (127.0.0.1, [::1] or localhost)", addr)
}

// Handler serves the API and the /_sim/ control endpoints.
func (s *Server) Handler() http.Handler { return s.handler }

// URL is a started simulator's base URL; empty for one made with New.
func (s *Server) URL() string { return s.url }

// Close stops serving at once, waits for the requests behind a gateway
// timeout (latency cut short, a blocking create hook waited for), then
// stops settling pending refunds, Stripe's events and Adyen's notifications.
func (s *Server) Close() { s.stop(context.Background(), false) }

// Shutdown is Close that lets the requests in flight finish, until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error { return s.stop(ctx, true) }

func (s *Server) stop(ctx context.Context, graceful bool) error {
	s.core.CutLatency()
	var err error
	switch {
	case s.httpSrv == nil:
	case graceful:
		err = s.httpSrv.Shutdown(ctx)
	default:
		s.httpSrv.Close()
	}
	s.core.StopBackground()
	if err2 := s.Settle(ctx); err == nil {
		err = err2
	}
	s.closeSenders()
	return err
}

// closeSenders stops what runs on its own: the settler, Stripe's events and
// Adyen's notifications. What is not yet settled or accepted stays pending.
func (s *Server) closeSenders() {
	s.closeSettler()
	if s.events != nil {
		s.events.Close()
	}
	s.adyen.Close()
	s.paypal.Close()
}

// Settle waits until every request a gateway timeout answered early has
// finished (committed, its answer saved), or ctx ends.
func (s *Server) Settle(ctx context.Context) error { return s.core.Settle(ctx) }

// PayPal is PayPal's side of the simulator.
func (s *Server) PayPal() *paypalsim.Server { return s.paypal }

// Adyen is Adyen's side of the simulator.
func (s *Server) Adyen() *adyensim.Server { return s.adyen }

// SetFaults replaces the knobs for requests arriving from now on; the
// rate-limit buckets start full if the rate limits change.
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

// clock reads s.now, which tests replace, when called.
func (s *Server) clock() time.Time { return s.now() }

// Faults returns the fault knobs in force.
func (s *Server) Faults() Faults { return *s.core.Faults() }

// ForgetKeys forgets every API's completed keys, as their expiry would,
// and returns how many.
func (s *Server) ForgetKeys() int { return s.core.Keys.Forget() }

// SetCreateHook makes every POST /v1/refunds call fn with its key, held,
// before the refund is made (nil: none): tests hold a request with it.
func (s *Server) SetCreateHook(fn func(idempotencyKey string)) { s.hook.Set(fn) }

// The knobs and rate limits are the core's; these names keep stripesim's API.
type (
	Faults     = sim.Faults
	RateLimits = sim.RateLimits
)

// Rate-limit modes and Stripe's documented rates (sim's).
const (
	RateLimitsOff      = sim.RateLimitsOff
	RateLimitsTest     = sim.RateLimitsTest
	RateLimitsLive     = sim.RateLimitsLive
	StripeEndpointRate = sim.StripeEndpointRate
)
