package main

import (
	"strings"
	"syscall"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

const whatKill9 = "`refund -j 8` over a batch of thousands of items is killed with SIGKILL again and again. " +
	"Half the kills come from inside the simulator's create hook, with a refund call in flight: the process is gone before the simulator goes on to commit the refund, so the journal holds the intent and not the outcome. " +
	"The other half land at a random time after start (start-up, journal load and torn-tail repair, intents, fsyncs, outcomes). " +
	"Before each run the journal's complete records are snapshotted and the run must leave them byte for byte; a run without kills must then finish with exit 0."

// runKill9 kills refund at random moments until the kill budget is spent,
// then lets it finish.
func runKill9(r *rig, sz sizes) {
	p := r.newBatch(sz.KillItems, stripesim.Faults{}, "kill9")
	j := r.path("j.jsonl")
	inFlight, timed := 0, 0
	r.signalRuns(syscall.SIGKILL, sz.Kills, p, j, func(pr *proc, byHook bool) bool {
		if !r.expectExit(pr, "a run under kill -9", 0, -int(syscall.SIGKILL)) {
			return false
		}
		if byHook {
			inFlight++
		} else {
			timed++
		}
		return true
	})
	r.t.inject("kill -9 with a call in flight", inFlight)
	r.t.inject("kill -9 at a random time", timed)
	st := r.sim.Stats()
	if r.prov.name() == provPayPal {
		r.t.note("seed %d: %d kills (%d with a call in flight) over %d items: %d refund calls, of which %d held a request id; %d answers replayed to a request id sent again, %d 409s while the first was in flight; %d refunds created; %d access tokens",
			r.seed, inFlight+timed, inFlight, len(p.Items), st.Requests[r.prov.createRoute()], r.sim.Creates(), st.Replayed, st.KeyInUse, st.RefundsCreated, st.PayPal.TokensIssued)
	} else {
		r.t.note("seed %d: %d kills (%d with a call in flight) over %d items: %d create calls, of which %d reserved a key and %d were cut mid-body by a kill (refused 400, nothing created); %d in-doubt lookups; %d refunds created",
			r.seed, inFlight+timed, inFlight, len(p.Items), st.Requests[r.prov.createRoute()], r.sim.Creates(), st.InvalidRequests, st.Requests[r.prov.lookupRoute()], st.RefundsCreated)
	}
	r.finish(p, j)
}

const whatSigterm = "A deploy: `refund -j 8` gets SIGTERM mid-batch, from inside the simulator's create hook (a call in flight) or at a random time, and must exit 143 (128 + SIGTERM's 15) having journaled the outcome of every call it sent: " +
	"after each signal, every item the simulator holds a refund for must be journaled as refunded (nothing abandoned in flight). The restart goes on until a run exits 0. " +
	"refund installs its handler first thing, before it opens the journal, so even a SIGTERM during start-up exits 143; one that lands in the instant before (process start) would end it like a kill, killed by the signal rather than exiting: that is accepted and counted, since no call is made before the handler is in place, and the run after it must be as safe as after a kill."

// runSigterm sends SIGTERM mid-batch again and again, then lets the run
// finish.
func runSigterm(r *rig, sz sizes) {
	p := r.newBatch(sz.TermItems, stripesim.Faults{}, "sigterm")
	j := r.path("j.jsonl")
	signals, early := 0, 0
	// The call goes on after the signal: it must be journaled.
	r.signalRuns(syscall.SIGTERM, sz.Terms, p, j, func(pr *proc, _ bool) bool {
		switch pr.Code {
		case exitTerminated:
			signals++
			if !strings.Contains(pr.Stderr.String(), "finishing the calls in flight") {
				r.t.Errorf("after SIGTERM, refund did not say it finishes the calls in flight: %s", firstLines(pr.Stderr.String(), 3))
			}
			r.checkNothingAbandoned(p, j)
			return true
		case -int(syscall.SIGTERM):
			// Signalled before its handler was installed: the process
			// died at once, like a kill -9, and must be as safe.
			early++
			return true
		}
		r.expectExit(pr, "a run under SIGTERM", 0, exitTerminated)
		return false
	})
	if early > 0 {
		r.t.note("seed %d: %d of the SIGTERMs arrived before refund installed its handler, at process start, and ended it like a kill", r.seed, early)
	}
	r.t.inject("SIGTERM", signals+early)
	r.finish(p, j)
}

// signalRuns runs refund over p until a run exits 0, sending sig to runs
// until budget of them count (counted says which). Even rounds are struck
// from inside the create hook, a call in flight; odd ones at a random time
// up to as long as the last hook signal took to come, so it lands anywhere
// from start-up to as far in, whatever the machine's speed. The gap
// spreads the signals over about half the batch. Each run must keep the
// journal's complete records.
func (r *rig) signalRuns(sig syscall.Signal, budget int, p *plan, j string, counted func(pr *proc, byHook bool) bool) {
	s := r.newStriker(sig)
	gap := max(2, len(p.Items)/(budget+1))
	delay := 20 * time.Millisecond
	sent := 0
	for round := 0; ; round++ {
		if round > 3*budget+20 {
			r.fatalf("not done after %d runs", round)
		}
		signalling := sent < budget
		byHook := signalling && round%2 == 0
		snap := crashrig.TakeSnapshot(j)
		started := time.Now()
		pr := r.startRefund(j, p.Path)
		var timer *time.Timer
		switch {
		case byHook:
			s.Arm(r.sim, pr.Proc, r.rng, gap)
		case signalling:
			timer = time.AfterFunc(time.Duration(r.rng.Int64N(int64(delay)+1)), func() { pr.Cmd.Process.Signal(sig) })
		}
		r.wait(pr)
		s.Disarm()
		if timer != nil {
			timer.Stop()
		}
		r.checkKept(snap)
		if pr.Code == 0 {
			return // every item settled
		}
		took := time.Since(started)
		if counted(pr, byHook) {
			sent++
			if byHook {
				delay = took
			}
		}
	}
}

// checkNothingAbandoned: after a SIGTERM, every refund the simulator holds
// for the batch is journaled: the calls in flight were finished and their
// outcomes written before the exit.
func (r *rig) checkNothingAbandoned(p *plan, path string) {
	st, _, err := journal.Load(path)
	if err != nil {
		r.t.Errorf("load the journal after SIGTERM: %v", err)
		return
	}
	for item, rs := range r.sim.LiveRefunds(p.Batch) {
		if s, _ := st.Lookup(p.Batch, item); s.Status != journal.StatusRefunded {
			r.t.Errorf("after SIGTERM, refund %s of item %s exists but the journal says %v: a call was abandoned in flight", rs[0].ID, item, s.Status)
		}
	}
}
