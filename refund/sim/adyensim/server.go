// Package adyensim is Adyen's refund API in the simulator: the Checkout
// API's POST /v71/payments/{paymentPspReference}/refunds, with Adyen's
// semantics (X-API-Key, Idempotency-Key replaying the first answer with
// the key echoed, 422 or 409 errorCode 704 while the first request runs,
// transient-error: true on what may be retried with the key, Adyen's error
// JSON), and what Adyen tells later: signed REFUND notifications (and
// REFUND_FAILED, REFUNDED_REVERSED) posted to a receiver and retried until
// it answers [accepted]. The fault knobs are the simulator's (refund/sim),
// as on Stripe's and PayPal's routes.
//
// It has no server of its own: refund/sim/stripesim mounts its routes on the
// simulator's one port and shares its core (knobs, draws, keys, counters).
// What Adyen puts on the wire is refund/provider/adyen/wire's, shared with the
// client and the receiver.
package adyensim

import (
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/refundkit/refundkit/refund/sim"
)

// Defaults of Config.
const (
	// DefaultAPIKey is the X-API-Key the simulator takes when none is
	// configured (stripe-sim reads ADYEN_API_KEY).
	DefaultAPIKey = "adyen_sim_test_key"
	// DefaultMerchantAccount is the merchant account of the simulated
	// company when none is configured.
	DefaultMerchantAccount = "RefundkitSim"
	// KeyTTL is how long Adyen keeps an Idempotency-Key: "valid for a
	// minimum period of 31 days after first submission" (Adyen's API
	// idempotency page; refund/provider/adyen/wire.KeyTTL is the client's own,
	// lower, figure).
	KeyTTL = 31 * 24 * time.Hour
	// DefaultNotifyBackoff is the wait before a failed notification is
	// sent again, doubling with each failure up to 64 times as long.
	DefaultNotifyBackoff = 50 * time.Millisecond
)

// Config is what Adyen's routes start with.
type Config struct {
	// Payments are seeded before the first request.
	Payments []Payment
	// MerchantAccount is the company's merchant account, and that of
	// payments that name none; DefaultMerchantAccount when empty.
	MerchantAccount string
	// APIKey is the one X-API-Key accepted; DefaultAPIKey when empty.
	APIKey string
	// KeyTTL forgets a completed Idempotency-Key this long after its first
	// request; 0 keeps keys until ForgetKeys (stripe-sim's flag defaults
	// to KeyTTL, Adyen's 31 days).
	KeyTTL time.Duration
	// NotifyURL receives the notifications (a loopback URL); none are sent
	// when empty.
	NotifyURL string
	// HMACKey signs the notifications (wire.ParseHMACKey of Adyen's hex);
	// required with NotifyURL.
	HMACKey []byte
	// NotifyBackoff is the wait before the first resend of a notification
	// that was not accepted; DefaultNotifyBackoff when 0.
	NotifyBackoff time.Duration
}

// Server is Adyen's side of one simulated company. It is safe for
// concurrent use.
type Server struct {
	core     *sim.Core
	now      func() time.Time
	merchant string
	apiKey   string
	keyTTL   time.Duration

	hook sim.Hook

	paymentsMu sync.RWMutex
	payments   map[string]*payment
	merchants  map[string]bool // the accounts the API key acts for; under paymentsMu

	// refunds holds every refund in creation order, refund n with id
	// SIMREF and n in ten digits (16 characters, as Adyen's).
	refunds sim.Numbered[*refund]

	notes *notifier // nil without a NotifyURL
	stats counters
}

