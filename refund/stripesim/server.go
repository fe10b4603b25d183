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
// Tests, the demo, chaos runs and benchmarks all use it; cmd/stripe-sim
// serves it as a process with control endpoints under /_sim/.
package stripesim

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
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
	// request (Stripe: 24 hours); 0 keeps them until ForgetKeys.
	KeyTTL time.Duration
}

// Server is one simulated Stripe account. It is safe for concurrent use.
type Server struct {
	seed    uint64
	keyTTL  time.Duration
	now     func() time.Time // replaced by tests that move time
	handler http.Handler

	faults atomic.Pointer[Faults]
	hook   atomic.Pointer[func(string)]
	reqSeq atomic.Uint64 // arrival number of API requests, for fault draws

	// limiter holds the rate-limit buckets of faults.RateLimits, nil when
	// off; limitsMu orders SetFaults calls that replace it.
	limiter  atomic.Pointer[rateLimiter]
	limitsMu sync.Mutex

	chargesMu sync.RWMutex
	charges   map[string]*charge
	byIntent  map[string]*charge

	// refunds holds every refund in creation order; refund n has id
	// re_sim%010d(n) and sits at index n-1, so lookups need no map.
	refundsMu sync.RWMutex
	refunds   []*refund

	keys  *keyStore
	stats counters

	httpSrv   *http.Server
	url       string
	closing   chan struct{} // closed by Close: cuts injected latency short
	closeOnce sync.Once

	// Requests still running behind a gateway timeout: Close, Shutdown and
	// Settle wait for them; once bgClosed none start in the background.
	bgMu     sync.Mutex
	bgN      int
	bgIdle   chan struct{} // closed when bgN drops to zero; nil if nobody waits
	bgClosed bool
}

// charge is the simulator's state of one charge; mu guards refunded, the
// status changes of its refunds, and appends to refunds.
type charge struct {
	id, intent, currency string
	amount               int64
	created              int64

	mu       sync.Mutex
	refunded int64     // sum of refunds that hold part of the amount
	refunds  []*refund // oldest first; entries are never removed
}

// refund is one refund. Only status changes after creation (under the
// charge's lock); it is atomic so lists can read it without that lock.
type refund struct {
	id       string
	seq      int
	ch       *charge
	amount   int64
	reason   string
	metadata map[string]string
	created  int64
	key      string // idempotency key of the request that created it
	status   atomic.Pointer[string]
}

