package stripesim

import (
	"sync/atomic"

	"github.com/refundkit/refundkit/refund/sim/adyensim"
	"github.com/refundkit/refundkit/refund/sim/paypalsim"
)

// counters are the Stripe routes' own statistics.
type counters struct {
	requests        [numRoutes]atomic.Int64
	refundsCanceled atomic.Int64
	keyMismatch     atomic.Int64

	rateLimitedReasons [numLimitReasons]atomic.Int64
	rateLimitedRoutes  [numRoutes]atomic.Int64
}

// Stats counts what the simulator did since it started: API requests by
// route (every API's), then counters of all APIs (sim.Counters), Stripe's
// own, and PayPal's and Adyen's own.
type Stats struct {
	Requests                 map[string]int64 `json:"requests"`
	RefundsCreated           int64            `json:"refunds_created"`
	RefundsCanceled          int64            `json:"refunds_canceled"`
	RateLimited              int64            `json:"rate_limited"`
	ErrorsBeforeCommit       int64            `json:"errors_before_commit"`
	ErrorsAfterCommit        int64            `json:"errors_after_commit"`
	Dropped                  int64            `json:"dropped"`
	Replayed                 int64            `json:"replayed"`
	KeyInUse                 int64            `json:"key_in_use"`
	KeyMismatch              int64            `json:"key_mismatch"` // 400 idempotency_error
	Unauthorized             int64            `json:"unauthorized"`
	InvalidRequests          int64            `json:"invalid_requests"`
	RefundsRefused           int64            `json:"refunds_refused"`
	GatewayTimeouts          int64            `json:"gateway_timeouts"`
	GatewayErrorsAfterCommit int64            `json:"gateway_errors_after_commit"`
	// GatewayInFlight is a gauge: requests behind a gateway timeout now.
	GatewayInFlight int64 `json:"gateway_in_flight"`
	// RateLimitedReasons counts the rate limits' 429s by their
	// Stripe-Rate-Limited-Reason; RateLimitedRoutes, every 429 by route.
	RateLimitedReasons map[string]int64 `json:"rate_limited_reasons"`
	RateLimitedRoutes  map[string]int64 `json:"rate_limited_routes"`
	PayPal             paypalsim.Stats  `json:"paypal"`
	Adyen              adyensim.Stats   `json:"adyen"`
}

// Stats returns the counters so far.
func (s *Server) Stats() Stats {
	c, k := &s.stats, &s.core.Count
	st := Stats{
		Requests:           make(map[string]int64, numRoutes),
		RefundsCreated:     k.RefundsCreated.Load(),
		RefundsCanceled:    c.refundsCanceled.Load(),
		RateLimited:        k.RateLimited.Load(),
		ErrorsBeforeCommit: k.ErrorsBefore.Load(),
		ErrorsAfterCommit:  k.ErrorsAfter.Load(),
		Dropped:            k.Dropped.Load(),
		Replayed:           k.Replayed.Load(),
		KeyInUse:           k.KeyInUse.Load(),
		KeyMismatch:        c.keyMismatch.Load(),
		Unauthorized:       k.Unauthorized.Load(),
		InvalidRequests:    k.InvalidRequests.Load(),
		RefundsRefused:     k.RefundsRefused.Load(),

		GatewayTimeouts:          k.GatewayTimeouts.Load(),
		GatewayErrorsAfterCommit: k.GatewayErrorsAfter.Load(),
		GatewayInFlight:          s.core.BackgroundRunning(),
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
	for name, n := range s.paypal.Requests() {
		st.Requests[name] = n
	}
	st.PayPal = s.paypal.Stats()
	for name, n := range s.adyen.Requests() {
		st.Requests[name] = n
	}
	st.Adyen = s.adyen.Stats()
	return st
}
