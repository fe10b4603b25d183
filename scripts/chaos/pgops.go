package main

// PostgreSQL rows where the operator's world moves: the database goes down
// under the workers, the provider misbehaves for all of them, workers are
// added and removed mid-batch.

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/refundkit/refundkit/refund/stripesim"
)

const whatPGDBRestart = "Four `refund -j 8` workers on one PostgreSQL checkpoint (`--lease 2s`); inside the simulator's create hook, with calls in flight, the database goes down: a crash (`pg_ctl stop -m immediate`, no checkpoint: WAL recovery on start) and a fast shutdown, in turn. " +
	"It stays down for 0.2 to 1.5 s, then starts again on the same data. A worker whose checkpoint write or claim fails halts with exit 3, having sent nothing after the failed write; one that was waiting may go on. Halted workers are replaced once the database is up, until every worker has exited 0. " +
	"Every record the database held when it went down must be there after it came back, and at the end every refund at the simulator recorded as refunded."

func runPGDBRestart(r *rig, sz sizes) {
	b := r.newPGBatch(sz.PGRestartItems, stripesim.Faults{LatencyJitter: time.Millisecond}, "pg-dbrestart", pgShortLease)
	type down struct {
		snap  pgSnapshot
		crash bool
	}
	downs := make(chan down, sz.PGRestarts)
	var up sync.RWMutex // held for writing while the database is down
	var crashes, stops atomic.Int64
	rng := rand.New(rand.NewPCG(r.seed, 12))
	gap := int64(max(2, len(b.p.Items)*2/3/(sz.PGRestarts+1)))
	var mu sync.Mutex
	mark, over := 1+rng.Int64N(gap), false
	r.sim.OnCreate(func(n int64, _ string) {
		mu.Lock()
		defer mu.Unlock()
		if over || n < mark || crashes.Load()+stops.Load() >= int64(sz.PGRestarts) || !up.TryLock() {
			return
		}
		mark = n + 1 + rng.Int64N(gap)
		snap, err := b.snapshot()
		if err != nil {
			up.Unlock()
			return
		}
		crash := (crashes.Load()+stops.Load())%2 == 0
		stop := b.srv.Down
		if crash {
			stop = b.srv.Crash
		}
		if err := stop(); err != nil {
			r.t.Errorf("stop the database: %v", err)
			up.Unlock()
			return
		}
		if crash {
			crashes.Add(1)
		} else {
			stops.Add(1)
		}
		downs <- down{snap, crash}
	})
	defer r.sim.OnCreate(nil)

	restarted := make(chan struct{})
	go func() {
		defer close(restarted)
		drng := rand.New(rand.NewPCG(r.seed, 13))
		for d := range downs {
			time.Sleep(time.Duration(200+drng.IntN(1300)) * time.Millisecond) // how long the database is down: the fault itself
			var err error
			for range 3 {
				if err = b.srv.Up(); err == nil {
					break
				}
			}
			if err != nil {
				r.t.Errorf("start the database again: %v", err)
			}
			b.pool.Reset()
			up.Unlock()
			what := "after a fast shutdown"
			if d.crash {
				what = "after a crash"
			}
			b.checkKept(d.snap, what)
		}
	}()
	gate := func() { up.RLock(); up.RUnlock() }
	before, err := b.snapshot()
	r.must(err)
	ends := b.crew(4, "a worker while the database goes down", gate, exitJournal)
	mu.Lock()
	over = true
	close(downs)
	mu.Unlock()
	<-restarted
	b.checkKept(before, "at the end")
	r.t.inject("database crashes (immediate stop)", int(crashes.Load()))
	r.t.inject("database fast shutdowns", int(stops.Load()))
	r.t.note("seed %d: 4 workers, %d items; the database crashed %d times and was shut down %d times with calls in flight; %d workers halted with exit 3 and were replaced",
		r.seed, len(b.p.Items), crashes.Load(), stops.Load(), ends[exitJournal])
	b.finish(nil)
}