// Refund is a refund as the simulator holds it, for checks by tests and
// scripts (GET /_sim/refunds writes these as JSON lines).
type Refund struct {
	ID            string            `json:"id"`
	Charge        string            `json:"charge"`
	PaymentIntent string            `json:"payment_intent,omitempty"`
	Amount        int64             `json:"amount"`
	Currency      string            `json:"currency"`
	Status        string            `json:"status"`
	Reason        string            `json:"reason,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
	Created       int64             `json:"created"`
	// IdempotencyKey is the key of the request that created the refund
	// (empty for seeded refunds). Stripe does not expose it; checks may.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
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
		seed:     uint64(cfg.Seed),
		keyTTL:   cfg.KeyTTL,
		now:      time.Now,
		charges:  make(map[string]*charge),
		byIntent: make(map[string]*charge),
		keys:     newKeyStore(),
		closing:  make(chan struct{}),
	}
	f := cfg.Faults
	s.faults.Store(&f)
	s.limiter.Store(newRateLimiter(f.RateLimits, s.clock))
	s.handler = http.HandlerFunc(s.serveHTTP)
	if err := s.AddCharges(cfg.Charges...); err != nil {
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
		return nil, err
	}
	tcp, ok := ln.Addr().(*net.TCPAddr)
	if !ok || !tcp.IP.IsLoopback() { // "localhost" could resolve elsewhere
		ln.Close()
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
// latency short (a create hook that blocks holds Close until it returns).
func (s *Server) Close() {
	s.closeOnce.Do(func() { close(s.closing) })
	if s.httpSrv != nil {
		s.httpSrv.Close()
	}
	s.stopBackground()
	s.Settle(context.Background())
}

// Shutdown stops accepting connections and waits for requests in flight,
// those behind a gateway timeout included, cutting injected latency short,
// until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.closeOnce.Do(func() { close(s.closing) })
	var err error
	if s.httpSrv != nil {
		err = s.httpSrv.Shutdown(ctx)
	}
	s.stopBackground()
	if err2 := s.Settle(ctx); err == nil {
		err = err2
	}
	return err
}

// Settle waits until every request that a gateway timeout answered early
// has finished at the simulator (its refund committed and its answer saved
// under its key), or ctx ends. Tests call it before they check what a
// retry replays, instead of sleeping.
func (s *Server) Settle(ctx context.Context) error {
	s.bgMu.Lock()
	if s.bgN == 0 {
		s.bgMu.Unlock()
		return nil
	}
	if s.bgIdle == nil {
		s.bgIdle = make(chan struct{})
	}
	idle := s.bgIdle
	s.bgMu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// goBackground runs fn on a goroutine of its own that Settle waits for,
// unless the server is closing: then it reports false and runs nothing.
func (s *Server) goBackground(fn func()) bool {
	s.bgMu.Lock()
	defer s.bgMu.Unlock()
	if s.bgClosed {
		return false
	}
	s.bgN++
	go func() {
		defer s.backgroundDone()
		fn()
	}()
	return true
}

func (s *Server) backgroundDone() {
	s.bgMu.Lock()
	defer s.bgMu.Unlock()
	if s.bgN--; s.bgN == 0 && s.bgIdle != nil {
		close(s.bgIdle)
		s.bgIdle = nil
	}
}

// stopBackground makes requests that arrive from now on (a handler still
// running after Close) finish in their handler, so Settle cannot miss one.
func (s *Server) stopBackground() {
	s.bgMu.Lock()
	s.bgClosed = true
	s.bgMu.Unlock()
}

func (s *Server) backgroundRunning() int64 {
	s.bgMu.Lock()
	defer s.bgMu.Unlock()
	return int64(s.bgN)
}

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
	s.faults.Store(&f)
	return nil
}

// clock reads s.now when called, so a test that replaces s.now moves the
// rate-limit buckets' time too.
func (s *Server) clock() time.Time { return s.now() }

// Faults returns the fault knobs in force.
func (s *Server) Faults() Faults { return *s.faults.Load() }

// ForgetKeys forgets every completed idempotency key, as Stripe does after
// 24 hours, and returns how many it forgot. Keys whose first request is
// still in flight are kept.
func (s *Server) ForgetKeys() int { return s.keys.forget() }

// SetCreateHook makes every POST /v1/refunds call fn with its idempotency
// key once the key is reserved and before the refund is created; the request
// stays in flight while fn blocks. Tests use it to hold a request at a known
// point. nil removes the hook. Behind a gateway timeout fn runs after the
// gateway answered, and Close waits for it to return.
func (s *Server) SetCreateHook(fn func(idempotencyKey string)) {
	if fn == nil {
		s.hook.Store(nil)
		return
	}
	s.hook.Store(&fn)
}

// AddCharges adds charges and their seeded refunds. Nothing is added if one
// is invalid or reuses a charge id or payment intent already known.
func (s *Server) AddCharges(charges ...Charge) error {
	seen := make(map[string]bool, len(charges))
	for i := range charges {
		c := &charges[i]
		if err := c.Validate(); err != nil {
			return fmt.Errorf("charge %d: %w", i+1, err)
		}
		for _, id := range []string{c.ID, c.PaymentIntent} {
			if id != "" && seen[id] {
				return fmt.Errorf("charge %d: %s given twice", i+1, id)
			}
			seen[id] = true
		}
	}
	s.chargesMu.Lock()
	defer s.chargesMu.Unlock()
	for i, c := range charges {
		if s.charges[c.ID] != nil {
			return fmt.Errorf("charge %d: %s already exists", i+1, c.ID)
		}
		if c.PaymentIntent != "" && s.byIntent[c.PaymentIntent] != nil {
			return fmt.Errorf("charge %d: payment intent %s already has a charge", i+1, c.PaymentIntent)
		}
	}
	now := s.now().Unix()
	for _, c := range charges {
		ch := &charge{id: c.ID, intent: c.PaymentIntent, currency: c.Currency, amount: c.Amount, created: now}
		if ch.currency == "" {
			ch.currency = "usd"
		}
		ch.mu.Lock()
		for _, r := range c.Refunds {
			status := r.Status
			if status == "" {
				status = StatusSucceeded
			}
			s.addRefund(ch, r.Amount, status, r.Reason, copyMetadata(r.Metadata), "")
		}
		ch.mu.Unlock()
		s.charges[ch.id] = ch
		if ch.intent != "" {
			s.byIntent[ch.intent] = ch
		}
	}
	return nil
}

// copyMetadata copies a metadata map so no caller shares the simulator's;
// an empty one becomes nil.
func copyMetadata(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}

// addRefund records a new refund on ch, which the caller has locked.
func (s *Server) addRefund(ch *charge, amount int64, status, reason string, md map[string]string, key string) *refund {
	re := &refund{ch: ch, amount: amount, reason: reason, metadata: md, created: s.now().Unix(), key: key}
	re.status.Store(&status)
	s.refundsMu.Lock()
	re.seq = len(s.refunds) + 1
	re.id = refundID(re.seq)
	s.refunds = append(s.refunds, re)
	s.refundsMu.Unlock()
	ch.refunds = append(ch.refunds, re)
	if countsAgainstCharge(status) {
		ch.refunded += amount
	}
	return re
}

const refundPrefix = "re_sim"

func refundID(seq int) string { return padded(refundPrefix, seq) }

// padded writes n with at least ten digits so ids sort like their numbers.
func padded(prefix string, n int) string {
	d := strconv.Itoa(n)
	if len(d) < 10 {
		d = "0000000000"[:10-len(d)] + d
	}
	return prefix + d
}

func (s *Server) refundByID(id string) *refund {
	digits, ok := strings.CutPrefix(id, refundPrefix)
	if !ok || digits == "" {
		return nil
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n < 1 {
		return nil
	}
	s.refundsMu.RLock()
	defer s.refundsMu.RUnlock()
	if n > len(s.refunds) || s.refunds[n-1].id != id {
		return nil
	}
	return s.refunds[n-1]
}

func (s *Server) chargeByID(id string) *charge {
	s.chargesMu.RLock()
	defer s.chargesMu.RUnlock()
	return s.charges[id]
}

func (s *Server) chargeByIntent(id string) *charge {
	s.chargesMu.RLock()
	defer s.chargesMu.RUnlock()
	return s.byIntent[id]
}

// allRefunds is every refund so far, oldest first; the slice is shared and
// must not be modified.
func (s *Server) allRefunds() []*refund {
	s.refundsMu.RLock()
	defer s.refundsMu.RUnlock()
	return s.refunds[:len(s.refunds):len(s.refunds)]
}

// Refunds returns every refund, oldest first, for checks.
func (s *Server) Refunds() []Refund {
	all := s.allRefunds()
	out := make([]Refund, len(all))
	for i, re := range all {
		out[i] = Refund{
			ID:             re.id,
			Charge:         re.ch.id,
			PaymentIntent:  re.ch.intent,
			Amount:         re.amount,
			Currency:       re.ch.currency,
			Status:         *re.status.Load(),
			Reason:         re.reason,
			Metadata:       copyMetadata(re.metadata),
			Created:        re.created,
			IdempotencyKey: re.key,
		}
	}
	return out
}

// ChargeState is a charge as the simulator holds it, for checks.
type ChargeState struct {
	ID             string `json:"id"`
	PaymentIntent  string `json:"payment_intent,omitempty"`
	Currency       string `json:"currency"`
	Amount         int64  `json:"amount"`
	AmountRefunded int64  `json:"amount_refunded"`
}

// Charge returns the state of one charge, and whether it exists.
func (s *Server) Charge(id string) (ChargeState, bool) {
	ch := s.chargeByID(id)
	if ch == nil {
		return ChargeState{}, false
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ChargeState{ID: ch.id, PaymentIntent: ch.intent, Currency: ch.currency, Amount: ch.amount, AmountRefunded: ch.refunded}, true
}

// route is the kind of an API request, for dispatch and stats.
type route int

const (
	routeCreateRefund route = iota
	routeListRefunds
	routeGetRefund
	routeCancelRefund
	routeGetCharge
	routeListCharges
	routeOther
	numRoutes
)

var routeNames = [numRoutes]string{
	routeCreateRefund: "POST /v1/refunds",
	routeListRefunds:  "GET /v1/refunds",
	routeGetRefund:    "GET /v1/refunds/{id}",
	routeCancelRefund: "POST /v1/refunds/{id}/cancel",
	routeGetCharge:    "GET /v1/charges/{id}",
	routeListCharges:  "GET /v1/charges",
	routeOther:        "other",
}

// classify names the route of a request and the id in its path, if any.
func classify(method, path string) (route, string) {
	if path == "/v1/refunds" {
		switch method {
		case http.MethodPost:
			return routeCreateRefund, ""
		case http.MethodGet:
			return routeListRefunds, ""
		}
		return routeOther, ""
	}
	if rest, ok := strings.CutPrefix(path, "/v1/refunds/"); ok {
		if id, ok := strings.CutSuffix(rest, "/cancel"); ok && method == http.MethodPost && validPathID(id) {
			return routeCancelRefund, id
		}
		if method == http.MethodGet && validPathID(rest) {
			return routeGetRefund, rest
		}
		return routeOther, ""
	}
	if id, ok := strings.CutPrefix(path, "/v1/charges/"); ok && method == http.MethodGet && validPathID(id) {
		return routeGetCharge, id
	}
	if path == "/v1/charges" && method == http.MethodGet {
		return routeListCharges, ""
	}
	return routeOther, ""
}

func validPathID(id string) bool { return id != "" && !strings.Contains(id, "/") }

// counters are the simulator's statistics, updated without locks.
type counters struct {
	requests         [numRoutes]atomic.Int64
	refundsCreated   atomic.Int64
	refundsCanceled  atomic.Int64
	rateLimited      atomic.Int64
	errorsBefore     atomic.Int64
	errorsAfter      atomic.Int64
	dropped          atomic.Int64
	replayed         atomic.Int64
	keyInUse         atomic.Int64
	keyMismatch      atomic.Int64
	unauthorized     atomic.Int64
	validationErrors atomic.Int64
	refundsRefused   atomic.Int64

	gatewayTimeouts    atomic.Int64
	gatewayErrorsAfter atomic.Int64

	rateLimitedReasons [numLimitReasons]atomic.Int64
	rateLimitedRoutes  [numRoutes]atomic.Int64
}

// Stats counts what the simulator did since it started.
type Stats struct {
	// Requests counts API requests by route ("POST /v1/refunds", ...,
	// "other"), whatever their answer.
	Requests map[string]int64 `json:"requests"`
	// RefundsCreated counts refunds created by the API (not seeded ones).
	RefundsCreated  int64 `json:"refunds_created"`
	RefundsCanceled int64 `json:"refunds_canceled"`
	// RateLimited counts 429 rate_limit answers: RateLimitShare's and the
	// rate limits' together.
	RateLimited int64 `json:"rate_limited"`
	// ErrorsBeforeCommit and ErrorsAfterCommit count injected 500s.
	ErrorsBeforeCommit int64 `json:"errors_before_commit"`
	ErrorsAfterCommit  int64 `json:"errors_after_commit"`
	// Dropped counts connections closed after a commit without an answer.
	Dropped int64 `json:"dropped"`
	// Replayed counts answers replayed from an idempotency key.
	Replayed int64 `json:"replayed"`
	// KeyInUse counts 409 idempotency_key_in_use answers.
	KeyInUse int64 `json:"key_in_use"`
	// KeyMismatch counts 400 idempotency_error answers (other parameters
	// or another endpoint than the key was first used with).
	KeyMismatch int64 `json:"key_mismatch"`
	// Unauthorized counts 401 answers.
	Unauthorized int64 `json:"unauthorized"`
	// InvalidRequests counts requests refused for their parameters.
	InvalidRequests int64 `json:"invalid_requests"`
	// RefundsRefused counts refund creations refused for the charge's state
	// (unknown, already refunded, amount too large).
	RefundsRefused int64 `json:"refunds_refused"`
	// GatewayTimeouts counts gateway answers given at once while the request
	// went on; GatewayErrorsAfterCommit, gateway answers given after the
	// refund was committed and its success saved under the key.
	GatewayTimeouts          int64 `json:"gateway_timeouts"`
	GatewayErrorsAfterCommit int64 `json:"gateway_errors_after_commit"`
	// GatewayInFlight is how many requests answered by a gateway timeout
	// are still running (a gauge, not a count since the start).
	GatewayInFlight int64 `json:"gateway_in_flight"`
	// RateLimitedReasons counts the rate limits' 429s by the
	// Stripe-Rate-Limited-Reason they carried ("global-rate",
	// "endpoint-rate"); RateLimitShare's carry none and are not in it.
	RateLimitedReasons map[string]int64 `json:"rate_limited_reasons"`
	// RateLimitedRoutes counts every 429 rate_limit answer by route, as
	// Requests does.
	RateLimitedRoutes map[string]int64 `json:"rate_limited_routes"`
}

// Stats returns the counters so far.
func (s *Server) Stats() Stats {
	c := &s.stats
	st := Stats{
		Requests:           make(map[string]int64, numRoutes),
		RefundsCreated:     c.refundsCreated.Load(),
		RefundsCanceled:    c.refundsCanceled.Load(),
		RateLimited:        c.rateLimited.Load(),
		ErrorsBeforeCommit: c.errorsBefore.Load(),
		ErrorsAfterCommit:  c.errorsAfter.Load(),
		Dropped:            c.dropped.Load(),
		Replayed:           c.replayed.Load(),
		KeyInUse:           c.keyInUse.Load(),
		KeyMismatch:        c.keyMismatch.Load(),
		Unauthorized:       c.unauthorized.Load(),
		InvalidRequests:    c.validationErrors.Load(),
		RefundsRefused:     c.refundsRefused.Load(),

		GatewayTimeouts:          c.gatewayTimeouts.Load(),
		GatewayErrorsAfterCommit: c.gatewayErrorsAfter.Load(),
		GatewayInFlight:          s.backgroundRunning(),
	}
	st.RateLimitedReasons = make(map[string]int64, numLimitReasons)
	for i, reason := range rateLimitedReasons {
		st.RateLimitedReasons[reason] = c.rateLimitedReasons[i].Load()
	}
	st.RateLimitedRoutes = make(map[string]int64, numRoutes)
	for r := range numRoutes {
		st.Requests[routeNames[r]] = c.requests[r].Load()
		st.RateLimitedRoutes[routeNames[r]] = c.rateLimitedRoutes[r].Load()
	}
	return st
}

// pause waits out the injected latency of request seq.
func (s *Server) pause(f *Faults, seq uint64) {
	d := f.Latency
	if f.LatencyJitter > 0 {
		d += time.Duration(draw(s.seed, seq, knobJitter) * float64(f.LatencyJitter))
	}
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-s.closing:
		t.Stop()
	}
}
