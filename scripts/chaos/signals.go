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

	kill := r.newStriker(syscall.SIGKILL)
	// Spread the kills over the batch, leaving about half of it for the
	// kills' budget to be spent before it is done. A timed kill waits up
	// to as long as the last hook kill took to come, so it lands anywhere
	// from start-up to as far in, whatever the machine's speed.
	gap := max(2, len(p.Items)/(sz.Kills+1))
	delay := 20 * time.Millisecond
	inFlight, timed := 0, 0
	for round := 0; ; round++ {
		if round > 3*sz.Kills+20 {
			r.fatalf("not done after %d runs", round)
		}
		killing := inFlight+timed < sz.Kills
		byHook := killing && round%2 == 0
		pr, started := r.signalledRun(kill, syscall.SIGKILL, killing, byHook, gap, delay, j, p.Path)
		if pr.Code == 0 {
			break // every item settled
		}
		if !r.expectExit(pr, "a run under kill -9", 0, -int(syscall.SIGKILL)) {
			continue
		}
		if byHook {
			inFlight++
			delay = time.Since(started)
		} else {
			timed++
		}
	}
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
	charges := r.serveCharges(sz.TermItems, stripesim.Faults{})
	p := r.makePlan("plan.jsonl", "sigterm", r.writeCharges("charges.csv", charges))
	j := r.path("j.jsonl")

	term := r.newStriker(syscall.SIGTERM) // the call goes on: it must be journaled
	gap := max(2, len(p.Items)/(sz.Terms+1))
	delay := 20 * time.Millisecond
	signals, early := 0, 0
	for round := 0; ; round++ {
		if round > 3*sz.Terms+20 {
			r.fatalf("not done after %d runs", round)
		}
		signalling := signals+early < sz.Terms
		byHook := signalling && round%2 == 0
		pr, started := r.signalledRun(term, syscall.SIGTERM, signalling, byHook, gap, delay, j, p.Path)
		switch pr.Code {
		case 0:
		case exitTerminated:
			signals++
			if byHook {
				delay = time.Since(started)
			}
			if !strings.Contains(pr.Stderr.String(), "finishing the calls in flight") {
				r.t.Errorf("after SIGTERM, refund did not say it finishes the calls in flight: %s", firstLines(pr.Stderr.String(), 3))
			}
			r.checkNothingAbandoned(p, j)
			continue
		case -int(syscall.SIGTERM):
			// Signalled before its handler was installed: the process
			// died at once, like a kill -9, and must be as safe.
			early++
			continue
		default:
			r.expectExit(pr, "a run under SIGTERM", 0, exitTerminated)
			continue
		}
		break
	}
	if early > 0 {
		r.t.note("seed %d: %d of the SIGTERMs arrived before refund installed its handler, at process start, and ended it like a kill", r.seed, early)
	}
	r.t.inject("SIGTERM", signals+early)
	r.finish(p, j)
}

// signalledRun runs refund once and, when signalling, sends it sig: by the
// striker from inside the create hook (byHook) or at a random time within
// delay. The journal's complete records must be kept. It returns when the
// run started.
func (r *rig) signalledRun(s *crashrig.Striker, sig syscall.Signal, signalling, byHook bool, gap int, delay time.Duration, j, planPath string) (*proc, time.Time) {
	snap := crashrig.TakeSnapshot(j)
	started := time.Now()
	pr := r.startRefund(j, planPath)
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
	return pr, started
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
