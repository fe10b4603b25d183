// Package adyensim is Adyen's refund API in the simulator: the Checkout
// API's refunds with Adyen's semantics (X-API-Key, Idempotency-Key
// replaying the first answer, errorCode 704 while in flight, Transient-Error)
// and the signed notifications that tell their outcome later, posted until
// accepted. stripesim serves its routes over the shared core; the wire
// format is refund/provider/adyen/wire's.
package adyensim

import (
	"cmp"
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/refundkit/refundkit/refund/sim"
)

// Defaults of Config.
const (
	// DefaultAPIKey is the X-API-Key taken when none is configured.
	DefaultAPIKey = "adyen_sim_test_key"
	// DefaultMerchantAccount is the company's when none is configured.
	DefaultMerchantAccount = "RefundkitSim"
	// KeyTTL is how long Adyen keeps an Idempotency-Key ("a minimum period
	// of 31 days"; wire.KeyTTL is the client's lower figure).
	KeyTTL = 31 * 24 * time.Hour
	// DefaultNotifyBackoff is the first wait to resend a notification,
	// doubling up to 64 times as long.
	DefaultNotifyBackoff = 50 * time.Millisecond
)

// Config is what Adyen's routes start with.
type Config struct {
	// Payments are seeded before the first request.
	Payments []Payment
	// MerchantAccount is the company's, and of payments that name none.
	MerchantAccount string
	// APIKey is the one X-API-Key accepted.
	APIKey string
	// KeyTTL forgets a completed key this long after its first request;
	// 0 keeps keys until ForgetKeys.
	KeyTTL time.Duration
	// NotifyURL (loopback) receives the notifications; none when empty.
	NotifyURL string
	// HMACKey signs the notifications; required with NotifyURL.
	HMACKey []byte
	// NotifyBackoff is the wait before a notification's first resend.
	NotifyBackoff time.Duration
}

// Server is Adyen's side of one simulated company; safe for concurrent use.
type Server struct {
	core     *sim.Core
	now      func() time.Time
	merchant string
	apiKey   string
	keyTTL   time.Duration

	hook sim.Hook

	payments  sim.Store[*payment]
	merchants map[string]bool // the accounts the API key acts for; under payments' lock

	refunds sim.Numbered[*refund]

	notes *notifier // nil without a NotifyURL
	stats counters
}