// New makes Adyen's routes over core; now is the simulator's clock.
func New(core *sim.Core, cfg Config, now func() time.Time) (*Server, error) {
	if cfg.KeyTTL < 0 || cfg.NotifyBackoff < 0 {
		return nil, fmt.Errorf("adyen key ttl %v, notify backoff %v: want durations of zero or more", cfg.KeyTTL, cfg.NotifyBackoff)
	}
	s := &Server{core: core, now: now, merchant: cfg.MerchantAccount, apiKey: cfg.APIKey, keyTTL: cfg.KeyTTL,
		payments: make(map[string]*payment), merchants: make(map[string]bool),
		refunds: sim.Numbered[*refund]{Prefix: refundPrefix, Width: 10}}
	if s.merchant == "" {
		s.merchant = DefaultMerchantAccount
	}
	if s.apiKey == "" {
		s.apiKey = DefaultAPIKey
	}
	if !merchantRE.MatchString(s.merchant) {
		return nil, fmt.Errorf("adyen merchant account %q: want 1-80 letters, digits, '_', '-' or '.'", s.merchant)
	}
	s.merchants[s.merchant] = true
	if cfg.NotifyURL != "" {
		n, err := newNotifier(core, cfg.NotifyURL, cfg.HMACKey, cfg.NotifyBackoff, s.delivered)
		if err != nil {
			return nil, err
		}
		s.notes = n
	}
	if err := s.AddPayments(cfg.Payments...); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Close stops sending notifications; those not yet accepted stay pending
// (Stats counts them). Requests that may still queue notifications (behind
// a gateway timeout) should be settled first.
func (s *Server) Close() {
	if s.notes != nil {
		s.notes.close()
	}
}

// route is an endpoint of Adyen's API, for dispatch and stats.
type route int

const (
	routeRefund route = iota
	numRoutes
)

// RouteNames are the routes' ServeMux patterns, which are also their names
// in the simulator's stats.
var RouteNames = [numRoutes]string{
	routeRefund: "POST /v71/payments/{paymentPspReference}/refunds",
}

// Register adds Adyen's routes to the simulator's route table:
//
//	POST /v71/payments/{paymentPspReference}/refunds
//	        refund part or all of a payment: {amount:{value, currency},
//	        merchantAccount, reference}, under Idempotency-Key; 201
//	        {merchantAccount, paymentPspReference, pspReference, reference,
//	        status:"received", amount}, the outcome told later by a
//	        notification
//
// Every request needs the X-API-Key (401 errorType security otherwise).
// The knobs (refund/sim Faults) apply as on Stripe's routes: latency and
// rate_limit_share (429, transient-error: true, never saved) on every
// request; 500 before commit (transient-error: true, not saved: a retry
// with the key runs as the first), 500 after commit (saved under the key),
// dropped answers after commit and the gateway's 502/504 on refunds; the
// adyen_* knobs shape outcomes and notifications.
func (s *Server) Register(mux *http.ServeMux) {
	mux.HandleFunc(RouteNames[routeRefund], func(w http.ResponseWriter, r *http.Request) {
		s.stats.requests[routeRefund].Add(1)
		seq, f := s.core.Arrive()
		c := call{r: r, psp: r.PathValue("paymentPspReference"), seq: seq, f: f, requestRef: requestRef(seq)}
		if !s.authorized(r) {
			s.core.Pause(f, seq)
			s.core.Count.Unauthorized.Add(1)
			a := apiErr(http.StatusUnauthorized, "000", "HTTP Status Response - Unauthorized", typeSecurity, "")
			writeAnswer(w, a.Status, a.Body, "", false)
			return
		}
		if s.rateLimited(w, f, seq, c.requestRef) {
			return
		}
		s.serveRefund(w, c)
	})
}

// call is an API request once past its API key and the rate limit.
type call struct {
	r          *http.Request
	psp        string // the path's paymentPspReference
	seq        uint64
	f          *sim.Faults
	requestRef string // the pspReference of an error answer
}

// authorized compares the X-API-Key in constant time; the key is never
// logged or echoed.
func (s *Server) authorized(r *http.Request) bool {
	got := strings.TrimSpace(r.Header.Get("X-API-Key"))
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(s.apiKey)) == 1
}

// requestRef is the pspReference Adyen puts in an error answer of request
// seq: 16 characters, as Adyen's.
func requestRef(seq uint64) string { return sim.Padded("SIMREQ", 10, int(seq%1e10)) }

// rateLimited answers 429 to RateLimitShare of the requests, before
// anything else happens: never saved under a key, so transient.
func (s *Server) rateLimited(w http.ResponseWriter, f *sim.Faults, seq uint64, ref string) bool {
	if !s.core.RateLimited(f, seq) {
		return false
	}
	a := apiErr(http.StatusTooManyRequests, "000", "Too many requests", typeValidation, ref)
	writeAnswer(w, a.Status, a.Body, "", true)
	return true
}

// SetCreateHook makes every refund request call fn with its
// Idempotency-Key once the key is held and before the refund is made; the
// request stays in flight while fn blocks. nil removes the hook.
func (s *Server) SetCreateHook(fn func(idempotencyKey string)) { s.hook.Set(fn) }

// ForgetKeys forgets every completed Idempotency-Key of Adyen's, as Adyen
// does after 31 days, and returns how many; keys in flight are kept.
func (s *Server) ForgetKeys() int { return s.core.Keys.ForgetScope(keyScope) }

// MerchantAccount is the company's merchant account.
func (s *Server) MerchantAccount() string { return s.merchant }
