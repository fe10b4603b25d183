// Package sim is the simulator's core, which its APIs (refund/sim/stripesim,
// paypalsim, adyensim) share: the fault knobs and their draws, the
// idempotency keys, the create path, the error shape, the gateway's
// answers, latency, requests behind a gateway timeout and the counters.
package sim

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Core is the state the APIs of one simulator share; safe for concurrent use.
type Core struct {
	seed   uint64
	faults atomic.Pointer[Faults]
	seq    atomic.Uint64 // arrival number of API requests, for fault draws

	// Keys holds every API's idempotency keys; Count, their counters.
	Keys  *KeyStore
	Count Counters

	closing   chan struct{} // closed by CutLatency
	closeOnce sync.Once

	routes sync.Map // route name: *atomic.Int64, its requests

	// Requests behind a gateway timeout, which Settle waits for.
	bgMu     sync.Mutex
	bg       Gauge
	bgClosed bool
}

// NewCore makes the core with the knobs f (validated) and the draws' seed.
func NewCore(seed int64, f Faults) *Core {
	c := &Core{seed: uint64(seed), Keys: NewKeyStore(), closing: make(chan struct{})}
	c.faults.Store(&f)
	return c
}

// Faults are the knobs in force; the caller must not modify them.
func (c *Core) Faults() *Faults { return c.faults.Load() }

// StoreFaults replaces the knobs for requests that arrive from now on.
func (c *Core) StoreFaults(f Faults) { c.faults.Store(&f) }

// Arrive numbers an API request and returns the knobs it keeps to its end.
func (c *Core) Arrive() (seq uint64, f *Faults) { return c.seq.Add(1), c.faults.Load() }

// Hit reports whether request seq is one of the share that knob k hits.
func (c *Core) Hit(share float64, seq uint64, k Knob) bool {
	return share > 0 && Draw(c.seed, seq, k) < share
}

// Draw is the draw of knob k for seq (jitter, or a draw per event).
func (c *Core) Draw(seq uint64, k Knob) float64 { return Draw(c.seed, seq, k) }

// Pause waits out the injected latency of request seq, or until Close.
func (c *Core) Pause(f *Faults, seq uint64) {
	d := f.Latency
	if f.LatencyJitter > 0 {
		d += time.Duration(Draw(c.seed, seq, KnobJitter) * float64(f.LatencyJitter))
	}
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-c.closing:
		t.Stop()
	}
}

// CutLatency cuts injected latency short from now on: the simulator closes.
func (c *Core) CutLatency() { c.closeOnce.Do(func() { close(c.closing) }) }

// StopBackground makes later requests finish in their handler, so Settle
// cannot miss one.
func (c *Core) StopBackground() {
	c.bgMu.Lock()
	c.bgClosed = true
	c.bgMu.Unlock()
}

// GoBackground runs fn on its own goroutine for Settle to wait for, unless
// StopBackground was called (then false).
func (c *Core) GoBackground(fn func()) bool {
	c.bgMu.Lock()
	defer c.bgMu.Unlock()
	if c.bgClosed {
		return false
	}
	c.bg.Add(1)
	go func() {
		defer c.bg.Add(-1)
		fn()
	}()
	return true
}

// Settle waits until every request a gateway timeout answered early has
// finished, or ctx ends.
func (c *Core) Settle(ctx context.Context) error { return c.bg.Wait(ctx) }

// Flush is Settle, then each of waits in turn, until one fails or ctx ends.
func (c *Core) Flush(ctx context.Context, waits ...func(context.Context) error) error {
	err := c.Settle(ctx)
	for _, wait := range waits {
		if err == nil && wait != nil {
			err = wait(ctx)
		}
	}
	return err
}

// BackgroundRunning is how many requests run on behind a gateway timeout.
func (c *Core) BackgroundRunning() int64 { return c.bg.N() }

