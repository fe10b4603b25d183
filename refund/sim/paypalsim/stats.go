package paypalsim

import "sync/atomic"

// counters are PayPal's own statistics; the shared ones are the core's.
type counters struct {
	requests      [numRoutes]atomic.Int64
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
}

// Stats returns PayPal's counters so far.
func (s *Server) Stats() Stats {
	st := Stats{TokensIssued: s.stats.tokensIssued.Load(), TokensExpired: s.stats.tokensExpired.Load(),
		Refunds: map[string]int64{StatusCompleted: 0, StatusPending: 0, StatusFailed: 0, StatusCancelled: 0}}
	for _, r := range s.Refunds() {
		st.Refunds[r.Status]++
	}
	return st
}

// Requests counts API requests by route name (RouteNames).
func (s *Server) Requests() map[string]int64 {
	m := make(map[string]int64, numRoutes)
	for rt := range numRoutes {
		m[RouteNames[rt]] = s.stats.requests[rt].Load()
	}
	return m
}
