package stripesim

import (
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// The Stripe-Rate-Limited-Reason of the two limiters the simulator models.
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

// rateLimiter is the buckets of one RateLimits, under one lock: a refused
// request takes nothing, and the clock never goes backwards.
type rateLimiter struct {
	limits RateLimits // as configured, to tell whether SetFaults changes them
	now    func() time.Time

	mu        sync.Mutex
	global    *rate.Limiter
	endpoints [numRoutes]*rate.Limiter // nil: not an endpoint (routeOther)
}

// newRateLimiter makes full buckets for l; nil if l enforces nothing.
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

// admit takes a token from both buckets, or none and reports which refused.
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

// rateLimited answers 429 if the draw or the buckets refuse the request.
func (s *Server) rateLimited(w http.ResponseWriter, rt route, f *Faults, seq uint64, reqID string) bool {
	if s.core.RateLimited(f, seq) {
		s.stats.rateLimitedRoutes[rt].Add(1)
		writeAnswer(w, http.StatusTooManyRequests, rateLimitBody, reqID, "", false)
		return true
	}
	reason, ok := limitReason(0), true
	if lim := s.limiter.Load(); lim != nil {
		reason, ok = lim.admit(rt)
	}
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