// Route is the request counter of the route named name, every API's alike.
func (c *Core) Route(name string) *atomic.Int64 {
	n, _ := c.routes.LoadOrStore(name, new(atomic.Int64))
	return n.(*atomic.Int64)
}

// Handle routes pattern to fn, counting and numbering its requests.
func (c *Core) Handle(mux *http.ServeMux, pattern string, fn func(w http.ResponseWriter, r *http.Request, seq uint64, f *Faults)) {
	n := c.Route(pattern)
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		seq, f := c.Arrive()
		fn(w, r, seq, f)
	})
}

// Requests counts every API's requests by route name.
func (c *Core) Requests() map[string]int64 {
	m := make(map[string]int64)
	c.routes.Range(func(name, n any) bool {
		m[name.(string)] = n.(*atomic.Int64).Load()
		return true
	})
	return m
}

// Gauge counts work in flight, and lets callers wait until there is none.
type Gauge struct {
	mu   sync.Mutex
	n    int64
	idle chan struct{} // closed when n drops to zero; nil if nobody waits
}

// Add adds d to the work in flight.
func (g *Gauge) Add(d int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n += d; g.n == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
}

// N is the work in flight.
func (g *Gauge) N() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

// Wait waits until no work is in flight, or ctx ends.
func (g *Gauge) Wait(ctx context.Context) error {
	g.mu.Lock()
	if g.n == 0 {
		g.mu.Unlock()
		return nil
	}
	if g.idle == nil {
		g.idle = make(chan struct{})
	}
	idle := g.idle
	g.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Counters count what every API did: a concept of all (a refund made, a
// 429, a replay) has one counter. Each API counts its routes itself.
type Counters struct {
	RefundsCreated     atomic.Int64 // refunds made by the API (not seeded)
	RefundsRefused     atomic.Int64 // creations refused for the payment's state
	RateLimited        atomic.Int64 // 429s, drawn or from the rate limits
	ErrorsBefore       atomic.Int64 // injected 500s before the commit
	ErrorsAfter        atomic.Int64 // injected 500s after the commit
	Dropped            atomic.Int64 // connections closed after a commit
	Replayed           atomic.Int64 // answers given again from a key
	KeyInUse           atomic.Int64 // 409s: the key's first request still runs
	Unauthorized       atomic.Int64 // 401s
	InvalidRequests    atomic.Int64 // requests refused for their parameters
	GatewayTimeouts    atomic.Int64 // gateway answers while the request went on
	GatewayErrorsAfter atomic.Int64 // gateway answers after the commit
}

// Knob names one independent draw of a request. New knobs go at the end:
// renumbering one would change the faults of every recorded seed.
type Knob uint64

const (
	KnobRateLimit Knob = iota + 1
	KnobJitter
	KnobErrorBeforeCommit
	KnobErrorAfterCommit
	KnobDropAfterCommit
	KnobRequiresAction
	KnobGatewayTimeout
	KnobGatewayErrorAfterCommit
	KnobPayPalPending
	KnobPayPalFailed
	KnobAdyenRefundFailed
	KnobAdyenRefundFailedLater
	KnobAdyenReversed
	KnobAdyenNotifyJitter
	KnobAdyenNotifyDuplicate
	KnobAdyenNotifyFail
	KnobStripePending
	KnobStripeFailed
	KnobStripeEventsJitter
	KnobStripeEventsDuplicate
	KnobStripeEventsReorder
	KnobStripeEventsForged
	KnobStripeEventsForgedKind
	KnobPayPalEventsDuplicate
	KnobPayPalEventsReorder
	KnobPayPalEventsForged
	KnobPayPalEventsForgedKind
)

// Draw is a number in [0, 1) of the seed, arrival number and knob alone.
func Draw(seed, seq uint64, k Knob) float64 {
	x := seed ^ (seq * 0x9e3779b97f4a7c15) ^ (uint64(k) * 0xd1b54a32d192ed03)
	// splitmix64 finalizer: good avalanche from structured inputs.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}
