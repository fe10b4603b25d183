package sim

import (
	"cmp"
	"context"
	"net/http"
	"sync/atomic"
	"time"
)

// EventCounts are what every API's webhook events count; each API's
// event stats embed them first.
type EventCounts struct {
	// Sent are events made; Queued, their deliveries (duplicates
	// included, forged ones not); Delivered, those a receiver accepted.
	Sent      int64 `json:"sent"`
	Queued    int64 `json:"queued"`
	Delivered int64 `json:"delivered"`
	// Pending deliveries are queued or in flight (forged ones included).
	Pending int64 `json:"pending"`
	// Retries are posts not accepted, sent again after backoff.
	Retries    int64 `json:"retries"`
	Duplicates int64 `json:"duplicates"`
	Reordered  int64 `json:"reordered"`
	// Forged are extra deliveries that must not verify; ForgedAccepted,
	// those a receiver answered 2xx anyway: it should be 0.
	Forged         int64 `json:"forged"`
	ForgedAccepted int64 `json:"forged_accepted"`
}

// Events sends an API's webhook events through a Notifier, each posted
// until a receiver answers 2xx. A nil *Events sends nothing.
type Events struct {
	core *Core
	out  *Notifier

	made, duplicates, reordered, forged, forgedOK atomic.Int64
}

// EventKnobs are the draws of an API's event deliveries.
type EventKnobs struct {
	ReorderShare, ForgedShare, DuplicateShare float64
	ReorderDelay                              time.Duration
	Reorder, Forged, ForgedKind, Duplicate    Knob
}

// NewEvents starts a sender of events to url, four posts at once, the
// first resend after backoff (0: 50ms), doubling up to maxBackoff (0: 5s).
func NewEvents(core *Core, url string, backoff, maxBackoff time.Duration) *Events {
	backoff = cmp.Or(backoff, 50*time.Millisecond)
	maxBackoff = cmp.Or(maxBackoff, max(5*time.Second, backoff))
	return &Events{core: core, out: NewNotifier(NotifierConfig{URL: url, Backoff: backoff, MaxBackoff: maxBackoff,
		Accepted: func(status int, _ []byte) bool { return status >= 200 && status < 300 }})}
}

// Next numbers a new event, from 1.
func (e *Events) Next() int64 { return e.made.Add(1) }

// Send queues event k's body, due at due or, drawn, ReorderDelay later so
// later events overtake it. sign sets an attempt's headers (wrong: signed
// with a key no receiver has); a forgery, drawn, is that or the body
// tampered by swaps, and goes first so it cannot spoil the real delivery.
// done, if set, is told once a receiver accepts the real one.
func (e *Events) Send(k int64, due time.Time, body []byte, kn EventKnobs, sign func(h http.Header, wrong bool), swaps [][2]string, done func()) {
	seq := uint64(k)
	if e.core.Hit(kn.ReorderShare, seq, kn.Reorder) {
		e.reordered.Add(1)
		due = due.Add(kn.ReorderDelay)
	}
	real := func() *Delivery {
		d := &Delivery{Due: due, Body: body, Header: func(h http.Header) { sign(h, false) }}
		if done != nil {
			d.Done = func(bool) { done() }
		}
		return d
	}
	if e.core.Hit(kn.ForgedShare, seq, kn.Forged) {
		e.forged.Add(1)
		if e.core.Draw(seq, kn.ForgedKind) < 0.5 {
			e.out.Enqueue(Forged(due, body, func(h http.Header) { sign(h, true) }, &e.forgedOK))
		} else {
			e.out.Enqueue(Forged(due, Tamper(body, swaps...), func(h http.Header) { sign(h, false) }, &e.forgedOK))
		}
	}
	e.out.Enqueue(real())
	if e.core.Hit(kn.DuplicateShare, seq, kn.Duplicate) {
		e.duplicates.Add(1)
		e.out.Enqueue(real())
	}
}

// Counts are the events' counts so far (zero for nil).
func (e *Events) Counts() EventCounts {
	if e == nil {
		return EventCounts{}
	}
	c := e.out.Counts()
	return EventCounts{Sent: e.made.Load(), Queued: c.Queued, Delivered: c.Delivered, Pending: c.Pending, Retries: c.Retries,
		Duplicates: e.duplicates.Load(), Reordered: e.reordered.Load(), Forged: e.forged.Load(), ForgedAccepted: e.forgedOK.Load()}
}

// Flush waits until every event made is delivered, or ctx ends.
func (e *Events) Flush(ctx context.Context) error {
	if e == nil {
		return nil
	}
	return e.out.Flush(ctx)
}

// Close stops sending; what is not yet accepted stays pending.
func (e *Events) Close() {
	if e != nil {
		e.out.Close()
	}
}
