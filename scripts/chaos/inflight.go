package main

// Operator rows with a refund call still in flight at Stripe while
// something else happens: a gateway that gave up on it, a clock that
// jumped (merge.go: a tool that replaced the journal).

import (
	"syscall"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// awaitGuard bounds await's waits for events: a guard against a hang,
// never a timing a working run must meet, however busy the machine.
const awaitGuard = 2 * time.Minute

// await polls cond until it holds, stop is closed or limit passes; it
// reports whether cond held. The simulator has no hook for the answers it
// gives, only counters.
func await(cond func() bool, stop <-chan struct{}, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		select {
		case <-stop:
			return cond()
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

const whatGateway = "A gateway in front of Stripe answers a share of refund creations on its own: 504 at once while the request goes on behind it and commits (`gateway_timeout_share` 0.2), or 502 after the refund was committed (`gateway_error_after_commit_share` 0.1); " +
	"its answers carry a Stripe-shaped `api_error` JSON body in every other run (`gateway_stripe_body` true, then false) and never Stripe's Request-Id. " +
	"Every request takes 300-400ms, longer than refund's first backoff, so the retry with the same key comes while the original is in flight (409) and the one after gets the saved answer replayed. " +
	"`refund -j 32` runs are killed with SIGKILL at random refund calls, then run with the gateway still there until one exits 0 (a run that sees 8 answers in a row from the gateway halts with exit 6, as refund is built to, and the next goes on); in the runs not killed, the gateway's 504s must have been followed by 409s and replays. " +
	"No key may be burned by a gateway: every key the simulator received and every refund's metadata is attempt 1."

func runGateway(r *rig, sz sizes) {
	// Every request held well beyond refund's first backoff (at most
	// 250ms), so a retry after a gateway's 504 comes while the original
	// is still running behind it: 409, then the saved answer.
	faults := stripesim.Faults{Latency: 300 * time.Millisecond, LatencyJitter: 100 * time.Millisecond,
		GatewayTimeoutShare: 0.2, GatewayErrorAfterCommitShare: 0.1, GatewayStripeBody: true}
	p := r.newPartialBatch(sz.GatewayItems, faults, "gateway")
	j := r.path("j.jsonl")

	kill := r.newStriker(syscall.SIGKILL)
	gap := max(2, len(p.Items)/(sz.GatewayKills+1))
	ends, newKeys := map[int]int{}, 0 // how the runs ended, by exit code
	bodies := map[bool]int{}
	var whole stripesim.Stats // the runs not killed: the 504s they got, the 409s and replays after
	for round := 0; ; round++ {
		if round > sz.GatewayKills+20 {
			r.fatalf("not done after %d runs", round)
		}
		body := (round+int(r.seed))%2 == 0
		faults.GatewayStripeBody = body
		r.must(r.sim.SetFaults(faults))
		bodies[body]++
		before := r.sim.Stats()
		pr := r.runStruck(kill, round < sz.GatewayKills, gap, j, p.Path, "-j", "32")
		if pr.Code == 0 {
			after := r.sim.Stats()
			whole.GatewayTimeouts += after.GatewayTimeouts - before.GatewayTimeouts
			whole.KeyInUse += after.KeyInUse - before.KeyInUse
			whole.Replayed += after.Replayed - before.Replayed
		}
		if s, ok := parseSummary(pr.Stderr.String()); ok {
			newKeys += s.NewKeys
		}
		if r.finished(pr, ends, "a run behind a gateway", -int(syscall.SIGKILL), exitStripe) {
			break
		}
	}
	kills, halts := ends[-int(syscall.SIGKILL)], ends[exitStripe]
	r.calm()

	r.checkAttemptOne(p.Batch, newKeys, "a gateway's answer")
	st := r.sim.Stats()
	if whole.GatewayTimeouts > 0 && (whole.KeyInUse == 0 || whole.Replayed == 0) {
		r.t.Errorf("the last run got %d gateway timeouts, but %d 409s and %d replays: its retries did not meet the originals in flight", whole.GatewayTimeouts, whole.KeyInUse, whole.Replayed)
	}
	r.t.inject("gateway 504s while the refund went on", int(st.GatewayTimeouts))
	r.t.inject("gateway 502s after commit", int(st.GatewayErrorsAfterCommit))
	r.t.inject("kill -9 with a call in flight", kills)
	r.t.note("seed %d: %d items; %d 504s with the request going on, %d 502s after commit, over %d runs with a Stripe-shaped body and %d with an HTML one; %d 409s while the original was in flight, %d answers replayed (the last run: %d 504s, %d 409s, %d replays); %d kills, %d halts after 8 gateway answers in a row; every key and refund attempt 1",
		r.seed, len(p.Items), st.GatewayTimeouts, st.GatewayErrorsAfterCommit, bodies[true], bodies[false], st.KeyInUse, st.Replayed, whole.GatewayTimeouts, whole.KeyInUse, whole.Replayed, kills, halts)
	r.finish(p, j)
}

const whatClock = "`refund -j 8` is killed with SIGKILL while one to four of its refund calls are held in flight at the simulator (parked in its create hook, keys reserved, nothing committed). " +
	"Then the clock jumps: every intent in the journal is rewritten 49 hours older (the same records, `ts` shifted, each group commit framed anew), so each in-doubt key looks far older than Stripe's 24 hours. " +
	"The rerun starts while the originals are still held: it must retry their very keys (409 while they are in flight, counted at the simulator before they are let go, then the saved answer replayed), never a new key, and no key at all for those items; it is itself held and killed in turn, and the last run finishes with exit 0, every item once."

// clockJump is how far back the journal's intents are moved.
const clockJump = 49 * time.Hour

func runClock(r *rig, sz sizes) {
	p := r.newPartialBatch(sz.ClockItems, stripesim.Faults{LatencyJitter: time.Millisecond}, "clock")
	j := r.path("j.jsonl")

	cur := r.parkCreates()
	defer r.sim.OnCreate(nil)
	gap := max(2, len(p.Items)/(sz.ClockRounds+1))
	var prev *crashrig.Hold // the killed run's calls, still held
	jumps, inFlight, conflicts := 0, 0, int64(0)
	for round := 0; ; round++ {
		if round > sz.ClockRounds+10 {
			r.fatalf("not done after %d runs", round)
		}
		snap := crashrig.TakeSnapshot(j)
		since := r.sim.Creates()
		base := r.sim.Stats()
		// While the originals are held, the rerun's new calls wait at a
		// gate: it cannot run through the batch meanwhile.
		var gate *crashrig.Hold
		if prev != nil {
			gate = r.newHold(r.sim.Creates()+1, 1<<40)
			cur.Store(gate)
		}
		pr := r.startRefund(j, p.Path)
		done := r.background(pr)
		prevItems := map[string]string{} // item -> the key held in flight
		if prev != nil {
			keys := prev.Parked()
			for _, key := range keys {
				_, item, _, _ := parseKey(key)
				prevItems[item] = key
			}
			// Every held key retried (409) before the originals go on, and
			// their saved answers replayed after.
			if !await(func() bool { return r.sim.Stats().KeyInUse-base.KeyInUse >= int64(len(keys)) }, done, awaitGuard) {
				r.t.Errorf("the rerun after a clock jump retried %d of the %d keys held in flight (409s)", r.sim.Stats().KeyInUse-base.KeyInUse, len(keys))
			}
			conflicts += r.sim.Stats().KeyInUse - base.KeyInUse
			prev.Free()
			if !await(func() bool { return r.sim.Stats().Replayed-base.Replayed >= int64(len(keys)) }, done, awaitGuard) {
				r.t.Errorf("the rerun after a clock jump got %d of the %d held keys' answers replayed", r.sim.Stats().Replayed-base.Replayed, len(keys))
			}
		}
		// This run's own calls to hold, from here on.
		var h *crashrig.Hold
		if round < sz.ClockRounds {
			h = r.holdNext(len(p.Items), gap, 4)
		}
		cur.Store(h)
		if gate != nil {
			gate.Free()
		}
		killed := false
		if h != nil {
			select {
			case <-h.Held():
				pr.Cmd.Process.Kill()
				killed = true
			case <-done: // the batch was done before the hold
			}
		}
		cur.Store(nil)
		<-done
		r.checkKept(snap)
		for _, key := range r.sim.KeysSince(since) {
			_, item, attempt, _ := parseKey(key)
			switch {
			case attempt != 1:
				r.t.Errorf("after a clock jump, key %s was sent: a new key", key)
			case prevItems[item] != "":
				r.t.Errorf("after a clock jump, key %s was sent again for item %s while its original was in flight", key, item)
			}
		}
		live := r.sim.LiveRefunds(p.Batch)
		for item, key := range prevItems {
			if rs := live[item]; len(rs) != 1 || rs[0].Key != key {
				r.t.Errorf("after a clock jump, item %s has %d refunds, want 1 made by its original key %s", item, len(rs), key)
			}
		}
		if killed && pr.Code == -int(syscall.SIGKILL) {
			inFlight += int(h.N)
			r.shiftIntents(j, -clockJump)
			jumps++
			prev = h
			continue
		}
		if h != nil {
			h.Free()
		}
		if r.expectExit(pr, "the last run after the clock jumps", 0) {
			break
		}
	}
	r.t.inject("clock jumps of 49h with calls in flight", jumps)
	r.t.note("seed %d: %d items; %d clock jumps with %d calls held in flight; the reruns answered 409 %d times for those keys, then replayed; no new key",
		r.seed, len(p.Items), jumps, inFlight, conflicts)
	r.finish(p, j)
}

// pastHalf checks the rig's setup: intents age old are past half of ttl,
// how long whose API keeps a key.
func (r *rig) pastHalf(age, ttl time.Duration, whose string) {
	if ttl/2 >= age {
		r.fatalf("setup: intents %v old are not past half of %s %v", age, whose, ttl)
	}
}

// ageIntents waits for a killed run's calls to end at the simulator (a
// refund made, or refused: then no call of it is still to come and whether
// a payment holds a refund is settled), moves every intent of the journal
// at j back by age, and returns the items it holds in doubt.
func (r *rig) ageIntents(p *plan, j string, age time.Duration) []string {
	if !await(func() bool { st := r.sim.Stats(); return st.RefundsCreated+st.RefundsRefused >= r.sim.Creates() }, nil, awaitGuard) {
		r.fatalf("the killed run's calls did not end at the simulator")
	}
	st, _, err := journal.Load(j)
	r.must(err)
	var inDoubt []string
	for _, it := range p.Items {
		if s, ok := st.Lookup(p.Batch, it.Item.Item); ok && s.Status == journal.StatusInDoubt {
			inDoubt = append(inDoubt, it.Item.Item)
		}
	}
	r.shiftIntents(j, -age)
	return inDoubt
}

// shiftIntents moves the ts of every intent in the journal at path by d;
// every other record stays as it is (a torn tail too).
func (r *rig) shiftIntents(path string, d time.Duration) {
	r.must(crashrig.RewriteRecords(path, func(rec *journal.Record) bool {
		if rec.Type != journal.TypeIntent {
			return false
		}
		rec.Time = rec.Time.Add(d)
		return true
	}))
}
