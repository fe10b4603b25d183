package stripesim

import (
	"sync/atomic"

	"github.com/refundkit/refundkit/refund/sim/adyensim"
	"github.com/refundkit/refundkit/refund/sim/paypalsim"
)

// counters are the Stripe routes' own statistics, updated without locks;
// the counters shared with PayPal's routes are the core's (sim.Counters).
type counters struct {
	requests        [numRoutes]atomic.Int64
	refundsCanceled atomic.Int64
	keyMismatch     atomic.Int64

	rateLimitedReasons [numLimitReasons]atomic.Int64
	rateLimitedRoutes  [numRoutes]atomic.Int64
}

// Stats counts what the simulator did since it started.
type Stats struct {
	// Requests counts API requests by route ("POST /v1/refunds", ...,
	// "other", and PayPal's: "POST /v2/payments/captures/{id}/refund",
	// ...), whatever their answer. The counters after it count both APIs.
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
	// Requests does (Stripe's routes).
	RateLimitedRoutes map[string]int64 `json:"rate_limited_routes"`
	// PayPal is what PayPal's routes alone counted; their requests are in
	// Requests, and the counters above count both APIs.
	PayPal paypalsim.Stats `json:"paypal"`
	// Adyen is what Adyen's routes alone counted, its notifications
	// included; its requests are in Requests, and the counters above count
	// its refunds too.
	Adyen adyensim.Stats `json:"adyen"`
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
