package stripesim

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/refundkit/refundkit/refund/sim"
)

// FailureReasonPendingFailed is the failure_reason of a pending refund
// that settles failed.
const FailureReasonPendingFailed = "expired_or_canceled_card"

// settler settles pending refunds when due, on a goroutine of its own
// (started by the first), so their events go out with no request to see
// them; a request settles what is due first, so it sees the status as of
// now whatever the goroutine's timing.
type settler struct {
	mu        sync.Mutex
	queue     []*refund // by settleAt, then number
	closed    bool
	scheduled sim.Gauge // refunds queued, or settling

	start sync.Once
	wake  chan struct{}
	stop  chan struct{}
	done  chan struct{}
}

// schedule queues re, pending, to settle at re.settleAt.
func (s *Server) schedule(re *refund) {
	st := &s.settles
	st.mu.Lock()
	if st.closed {
		st.mu.Unlock()
		return
	}
	i, _ := slices.BinarySearchFunc(st.queue, re, func(a, b *refund) int {
		return cmp.Or(a.settleAt.Compare(b.settleAt), cmp.Compare(a.seq, b.seq))
	})
	st.queue = slices.Insert(st.queue, i, re)
	st.scheduled.Add(1)
	st.mu.Unlock()
	st.start.Do(func() {
		st.wake, st.stop, st.done = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
		go s.runSettler()
	})
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// due takes the refunds due at now off the queue, and how long until the
// next one is due (-1: none queued).
func (st *settler) due(now time.Time) ([]*refund, time.Duration) {
	st.mu.Lock()
	defer st.mu.Unlock()
	n := 0
	for n < len(st.queue) && !now.Before(st.queue[n].settleAt) {
		n++
	}
	out := slices.Clone(st.queue[:n])
	st.queue = slices.Delete(st.queue, 0, n)
	if len(st.queue) == 0 {
		return out, -1
	}
	return out, st.queue[0].settleAt.Sub(now)
}

// settleDue settles every refund due by now; how long until the next.
func (s *Server) settleDue() time.Duration {
	s.settles.mu.Lock()
	empty := len(s.settles.queue) == 0
	s.settles.mu.Unlock()
	if empty { // the common case: no clock read, no allocation
		return -1
	}
	due, wait := s.settles.due(s.now())
	for _, re := range due {
		s.settle(re)
	}
	return wait
}

func (s *Server) runSettler() {
	st := &s.settles
	defer close(st.done)
	for sim.Sleep(s.settleDue(), st.wake, st.stop) {
	}
}

// closeSettler stops settling: the refunds not yet due stay pending.
func (s *Server) closeSettler() {
	st := &s.settles
	st.mu.Lock()
	st.closed = true
	st.mu.Unlock()
	st.start.Do(func() {}) // none can start from now on
	if st.stop != nil {
		select {
		case <-st.stop:
		default:
			close(st.stop)
		}
		<-st.done
	}
}

// settle moves pending re to its final status and tells of it as Stripe
// does: refund.updated, refund.failed if it failed, charge.refund.updated.
func (s *Server) settle(re *refund) {
	defer s.settles.scheduled.Add(-1) // after the events are queued: FlushEvents waits for both
	ch := re.ch
	ch.mu.Lock()
	if *re.status.Load() != StatusPending {
		ch.mu.Unlock()
		return
	}
	final := re.final
	re.status.Store(&final)
	if !countsAgainstCharge(final) {
		ch.AmountRefunded -= re.Amount
	}
	obj := re.object(false)
	ch.mu.Unlock()
	if s.events == nil {
		return
	}
	f, now := s.core.Faults(), s.now()
	prev := map[string]any{"status": StatusPending}
	s.events.send(f, EventRefundUpdated, obj, prev, eventRequest{}, now, func() { s.told(re) })
	if final == StatusFailed {
		s.events.send(f, EventRefundFailed, obj, nil, eventRequest{}, now, nil)
	}
	s.events.send(f, EventChargeRefundUpdated, obj, prev, eventRequest{}, now, nil)
}

// told notes that a receiver accepted re's final refund.updated.
func (s *Server) told(re *refund) {
	if re.told.CompareAndSwap(false, true) {
		s.untold.Add(-1)
	}
}

// madePending fixes how new pending refund re settles under the knobs f
// of request seq, and schedules it; the caller holds re.ch.mu.
func (s *Server) madePending(re *refund, f *Faults, seq uint64) {
	re.final = StatusSucceeded
	if s.core.Hit(f.StripeFailedShare, seq, sim.KnobStripeFailed) {
		re.final, re.failureReason = StatusFailed, FailureReasonPendingFailed
	}
	s.untold.Add(1)
	if f.StripePendingFor > 0 {
		re.settleAt = s.now().Add(f.StripePendingFor)
		s.schedule(re)
	}
}
