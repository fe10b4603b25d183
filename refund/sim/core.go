// Package sim is what the simulator's APIs (Stripe's, refund/sim/stripesim,
// PayPal's, refund/sim/paypalsim, and Adyen's, refund/sim/adyensim) share, so that
// each concept has one home: the fault knobs and their draws, the
// idempotency-key store, the requests that go on behind a gateway's
// timeout, the injected latency, the gateway's own answers and the
// counters of faults and refunds.
package sim

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Core is the state one simulator process shares between its APIs. It is
// safe for concurrent use.
type Core struct {
	seed   uint64
	faults atomic.Pointer[Faults]
	seq    atomic.Uint64 // arrival number of API requests, for fault draws

	// Keys holds both APIs' idempotency keys; Count, their counters.
	Keys  *KeyStore
	Count Counters

	closing   chan struct{} // closed by CutLatency
	closeOnce sync.Once

	// Requests still running behind a gateway timeout: Settle waits for
	// them; once bgClosed none start in the background.
	bgMu     sync.Mutex
	bg       Gauge
	bgClosed bool
}

// NewCore makes the shared state with the knobs f (validated by the caller)
// and the seed of every fault draw.
func NewCore(seed int64, f Faults) *Core {
	c := &Core{seed: uint64(seed), Keys: NewKeyStore(), closing: make(chan struct{})}
	c.faults.Store(&f)
	return c
}

// Faults are the knobs in force; the caller must not modify them.
func (c *Core) Faults() *Faults { return c.faults.Load() }

// StoreFaults replaces the knobs for requests that arrive from now on.
func (c *Core) StoreFaults(f Faults) { c.faults.Store(&f) }

// Arrive numbers an API request and returns the knobs in force for it: a
// request keeps them to its end, whatever SetFaults does meanwhile.
func (c *Core) Arrive() (seq uint64, f *Faults) {
	return c.seq.Add(1), c.faults.Load()
}

// Hit reports whether request seq is one of the share that knob k hits.
func (c *Core) Hit(share float64, seq uint64, k Knob) bool {
	return share > 0 && Draw(c.seed, seq, k) < share
}

// Draw is the draw of knob k for seq under the core's seed: for knobs that
// are not a share (jitter), or that draw per event rather than per request.
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

// CutLatency cuts injected latency short, now and from now on: the
// simulator is closing.
func (c *Core) CutLatency() { c.closeOnce.Do(func() { close(c.closing) }) }

// StopBackground makes requests that arrive from now on (a handler still
// running after Close) finish in their handler, so Settle cannot miss one.
func (c *Core) StopBackground() {
	c.bgMu.Lock()
	c.bgClosed = true
	c.bgMu.Unlock()
}

// GoBackground runs fn on a goroutine of its own that Settle waits for,
// unless StopBackground was called: then it reports false and runs nothing.
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

// Settle waits until every request that a gateway timeout answered early
// has finished (its refund committed and its answer saved under its key),
// or ctx ends.
func (c *Core) Settle(ctx context.Context) error { return c.bg.Wait(ctx) }

// BackgroundRunning is how many requests run on behind a gateway timeout.
func (c *Core) BackgroundRunning() int64 { return c.bg.N() }

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
