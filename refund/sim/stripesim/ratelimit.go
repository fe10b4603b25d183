package stripesim

import (
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Values of the Stripe-Rate-Limited-Reason header that Stripe's 429s carry.
// The simulator enforces the two rate limiters; Stripe also documents
// global-concurrency, endpoint-concurrency and resource-specific, which it
// does not model.
const (
	ReasonGlobalRate   = "global-rate"
	ReasonEndpointRate = "endpoint-rate"
)

// limitReason is which bucket refused a request.
type limitReason int

const (
	limitedGlobal limitReason = iota
	limitedEndpoint
	numLimitReasons
)

// rateLimitedReasons are the header values of the limit reasons.
var rateLimitedReasons = [numLimitReasons]string{
	limitedGlobal:   ReasonGlobalRate,
	limitedEndpoint: ReasonEndpointRate,
}

// rateLimiter is the token buckets of one RateLimits. One lock covers all
// buckets, so a request refused by one takes nothing from the other and a
// clock read under it never goes backwards between two requests.
type rateLimiter struct {
	limits RateLimits // as configured, to tell whether SetFaults changes them
	now    func() time.Time

	mu        sync.Mutex
	global    *rate.Limiter
	endpoints [numRoutes]*rate.Limiter // nil: not an endpoint (routeOther)
}

// newRateLimiter makes full buckets for l, or returns nil if l enforces
// nothing.
func newRateLimiter(l RateLimits, now func() time.Time) *rateLimiter {
	if !l.Enabled() {
		return nil
	}
	e := l.Effective()
	rl := &rateLimiter{limits: l, now: now, global: rate.NewLimiter(rate.Limit(e.GlobalRate), e.GlobalBurst)}
	for rt := range numRoutes {
		if rt != routeOther {
			rl.endpoints[rt] = rate.NewLimiter(rate.Limit(e.EndpointRate), e.EndpointBurst)
		}
	}
	return rl
}

// admit takes a token from the global bucket and the route's and reports
// true, or takes none and reports false with the bucket that refused.
func (rl *rateLimiter) admit(rt route) (limitReason, bool) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	now := rl.now()
	ep := rl.endpoints[rt]
	switch {
	case rl.global.TokensAt(now) < 1:
		return limitedGlobal, false
	case ep != nil && ep.TokensAt(now) < 1:
		return limitedEndpoint, false
	}
	// Both hold a token, and nobody else takes one meanwhile: both allow.
	rl.global.AllowN(now, 1)
	if ep != nil {
		ep.AllowN(now, 1)
	}
	return 0, true
}

// rateLimited answers 429 rate_limit and reports true if the request is
// refused: by RateLimitShare's draw, or by the rate limits' buckets (then
// with the Stripe-Rate-Limited-Reason header).
func (s *Server) rateLimited(w http.ResponseWriter, rt route, f *Faults, seq uint64, reqID string) bool {
	if s.core.RateLimited(f, seq) {
		s.stats.rateLimitedRoutes[rt].Add(1)
		writeAnswer(w, http.StatusTooManyRequests, rateLimitBody, reqID, "", false)
		return true
	}
	lim := s.limiter.Load()
	if lim == nil {
		return false
	}
	reason, ok := lim.admit(rt)
	if ok {
		return false
	}
	s.core.Count.RateLimited.Add(1)
	s.stats.rateLimitedRoutes[rt].Add(1)
	s.stats.rateLimitedReasons[reason].Add(1)
	s.core.Pause(f, seq)
	w.Header()["Stripe-Rate-Limited-Reason"] = []string{rateLimitedReasons[reason]}
	writeAnswer(w, http.StatusTooManyRequests, rateLimitBody, reqID, "", false)
	return true
}
