package main

// Shared-checkpoint rows where the operator's world moves: the
// checkpoint's server goes down under the workers, the provider misbehaves
// for all of them, workers are added and removed mid-batch.

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/refundkit/refundkit/refund/sim/stripesim"
)

// serverDown is how a row takes a checkpoint's server down: the kinds
// injected, as the report names them, and the exits a worker may make
// then (it is replaced).
type serverDown struct {
	crash, stop string
	again       []int
}

// restartRow is the row whose server goes down with calls in flight, in
// turn crashed and stopped cleanly, down 0.2 to 1.5 s each time.
func restartRow(d serverDown) func(*rig, sizes) {
	return func(r *rig, sz sizes) { runSharedRestart(r, sz, d) }
}

func runSharedRestart(r *rig, sz sizes, d serverDown) {
	b := r.newSharedBatch(sz.SharedRestartItems, stripesim.Faults{LatencyJitter: time.Millisecond}, r.t.Name, sharedShortLease)
	type down struct {
		snap  recordSnapshot
		crash bool
	}
	downs := make(chan down, sz.SharedRestarts)
	var up sync.RWMutex // held for writing while the server is down
	var crashes, stops atomic.Int64
	marks := newMarks(r, 12, len(b.p.Items), sz.SharedRestarts)
	marks.onCall(func(int64, string) bool {
		if crashes.Load()+stops.Load() >= int64(sz.SharedRestarts) || !up.TryLock() {
			return false
		}
		snap, err := b.cp.snapshot()
		if err != nil {
			up.Unlock()
			return true
		}
		crash := (crashes.Load()+stops.Load())%2 == 0
		if err := b.cp.down(crash); err != nil {
			r.t.Errorf("stop the checkpoint's server: %v", err)
			up.Unlock()
			return true
		}
		if crash {
			crashes.Add(1)
		} else {
			stops.Add(1)
		}
		downs <- down{snap, crash}
		return true
	})
	defer r.sim.OnCreate(nil)

	restarted := make(chan struct{})
	go func() {
		defer close(restarted)
		drng := rand.New(rand.NewPCG(r.seed, 13))
		for dn := range downs {
			time.Sleep(time.Duration(200+drng.IntN(1300)) * time.Millisecond) // how long the server is down: the fault itself
			var err error
			for range 3 {
				if err = b.cp.up(); err == nil {
					break
				}
			}
			if err != nil {
				r.t.Errorf("start the checkpoint's server again: %v", err)
			}
			up.Unlock()
			what := "after a clean shutdown"
			if dn.crash {
				what = "after a crash"
			}
			b.checkKept(dn.snap, what)
		}
	}()
	gate := func() { up.RLock(); up.RUnlock() }
	before, err := b.cp.snapshot()
	r.must(err)
	ends := b.crew(4, "a worker while the checkpoint's server goes down", gate, d.again...)
	marks.over(func() { close(downs) })
	<-restarted
	b.checkKept(before, "at the end")
	r.t.inject(d.crash, int(crashes.Load()))
	r.t.inject(d.stop, int(stops.Load()))
	r.t.note("seed %d: 4 workers, %d items; %d %s and %d %s with calls in flight; workers replaced after %s",
		r.seed, len(b.p.Items), crashes.Load(), d.crash, stops.Load(), d.stop, exitsText(ends))
	b.finish(nil)
}

// marks are the create calls a row strikes at, drawn within a gap that
// spreads n strikes over two thirds of the batch.
type marks struct {
	r        *rig
	mu       sync.Mutex
	rng      *rand.Rand
	gap, at  int64
	finished bool
}

func newMarks(r *rig, stream uint64, items, n int) *marks {
	m := &marks{r: r, rng: rand.New(rand.NewPCG(r.seed, stream)), gap: int64(max(2, items*2/3/(n+1)))}
	m.at = 1 + m.rng.Int64N(m.gap)
	return m
}

// onCall installs the create hook: strike runs, under the lock, for each
// call at or past the mark until the row is over; when it returns true the
// next mark is drawn.
func (m *marks) onCall(strike func(n int64, key string) bool) {
	m.r.sim.OnCreate(func(n int64, key string) {
		m.mu.Lock()
		defer m.mu.Unlock()
		if !m.finished && n >= m.at && strike(n, key) {
			m.at = n + 1 + m.rng.Int64N(m.gap)
		}
	})
}

// again makes the next call a strike's.
func (m *marks) again() {
	m.mu.Lock()
	m.at = 0
	m.mu.Unlock()
}

// over ends the strikes, running then under the lock.
func (m *marks) over(then func()) {
	m.mu.Lock()
	m.finished = true
	then()
	m.mu.Unlock()
}

// exitsText says how many workers exited with each code, in order.
func exitsText(ends map[int]int) string {
	codes := slices.Sorted(maps.Keys(ends))
	if len(codes) == 0 {
		return "no exit but 0"
	}
	var parts []string
	for _, c := range codes {
		parts = append(parts, fmt.Sprintf("%d exit %d", ends[c], c))
	}
	return strings.Join(parts, ", ")
}

