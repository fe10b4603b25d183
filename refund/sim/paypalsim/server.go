// Package paypalsim is PayPal's refund API in the simulator: OAuth2 tokens
// that expire, Payments v2's refund, show-refund and show-capture and
// Orders v2's show-order, with PayPal's semantics (PayPal-Request-Id
// replays the latest status, 409 while in flight, 422 issues, PENDING
// refunds that settle). stripesim serves its routes over the shared core.
package paypalsim

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/refundkit/refundkit/refund/provider/paypal/wire"
	"github.com/refundkit/refundkit/refund/sim"
)

// RequestIDTTL is how long PayPal keeps a PayPal-Request-Id (45 days).
const RequestIDTTL = wire.RequestIDTTL

// Config is what PayPal's routes start with.
type Config struct {
	// Captures are seeded before the first request.
	Captures []Capture
	// Events configures PayPal's webhook events; none without a URL.
	Events EventsConfig
}

// Server is PayPal's side of one simulated account; safe for concurrent use.
type Server struct {
	core *sim.Core
	now  func() time.Time

	hook sim.Hook

	captures   sim.Store[*capture]
	orders     map[string]*order // Orders v2 orders, by id; under captures' lock
	ordersMade int               // ORDSIM ids handed out

	refunds sim.Numbered[*refund]

	tokens tokens
	stats  counters

	events *events // nil without Config.Events.URL
}

// New makes PayPal's routes over core; now is the simulator's clock.
func New(core *sim.Core, cfg Config, now func() time.Time) (*Server, error) {
	s := &Server{core: core, now: now, orders: make(map[string]*order), tokens: tokens{m: make(map[string]tokenInfo)},
		refunds: sim.Numbered[*refund]{Prefix: refundPrefix, Width: 11}}
	if cfg.Events.URL != "" {
		e, err := newEvents(core, cfg.Events)
		if err != nil {
			return nil, err
		}
		s.events = e
	}
	if err := s.AddCaptures(cfg.Captures...); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// route is an endpoint of PayPal's API, for dispatch and stats.
type route int

const (
	routeToken route = iota
	routeRefund
	routeGetRefund
	routeGetCapture
	routeGetOrder
	numRoutes
)

// RouteNames are the routes' patterns, and their names in the stats.
var RouteNames = [numRoutes]string{
	routeToken:      "POST /v1/oauth2/token",
	routeRefund:     "POST /v2/payments/captures/{id}/refund",
	routeGetRefund:  "GET /v2/payments/refunds/{id}",
	routeGetCapture: "GET /v2/payments/captures/{id}",
	routeGetOrder:   "GET /v2/checkout/orders/{id}",
}

// Register adds PayPal's routes (RouteNames) to the route table. All but
// the token's need a bearer token (none: 401 AUTHENTICATION_FAILURE;
// unknown or expired: 401 invalid_token). The knobs apply as on Stripe's
// routes, but for its rate-limit buckets (PayPal publishes no limits).
func (s *Server) Register(mux *http.ServeMux) {
	s.core.Handle(mux, RouteNames[routeToken], s.issueToken)
	s.api(mux, routeRefund, s.serveRefund)
	s.api(mux, routeGetRefund, s.getRefund)
	s.api(mux, routeGetCapture, s.getCapture)
	s.api(mux, routeGetOrder, s.getOrder)
}

// call is an API request once past its bearer token and the rate limit.
type call struct {
	r        *http.Request
	id       string // the path's {id}
	clientID string
	seq      uint64
	f        *sim.Faults
	debugID  string
	base     string // the API's URL as the client reached it, for links
}

// api registers route rt: through the token check and the 429 draw into fn.
func (s *Server) api(mux *http.ServeMux, rt route, fn func(w http.ResponseWriter, c call)) {
	s.core.Handle(mux, RouteNames[rt], func(w http.ResponseWriter, r *http.Request, seq uint64, f *sim.Faults) {
		c := call{r: r, id: r.PathValue("id"), seq: seq, f: f, debugID: debugID(seq), base: "http://" + r.Host}
		clientID, v := s.tokens.check(r, s.now())
		if v != tokenValid {
			s.core.Pause(f, seq)
			s.refuseToken(w, v, c.debugID)
			return
		}
		c.clientID = clientID
		if s.rateLimited(w, f, seq, c.debugID) {
			return
		}
		fn(w, c)
	})
}

// debugID is the Paypal-Debug-Id of request seq: 13 hex digits as PayPal's.
func debugID(seq uint64) string { return fmt.Sprintf("%013x", seq) }

// rateLimited answers the 429 draw's RATE_LIMIT_REACHED.
func (s *Server) rateLimited(w http.ResponseWriter, f *sim.Faults, seq uint64, debugID string) bool {
	if !s.core.RateLimited(f, seq) {
		return false
	}
	writeErr(w, apiErr(http.StatusTooManyRequests, nameRateLimit, msgRateLimit, debugID, "", "", ""))
	return true
}

// getRefund is GET /v2/payments/refunds/{id}: the refund as it is now.
func (s *Server) getRefund(w http.ResponseWriter, c call) {
	s.show(w, c, func() ([]byte, bool) {
		r := s.refundByID(c.id)
		if r == nil {
			return nil, false
		}
		return r.render(c.base, s.now()), true
	})
}

func (s *Server) getCapture(w http.ResponseWriter, c call) {
	s.show(w, c, func() ([]byte, bool) {
		cp := s.captures.Get(c.id)
		if cp == nil {
			return nil, false
		}
		cp.mu.Lock()
		defer cp.mu.Unlock()
		return sim.MustJSON(cp.object(c.base, s.now())), true
	})
}

// show answers a look-up after its latency: what find renders, or a 404.
func (s *Server) show(w http.ResponseWriter, c call, find func() ([]byte, bool)) {
	s.core.Pause(c.f, c.seq)
	body, ok := find()
	if !ok {
		writeErr(w, notFound(c.debugID, noSuchID))
		return
	}
	writeAnswer(w, http.StatusOK, body, c.debugID)
}

// SetCreateHook makes every refund request call fn with its
// PayPal-Request-Id, held, before the refund is made (nil: none).
func (s *Server) SetCreateHook(fn func(requestID string)) { s.hook.Set(fn) }

// counters are PayPal's own statistics; the shared ones are the core's.
type counters struct {
	tokensIssued  atomic.Int64
	tokensExpired atomic.Int64
}

// Stats counts what PayPal's routes alone did.
type Stats struct {
	// TokensExpired counts 401 invalid_token for an expired token.
	TokensIssued  int64 `json:"tokens_issued"`
	TokensExpired int64 `json:"tokens_expired"`
	// Refunds counts the refunds by their status now.
	Refunds map[string]int64 `json:"refunds"`
	// Events count the webhook events; nil without Config.Events.URL.
	Events *EventStats `json:"events,omitempty"`
}

// Stats returns PayPal's counters so far.
func (s *Server) Stats() Stats {
	st := Stats{TokensIssued: s.stats.tokensIssued.Load(), TokensExpired: s.stats.tokensExpired.Load(),
		Refunds: map[string]int64{StatusCompleted: 0, StatusPending: 0, StatusFailed: 0, StatusCancelled: 0}}
	for _, r := range s.Refunds() {
		st.Refunds[r.Status]++
	}
	if s.events != nil {
		ev := s.events.stats()
		st.Events = &ev
	}
	return st
}