// New makes Adyen's routes over core; now is the simulator's clock.
func New(core *sim.Core, cfg Config, now func() time.Time) (*Server, error) {
	if cfg.KeyTTL < 0 || cfg.NotifyBackoff < 0 {
		return nil, fmt.Errorf("adyen key ttl %v, notify backoff %v: want durations of zero or more", cfg.KeyTTL, cfg.NotifyBackoff)
	}
	s := &Server{core: core, now: now, keyTTL: cfg.KeyTTL,
		merchant: cmp.Or(cfg.MerchantAccount, DefaultMerchantAccount), apiKey: cmp.Or(cfg.APIKey, DefaultAPIKey),
		merchants: make(map[string]bool),
		refunds:   sim.Numbered[*refund]{Prefix: refundPrefix, Width: 10}}
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

// Close stops sending notifications; those not yet accepted stay pending.
// Settle the requests behind a gateway timeout first.
func (s *Server) Close() {
	if s.notes != nil {
		s.notes.out.Close()
	}
}

// route is an endpoint of Adyen's API, for dispatch and stats.
type route int

const (
	routeRefund route = iota
	numRoutes
)

// RouteNames are the routes' patterns, and their names in the stats.
var RouteNames = [numRoutes]string{
	routeRefund: "POST /v71/payments/{paymentPspReference}/refunds",
}

// Register adds Adyen's route to the route table: a refund (201
// "received", its outcome told by notifications later), with the X-API-Key
// (401 otherwise). The knobs apply as on Stripe's routes; a 429 and a 500
// before commit are transient, not saved.
func (s *Server) Register(mux *http.ServeMux) {
	s.core.Handle(mux, RouteNames[routeRefund], func(w http.ResponseWriter, r *http.Request, seq uint64, f *sim.Faults) {
		c := call{r: r, psp: r.PathValue("paymentPspReference"), seq: seq, f: f, requestRef: requestRef(seq)}
		if !s.authorized(r) {
			s.core.Pause(f, seq)
			s.core.Count.Unauthorized.Add(1)
			writeErr(w, apiErr(http.StatusUnauthorized, "000", "HTTP Status Response - Unauthorized", typeSecurity, ""), false)
			return
		}
		if s.core.RateLimited(f, seq) { // transient
			writeErr(w, apiErr(http.StatusTooManyRequests, "000", "Too many requests", typeValidation, c.requestRef), true)
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

// authorized compares the X-API-Key in constant time.
func (s *Server) authorized(r *http.Request) bool {
	got := strings.TrimSpace(r.Header.Get("X-API-Key"))
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(s.apiKey)) == 1
}

// requestRef is the pspReference of request seq's error answers.
func requestRef(seq uint64) string { return sim.Padded("SIMREQ", 10, int(seq%1e10)) }

// SetCreateHook makes every refund request call fn with its
// Idempotency-Key, held, before the refund is made (nil: none).
func (s *Server) SetCreateHook(fn func(idempotencyKey string)) { s.hook.Set(fn) }

// ForgetKeys forgets Adyen's completed keys and returns how many.
func (s *Server) ForgetKeys() int { return s.core.Keys.ForgetScope(keyScope) }

// MerchantAccount is the company's merchant account.
func (s *Server) MerchantAccount() string { return s.merchant }

// counters are Adyen's own statistics; the shared ones are the core's.
type counters struct {
	created             atomic.Int64
	replayed            atomic.Int64
	replayedOtherParams atomic.Int64
	keyInUse            atomic.Int64
}

// Stats counts what Adyen's routes alone did.
type Stats struct {
	// RefundsCreated counts 201s (refused included); ReplayedOtherParams, replays
	// to another body or path; KeyInUse, 704s.
	RefundsCreated      int64 `json:"refunds_created"`
	Replayed            int64 `json:"replayed"`
	ReplayedOtherParams int64 `json:"replayed_other_params"`
	KeyInUse            int64 `json:"key_in_use"`
	// Refunds counts the refunds by their status now.
	Refunds map[string]int64 `json:"refunds"`
	// Notifications are the webhook's counts.
	Notifications NotifyStats `json:"notifications"`
}

// NotifyStats count the deliveries: each the posts of one item until accepted.
type NotifyStats struct {
	// Pending are queued, waiting for the one before, or in flight.
	Queued    int64 `json:"queued"`
	Delivered int64 `json:"delivered"`
	Pending   int64 `json:"pending"`
	// Retries are posts not accepted (FailedByKnob: adyen_notify_fail_share).
	Retries      int64 `json:"retries"`
	FailedByKnob int64 `json:"failed_by_knob"`
	// Duplicates are notifications queued twice.
	Duplicates int64 `json:"duplicates"`
}

// Stats returns Adyen's counters so far.
func (s *Server) Stats() Stats {
	st := Stats{RefundsCreated: s.stats.created.Load(), Replayed: s.stats.replayed.Load(),
		ReplayedOtherParams: s.stats.replayedOtherParams.Load(), KeyInUse: s.stats.keyInUse.Load(),
		Refunds:       map[string]int64{StatusReceived: 0, OutcomeRefunded: 0, OutcomeRefused: 0, OutcomeFailed: 0, OutcomeReversed: 0},
		Notifications: s.NotifyStats()}
	for _, r := range s.Refunds() {
		st.Refunds[r.Status]++
	}
	return st
}

// NotifyStats returns the webhook's counts so far.
func (s *Server) NotifyStats() NotifyStats {
	if s.notes == nil {
		return NotifyStats{}
	}
	return s.notes.stats()
}

// Flush waits until every notification queued so far is accepted (the
// requests behind a gateway timeout settled first), or ctx ends.
func (s *Server) Flush(ctx context.Context) (NotifyStats, error) {
	var flush func(context.Context) error
	if s.notes != nil {
		flush = s.notes.out.Flush
	}
	err := s.core.Flush(ctx, flush)
	return s.NotifyStats(), err
}