func runSharedFaults(r *rig, sz sizes) {
	faults := stripesim.Faults{
		ErrorBeforeCommitShare: 0.1,
		ErrorAfterCommitShare:  0.1,
		DropAfterCommitShare:   0.1,
		GatewayTimeoutShare:    0.1,
		RateLimitShare:         0.2,
		LatencyJitter:          2 * time.Millisecond,
	}
	b := r.newSharedBatch(sz.SharedFaultItems, faults, r.t.Name, sharedLease)
	before, err := b.cp.snapshot()
	r.must(err)
	faultRounds, expiries := 0, 0
	for range sz.FaultRounds {
		faultRounds++
		codes := b.round(4, "a worker under faults", nil, 0, exitFailed, exitStripe)
		// Keys expire between rounds, as Stripe's do after 24 hours: the
		// next round must find the refunds of items left in doubt by
		// looking them up, not by a replay.
		if r.sim.ForgetKeys() > 0 {
			expiries++
		}
		if allZero(codes) {
			break
		}
	}
	r.calm()
	extra := 0
	if codes := b.round(4, "a worker after the faults stopped", nil, 0, exitFailed); !allZero(codes) {
		b.round(4, "a worker with --resend-after-500", []string{"--resend-after-500"}, 0)
		extra++
	}
	b.checkKept(before, "after the rounds")
	st := r.sim.Stats()
	r.t.injectFaults(st, true)
	r.t.inject("429 answers", int(st.RateLimited))
	r.t.inject("key expiries", expiries)
	r.t.note("seed %d: 4 workers, %d items; %d rounds with faults (keys forgotten after each), 1 after, %d with --resend-after-500; %d 500s before and %d after commit, %d answers dropped, %d gateway 504s, %d 429s; %d answers replayed, %d 409s",
		r.seed, len(b.p.Items), faultRounds, extra, st.ErrorsBeforeCommit, st.ErrorsAfterCommit, st.Dropped, st.GatewayTimeouts, st.RateLimited, st.Replayed, st.KeyInUse)
	b.finish(nil)
}

// round runs n workers at once with extra flags and waits for them all;
// each must exit with one of want. It returns their exit codes.
func (b *sharedBatch) round(n int, what string, extra []string, want ...int) []int {
	ws := make([]*sharedWorker, n)
	for k := range ws {
		ws[k] = b.start(extra...)
	}
	codes := make([]int, n)
	for k, w := range ws {
		<-w.done
		b.r.expectExit(w.proc, what, want...)
		codes[k] = w.Code
	}
	return codes
}

func allZero(codes []int) bool {
	return !slices.ContainsFunc(codes, func(c int) bool { return c != 0 })
}

func runSharedReshard(r *rig, sz sizes) {
	b := r.newSharedBatch(sz.SharedReshardItems, stripesim.Faults{LatencyJitter: time.Millisecond}, r.t.Name, sharedLease)
	total := int64(len(b.p.Items))
	growAt, shrinkAt := max(1, total/5), max(2, total/2)
	grow, shrink := make(chan struct{}), make(chan struct{})
	r.sim.OnCreate(func(n int64, _ string) {
		switch n {
		case growAt:
			close(grow)
		case shrinkAt:
			close(shrink)
		}
	})
	defer r.sim.OnCreate(nil)
	before, err := b.cp.snapshot()
	r.must(err)

	first := b.start()
	select {
	case <-grow:
	case <-first.done:
	}
	added := []*sharedWorker{b.start(), b.start(), b.start()}
	select {
	case <-shrink:
	case <-first.done:
	}
	termed, killed := added[0], added[1]
	termed.Cmd.Process.Signal(syscall.SIGTERM)
	killed.Cmd.Process.Kill()
	removed := 0
	for _, w := range []*sharedWorker{first, added[2]} {
		<-w.done
		r.expectExit(w.proc, "a worker left after the others were removed", 0)
	}
	<-termed.done
	// -15: the signal came while the worker was still starting, before it
	// took signals (a busy machine): the kernel ended it, as a kill does,
	// and its leases pass on as a killed worker's do.
	if r.expectExit(termed.proc, "a worker stopped with SIGTERM", exitTerminated, 0, -int(syscall.SIGTERM)) && termed.Code == exitTerminated {
		removed++
		if n := b.claimsOf(termed.name); n > 0 {
			r.t.Errorf("the worker stopped with SIGTERM left %d claims behind", n)
		}
	}
	<-killed.done
	if r.expectExit(killed.proc, "a worker killed with SIGKILL", -int(syscall.SIGKILL), 0) && killed.Code != 0 {
		removed++
	}
	// The two left took every item the others left: a worker exits 0
	// only once nothing of the batch is left.
	if n, err := b.cp.unrefunded(b.p.Batch); err != nil || n > 0 {
		r.t.Errorf("the workers left exited 0 with %d items not refunded (%v)", n, err)
	}
	last := b.start()
	<-last.done
	r.expectExit(last.proc, "a worker started after the batch was done", 0)
	b.checkKept(before, "after the workers came and went")
	r.t.inject("workers added mid-batch", 3)
	r.t.inject("workers removed mid-batch (SIGTERM, SIGKILL)", removed)
	r.t.note("seed %d: %d items; 1 worker, 4 from call %d, 2 from call %d (one stopped with SIGTERM: exit %d, one killed: exit %d); %d refunds created",
		r.seed, len(b.p.Items), growAt, shrinkAt, termed.Code, killed.Code, r.sim.Stats().RefundsCreated)
	b.finish(nil)
}

// claimsOf counts the batch's items whose live claim is worker's.
func (b *sharedBatch) claimsOf(worker string) int {
	n := 0
	for _, it := range b.p.Items {
		c, err := b.cp.claim(b.p.Batch, it.Item.Item)
		if err != nil {
			b.r.t.Errorf("the claim of item %s: %v", it.Item.Item, err)
			continue
		}
		if c.Worker == worker {
			n++
		}
	}
	return n
}
