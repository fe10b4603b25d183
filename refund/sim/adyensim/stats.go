package adyensim

import (
	"context"
	"sync/atomic"
)

// counters are Adyen's own statistics; the ones shared with the other
// APIs' routes (refunds created, 429s, 500s, replays...) are the core's.
type counters struct {
	requests            [numRoutes]atomic.Int64
	created             atomic.Int64
	replayed            atomic.Int64
	replayedOtherParams atomic.Int64
	keyInUse            atomic.Int64
}

// Stats counts what Adyen's routes did, beside the simulator's shared
// counters.
type Stats struct {
	// RefundsCreated counts refunds received (201), refused ones included;
	// Replayed, answers given again from an Idempotency-Key, of which
	// ReplayedOtherParams for a request whose body or path differed from
	// the first's; KeyInUse, 704s while the key's first request ran.
	RefundsCreated      int64 `json:"refunds_created"`
	Replayed            int64 `json:"replayed"`
	ReplayedOtherParams int64 `json:"replayed_other_params"`
	KeyInUse            int64 `json:"key_in_use"`
	// Refunds counts Adyen's refunds by their status now: received,
	// refunded, refused, failed, reversed.
	Refunds map[string]int64 `json:"refunds"`
	// Notifications are the webhook's counts (all zero without a notify
	// URL).
	Notifications NotifyStats `json:"notifications"`
}

// NotifyStats count the notifications: deliveries, each the post of one
// item until it is accepted.
type NotifyStats struct {
	// Queued counts deliveries queued, duplicates included; Delivered,
	// those a receiver accepted; Pending, those not yet (queued, waiting
	// for the refund's one before, or in flight).
	Queued    int64 `json:"queued"`
	Delivered int64 `json:"delivered"`
	Pending   int64 `json:"pending"`
	// Retries counts posts that were not accepted and are made again:
	// the receiver's refusals and FailedByKnob's (adyen_notify_fail_share).
	Retries      int64 `json:"retries"`
	FailedByKnob int64 `json:"failed_by_knob"`
	// Duplicates counts notifications queued twice
	// (adyen_notify_duplicate_share).
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

// Flush waits until every notification queued so far has been accepted,
// or ctx ends: first for the requests still running behind a gateway
// timeout (they may queue some), then for the queue. Tests and the demo
// wait on it instead of sleeping.
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
