package natsjs

// Riding out an outage of the servers: an operation the outage failed is
// tried again once the connection is back, for as long as the claim it is for
// lasts by this run's clock (docs/nats.md, "An outage of the servers").

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// link follows the connection: a call in flight when it drops gets no answer,
// so it is ended at once and tried again once the client is connected again.
type link struct {
	mu   sync.Mutex
	lost chan struct{} // closed when the connection drops
	back chan struct{} // closed while connected
}

func newLink() *link {
	back := make(chan struct{})
	close(back)
	return &link{lost: make(chan struct{}), back: back}
}

func (l *link) dropped() {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.lost:
	default:
		close(l.lost)
		l.back = make(chan struct{})
	}
}

func (l *link) restored() {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.back:
	default:
		close(l.back)
		l.lost = make(chan struct{})
	}
}

func (l *link) now() (lost, back chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost, l.back
}

// linkOptions make the client tell the link, and renewLoop, of the
// connection's drops and returns.
func (c *Checkpoint) linkOptions() []nats.Option {
	return []nats.Option{
		nats.DisconnectErrHandler(func(*nats.Conn, error) { c.link.dropped() }),
		nats.ReconnectHandler(func(*nats.Conn) {
			c.link.restored()
			c.Relink() // a renewal the outage missed is owed
		}),
	}
}

// errDropped ends a try in flight when the connection drops: its answer
// would never come.
var errDropped = errors.New("the connection to them dropped")

// unreachable reports an error that says the servers did not answer (or not
// yet, while they start): the operation may be tried again.
func unreachable(err error) bool {
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return false
	case errors.As(err, &apiErr):
		return apiErr.Code == 503 // JetStream not up yet
	}
	for _, e := range []error{errDropped, context.DeadlineExceeded, context.Canceled, nats.ErrTimeout, nats.ErrNoResponders,
		jetstream.ErrNoStreamResponse, nats.ErrConnectionReconnecting, nats.ErrDisconnected, nats.ErrStaleConnection,
		nats.ErrReconnectBufExceeded, nats.ErrNoServers,
		// A pull a server ends as it stops, or as a cluster moves the
		// consumer's leader: the next one is answered elsewhere or later.
		jetstream.ErrServerShutdown, jetstream.ErrConsumerLeadershipChanged} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// retry runs try until it succeeds, fails with an answer of the servers, or
// until() passes with the servers unreachable; it is run once at least.
func (c *Checkpoint) retry(ctx context.Context, until func() time.Time, try func(ctx context.Context) error) error {
	for {
		lost, back := c.link.now()
		tctx, cancelT := context.WithTimeout(ctx, max(min(time.Until(until()), c.Margin()/3), c.Margin()/30))
		actx, cancel := context.WithCancelCause(tctx)
		go func() {
			select {
			case <-lost:
				cancel(errDropped)
			case <-actx.Done():
			}
		}()
		err := try(actx)
		if errors.Is(err, context.Canceled) && errors.Is(context.Cause(actx), errDropped) {
			err = errDropped
		}
		cancel(nil)
		cancelT()
		if !unreachable(err) || ctx.Err() != nil {
			if err == nil {
				c.Answered()
			}
			return err
		}
		c.Unanswered(err)
		// Once connected, a moment more: a server that is starting
		// answers "no responders" for a while.
		end := time.NewTimer(time.Until(until()))
		select {
		case <-back:
			select {
			case <-time.After(c.PollWait()):
			case <-end.C:
			case <-ctx.Done():
			}
		case <-end.C:
		case <-ctx.Done():
		}
		end.Stop()
		if ctx.Err() != nil || !time.Now().Before(until()) {
			return err
		}
	}
}

// claimUntil is how long an operation for cl, begun at start, is tried:
// until its ack-wait may run out at the server, a third of a margin at least.
func (c *Checkpoint) claimUntil(cl *claim, start time.Time) func() time.Time {
	return func() time.Time {
		return slices.MaxFunc([]time.Time{c.LeaseEnd(cl), start.Add(c.Margin() / 3)}, time.Time.Compare)
	}
}

// leaseFrom is how long an operation for no claim in particular, begun at
// start, is tried: a margin.
func (c *Checkpoint) leaseFrom(start time.Time) func() time.Time {
	end := start.Add(c.Margin())
	return func() time.Time { return end }
}

// update writes body as k's value under revision rev, retried through an
// outage.
func (c *Checkpoint) update(ctx context.Context, until func() time.Time, k string, body []byte, rev uint64) (uint64, error) {
	var newRev uint64
	uncertain := false
	err := c.retry(ctx, until, func(ctx context.Context) error {
		r, err := c.kv.Update(ctx, k, body, rev)
		switch {
		case err == nil:
			newRev = r
		case uncertain && errors.Is(err, jetstream.ErrKeyRevisionMismatch):
			e, gerr := c.kv.Get(ctx, k)
			if gerr == nil && bytes.Equal(e.Value(), body) {
				newRev, err = e.Revision(), nil
			} else if unreachable(gerr) {
				err = gerr
			}
		case unreachable(err):
			uncertain = true
		}
		return err
	})
	return newRev, err
}

// getJSON is getJSON retried through an outage.
func (c *Checkpoint) getJSON(ctx context.Context, until func() time.Time, k string, v any) (rev uint64, ok bool, err error) {
	err = c.retry(ctx, until, func(ctx context.Context) error {
		rev, ok, err = getJSON(ctx, c.kv, k, v)
		return err
	})
	return rev, ok, err
}
