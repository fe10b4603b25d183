package adyensim

import (
	"context"
	"sync/atomic"
)

// counters are Adyen's own statistics; the shared ones are the core's.
type counters struct {
	requests            [numRoutes]atomic.Int64
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
	if err := s.core.Settle(ctx); err != nil {
		return s.NotifyStats(), err
	}
	if s.notes != nil {
		if err := s.notes.flush(ctx); err != nil {
			return s.NotifyStats(), err
		}
	}
	return s.NotifyStats(), nil
}

// Requests counts API requests by route name (RouteNames).
func (s *Server) Requests() map[string]int64 {
	m := make(map[string]int64, numRoutes)
	for rt := range numRoutes {
		m[RouteNames[rt]] = s.stats.requests[rt].Load()
	}
	return m
}