const whatPGFaults = "Four `refund -j 8` workers on one PostgreSQL checkpoint against a simulator that answers a share of refund creations 500 without a refund (0.1), 500 after committing it (0.1), commits and drops the answer (0.1), answers a gateway's 504 at once while the request goes on behind it (0.1), and answers a fifth of all requests 429. " +
	"Rounds of four workers run until one round ends with every worker at exit 0 (exit 1, items left in doubt, and exit 6, the provider not answering, are accepted on the way); the simulator forgets every idempotency key after each round, so items left in doubt are found by their look-up, not by a replay. Then the faults stop, a round runs, and if items Stripe answered its own 500 for are still in doubt (exit 1), a round with `--resend-after-500` must end them all at exit 0."

func runPGFaults(r *rig, sz sizes) {
	faults := stripesim.Faults{
		ErrorBeforeCommitShare: 0.1,
		ErrorAfterCommitShare:  0.1,
		DropAfterCommitShare:   0.1,
		GatewayTimeoutShare:    0.1,
		RateLimitShare:         0.2,
		LatencyJitter:          2 * time.Millisecond,
	}
	b := r.newPGBatch(sz.PGFaultItems, faults, "pg-faults", pgLease)
	before, err := b.snapshot()
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
	r.t.inject("500 before commit", int(st.ErrorsBeforeCommit))
	r.t.inject("500 after commit", int(st.ErrorsAfterCommit))
	r.t.inject("answers dropped after commit", int(st.Dropped))
	r.t.inject("gateway 504s while the refund went on", int(st.GatewayTimeouts))
	r.t.inject("429 answers", int(st.RateLimited))
	r.t.inject("key expiries", expiries)
	r.t.note("seed %d: 4 workers, %d items; %d rounds with faults (keys forgotten after each), 1 after, %d with --resend-after-500; %d 500s before and %d after commit, %d answers dropped, %d gateway 504s, %d 429s; %d answers replayed, %d 409s",
		r.seed, len(b.p.Items), faultRounds, extra, st.ErrorsBeforeCommit, st.ErrorsAfterCommit, st.Dropped, st.GatewayTimeouts, st.RateLimited, st.Replayed, st.KeyInUse)
	b.finish(nil)
}

// round runs n workers at once with extra flags and waits for them all;
// each must exit with one of want. It returns their exit codes.
func (b *pgBatch) round(n int, what string, extra []string, want ...int) []int {
	ws := make([]*pgWorker, n)
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

const whatPGReshard = "Workers come and go on one PostgreSQL checkpoint (`--lease 3s`, `-j 8` each): one worker starts the batch; at a fifth of the refund calls three more join it; at half, one of those is stopped with SIGTERM (it must finish its calls in flight, give its claims back and exit 143) and another is killed with SIGKILL (its items pass to the others when its lease runs out). " +
	"The two left must finish the batch with exit 0, and a worker started after them must find nothing left and exit 0."

func runPGReshard(r *rig, sz sizes) {
	b := r.newPGBatch(sz.PGReshardItems, stripesim.Faults{LatencyJitter: time.Millisecond}, "pg-reshard", pgLease)
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
	before, err := b.snapshot()
	r.must(err)

	first := b.start()
	select {
	case <-grow:
	case <-first.done:
	}
	added := []*pgWorker{b.start(), b.start(), b.start()}
	select {
	case <-shrink:
	case <-first.done:
	}
	termed, killed := added[0], added[1]
	termed.Cmd.Process.Signal(syscall.SIGTERM)
	killed.Cmd.Process.Kill()
	removed := 0
	for _, w := range []*pgWorker{first, added[2]} {
		<-w.done
		r.expectExit(w.proc, "a worker left after the others were removed", 0)
	}
	<-termed.done
	if r.expectExit(termed.proc, "a worker stopped with SIGTERM", exitTerminated, 0) && termed.Code == exitTerminated {
		removed++
		var n int
		if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM refundkit.items WHERE claimed_by = $1`, termed.name).Scan(&n); err != nil || n > 0 {
			r.t.Errorf("the worker stopped with SIGTERM left %d claims behind (%v)", n, err)
		}
	}
	<-killed.done
	if r.expectExit(killed.proc, "a worker killed with SIGKILL", -int(syscall.SIGKILL), 0) && killed.Code != 0 {
		removed++
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
