package main

import (
	"regexp"
	"strconv"
	"syscall"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund/provider/paypal"
	"github.com/refundkit/refundkit/refund/sim/paypalsim"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// The PayPal rows: refund --provider paypal against PayPal's API in the
// simulator, with the Stripe rows' checks. refund looks a capture's
// refunds up through its order (refund/provider/paypal's Find); an item in doubt
// that the look-up does not settle is sent again under its request id,
// which PayPal keeps 45 days and answers with the refund's latest status.
// No row here makes the simulator forget request ids early: the 45 days
// are what makes that resend safe, and the row past half of them on
// captures without an order, which have no look-up (paypal-keyage), shows
// what refund does when they may be running out.

func onPayPal(run func(*rig, sizes)) func(*rig, sizes) { return onProvider(provPayPal, run) }

const whatPayPalFaults = "PayPal's refund calls are answered 500 before the refund is made (not saved: PayPal lets a 5xx be retried with its request id), 500 after it was made, or made and left unanswered (connection closed), each for a tenth of the calls; " +
	"a gateway in front answers a tenth with 504 at once while the call goes on behind it and commits, and a twentieth with 502 after the commit, with a PayPal-shaped body in every other run and without a Paypal-Debug-Id. " +
	"Every request takes 350-500ms, as long as refund's first backoff for PayPal (250-500ms), so a retry after a gateway's 504 may come while the original is in flight (409), a later one gets the refund replayed, and a look-up (the capture's order) may find it first. " +
	"`refund --provider paypal -j 32` runs are killed with SIGKILL at random refund calls, then run until one exits 0 (a run may exit 1 with items in doubt, or 6 after 8 gateway answers in a row). " +
	"No request id may be burned: every id the simulator received, and every refund it made, is attempt 1."

const whatPayPalRateLimit = "A third of all PayPal API requests (tokens, reads of captures and orders, refunds alike) are answered 429 RATE_LIMIT_REACHED. `refund --provider paypal -j 8 -v` must finish every item with exit 0 in one run, " +
	"backing off with jitter (PayPal's backoff starts at 500ms and reaches 30s) and retrying (a refund under the same request id): its summary's rate-limited count must equal the simulator's count of 429 answers, every 429 must be followed by a logged retry with a delay, and no item may fail. Each item costs a look-up (its capture, then its order) and a refund call."

// paypalStormShare is the share of PayPal requests the storm answers 429.
const paypalStormShare = 1.0 / 3

func runPayPalFaults(r *rig, sz sizes) {
	faults := stripesim.Faults{
		ErrorBeforeCommitShare: 0.1, ErrorAfterCommitShare: 0.1, DropAfterCommitShare: 0.1,
		GatewayTimeoutShare: 0.1, GatewayErrorAfterCommitShare: 0.05, GatewayStripeBody: true,
		Latency: 350 * time.Millisecond, LatencyJitter: 150 * time.Millisecond, // beyond PayPal's first backoff
	}
	p := r.newBatch(sz.PayPalFaultItems, faults, "ppfaults")
	j := r.path("j.jsonl")
	kill := r.newStriker(syscall.SIGKILL)
	gap := max(2, len(p.Items)/(sz.FaultRounds+1))
	ends, newKeys := map[int]int{}, 0 // how the runs ended, by exit code
	for round := 0; ; round++ {
		if round > sz.FaultRounds+20 {
			r.fatalf("not done after %d runs", round)
		}
		faults.GatewayStripeBody = (round+int(r.seed))%2 == 0
		r.must(r.sim.SetFaults(faults))
		pr := r.runStruck(kill, round < sz.FaultRounds, gap, j, p.Path, "-j", "32")
		if s, ok := parseSummary(pr.Stderr.String()); ok {
			newKeys += s.NewKeys
		}
		if r.finished(pr, ends, "a run with PayPal's faults", -int(syscall.SIGKILL), exitStripe, exitFailed) {
			break
		}
	}
	kills, halts, doubtful := ends[-int(syscall.SIGKILL)], ends[exitStripe], ends[exitFailed]
	r.calm()
	r.checkAttemptOne(p.Batch, newKeys, "a fault")
	st := r.sim.Stats()
	r.t.injectFaults(st, true)
	r.t.inject("gateway 502s after commit", int(st.GatewayErrorsAfterCommit))
	r.t.inject("kill -9 with a call in flight", kills)
	r.t.note("seed %d: %d items; %d 500s before and %d after commit, %d answers dropped, %d gateway 504s and %d 502s; %d 409s while the first call was in flight, %d answers replayed to a request id sent again; %d kills, %d runs left items in doubt (exit 1), %d halted (exit 6); every request id and refund attempt 1",
		r.seed, len(p.Items), st.ErrorsBeforeCommit, st.ErrorsAfterCommit, st.Dropped, st.GatewayTimeouts, st.GatewayErrorsAfterCommit, st.KeyInUse, st.Replayed, kills, doubtful, halts)
	r.finish(p, j)
}

// checkAttemptOne: no key of batch was burned by what the scenario
// injected (why): every key the simulator received and every refund it
// made is attempt 1, and refund's summaries counted no new key.
func (r *rig) checkAttemptOne(batch string, newKeys int, why string) {
	for _, key := range r.sim.Keys() {
		if _, _, attempt, ok := parseKey(key); !ok || attempt != 1 {
			r.t.Errorf("key %s was sent: %s burned a key", key, why)
		}
	}
	for item, rs := range r.sim.BatchRefunds(batch) {
		for _, rf := range rs {
			if rf.Attempt != "1" {
				r.t.Errorf("item %s: refund %s is of attempt %s, want 1", item, rf.ID, rf.Attempt)
			}
		}
	}
	if newKeys > 0 {
		r.t.Errorf("refund's summaries count %d new keys: %s burned a key", newKeys, why)
	}
}

const whatPayPalPending = "A third of PayPal's new refunds are PENDING (an eCheck) and settle a second after they were made, a third of those to FAILED (the money goes back to the capture); access tokens live one second and every request takes 150ms, so the run that goes to its end renews its token mid-run. " +
	"`refund --provider paypal -j 2` is killed with SIGKILL at random refund calls, then runs to its end (exit 0, or 1 when a killed run's pending refund has FAILED meanwhile): the summary's pending count must be the journal's, and every refund still PENDING at PayPal must be journaled pending by that very refund. " +
	"Once the simulator's clock has settled them all, a rerun must send no refund call at all, only read each pending refund (GET /v2/payments/refunds/{id}): COMPLETED ones journaled refunded, FAILED ones failed (exit 1: failed, not refunded, and never refunded again). " +
	"A last rerun sends and reads nothing and exits 1 again. An item whose refund FAILED must hold that one refund alone."

// pendingFor is how long the simulator's PENDING refunds stay so, and
// tokenTTL how long its access tokens live.
const (
	pendingFor = time.Second
	tokenTTL   = time.Second
)

var pendingRE = regexp.MustCompile(`, (\d+) pending[,;]`)

// pendingCount is the summary's count of pending items (0 when it names
// none).
func pendingCount(stderr string) int {
	m := pendingRE.FindStringSubmatch(stderr)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func runPayPalPending(r *rig, sz sizes) {
	faults := stripesim.Faults{PayPalPendingShare: 1.0 / 3, PayPalPendingFor: pendingFor, PayPalFailedShare: 1.0 / 3,
		PayPalTokenTTL: tokenTTL, Latency: 150 * time.Millisecond}
	p := r.newBatch(sz.PendingItems, faults, "pending")
	j := r.path("j.jsonl")
	kill := r.newStriker(syscall.SIGKILL)
	gap := max(2, len(p.Items)/(sz.PendingKills+1))
	kills, runs := 0, 0
	var last *proc
	for round := 0; ; round++ {
		if round > sz.PendingKills+20 {
			r.fatalf("not done after %d runs", round)
		}
		pr := r.runStruck(kill, round < sz.PendingKills, gap, j, p.Path, "-j", "2")
		runs++
		if pr.Code == -int(syscall.SIGKILL) {
			kills++
			continue
		}
		// A pending refund of a killed run may have FAILED by now: its
		// item is failed, and the run says so with exit 1.
		want := 0
		if s, ok := parseSummary(pr.Stderr.String()); ok && s.Failed > 0 {
			want = exitFailed
		}
		r.expectExit(pr, "a run that leaves refunds pending", want)
		last = pr
		break
	}
	// Every item has its refund now. Those PENDING at the simulator must
	// be journaled pending; the journal's pending ones are counted so
	// (some may have settled at PayPal since: the next run reads them).
	pendingAtSim, journaled := 0, 0
	st, _, err := journal.Load(j)
	r.must(err)
	live := r.sim.LiveRefunds(p.Batch)
	for _, it := range p.Items {
		s, _ := st.Lookup(p.Batch, it.Item.Item)
		if s.Status == journal.StatusPending {
			journaled++
		}
		if rs := live[it.Item.Item]; len(rs) > 0 && rs[0].Status == "PENDING" {
			pendingAtSim++
			if s.Status != journal.StatusPending || s.Refund != rs[0].ID {
				r.t.Errorf("item %s: refund %s is PENDING at PayPal, the journal says %v (%s)", it.Item.Item, rs[0].ID, s.Status, s.Refund)
			}
		}
	}
	if n := pendingCount(last.Stderr.String()); n != journaled || n == 0 {
		r.t.Errorf("the summary counts %d pending items, the journal %d: %s", n, journaled, firstLines(last.Stderr.String(), 2))
	}
	// The simulator's clock settles them: PENDING refunds end by their
	// time, read at each look-up.
	if !await(func() bool { return r.sim.Stats().PayPal.Refunds["PENDING"] == 0 }, nil, awaitGuard) {
		r.fatalf("PayPal's PENDING refunds did not settle")
	}
	failed := r.sim.Stats().PayPal.Refunds["FAILED"]
	want := 0
	if failed > 0 {
		want = exitFailed
	}
	for i, what := range []string{"the rerun that settles the pending refunds", "the rerun after they settled"} {
		since, before := r.sim.Creates(), r.sim.Stats()
		snap := crashrig.TakeSnapshot(j)
		pr := r.startRefund(j, p.Path)
		r.wait(pr)
		r.checkKept(snap)
		runs++
		r.expectExit(pr, what, want)
		after := r.sim.Stats()
		if keys := r.sim.KeysSince(since); len(keys) > 0 || after.Requests[r.prov.createRoute()] != before.Requests[r.prov.createRoute()] {
			r.t.Errorf("%s sent %d refund calls (%v): a pending refund is settled by reading it, never by a new call", what, after.Requests[r.prov.createRoute()]-before.Requests[r.prov.createRoute()], keys)
		}
		reads := after.Requests[r.prov.lookupRoute()] - before.Requests[r.prov.lookupRoute()]
		if i == 0 && reads < int64(journaled) {
			r.t.Errorf("%s read %d refunds, with %d journaled pending before it", what, reads, journaled)
		}
		if i == 1 && reads != 0 {
			r.t.Errorf("%s read %d refunds, with none pending", what, reads)
		}
		if n := pendingCount(pr.Stderr.String()); n != 0 {
			r.t.Errorf("%s left %d items pending after PayPal settled them all", what, n)
		}
	}
	stats := r.sim.Stats()
	if stats.PayPal.TokensIssued <= int64(runs) {
		r.t.Errorf("%d access tokens over %d runs: no run renewed its token mid-run", stats.PayPal.TokensIssued, runs)
	}
	r.t.inject("pending items settled by a rerun", journaled)
	r.t.inject("PENDING refunds that FAILED", int(failed))
	r.t.inject("access tokens expired (renewed)", int(stats.PayPal.TokensIssued)-runs)
	r.t.inject("kill -9 with a call in flight", kills)
	r.t.note("seed %d: %d items; %d journaled pending after the runs (%d kills; %d still PENDING at PayPal then), settled by the rerun with reads alone; %d refunds FAILED in all (journaled failed, not sent again); %d access tokens over %d runs (1s each), %d calls refused 401 for an expired token",
		r.seed, len(p.Items), journaled, kills, pendingAtSim, failed, stats.PayPal.TokensIssued, runs, stats.PayPal.TokensExpired)
	r.checkOnce(p, j)
	r.auditExpect(p, exitFailed, "items failed (their PENDING refunds FAILED)", j)
}

const whatPayPalKeyAge = "PayPal keeps a request id 45 days, and a capture made without an order (`no_order`) has no look-up of its refunds: only the total it has given back. So refund sends an item in doubt again under its request id only while the id is younger than half the 45 days. " +
	"`refund --provider paypal` over such captures is killed with SIGKILL with refund calls in flight (the simulator commits them after the kill); once they have committed, the journal's clock is faked: every intent is rewritten 23 days older (past 22.5 days). " +
	"The rerun must leave each item in doubt whose capture holds a refund for a person (in doubt, or held: a refund it cannot tell its own stands on the capture), send nothing for it, and finish the rest (an item whose call never reached PayPal may be sent: nothing stands on its capture). This repeats; the last two runs exit 1, counting those items in doubt or failed, and the last sends nothing. " +
	"Those items are expected (at most one live refund each), not missing; the offline audit must report them (exit 1)."

// keyAge is how far back the journal's intents are moved: past half of
// PayPal's 45 days.
const keyAge = 23 * 24 * time.Hour

func runPayPalKeyAge(r *rig, sz sizes) {
	r.pastHalf(keyAge, paypal.KeyTTL, "PayPal's")
	captures := paypalsim.GenerateCaptures(sz.KeyAgeItems, int64(r.seed))
	for i := range captures {
		captures[i].NoOrder = true
	}
	r.serveConfig(stripesim.Config{Faults: stripesim.Faults{LatencyJitter: time.Millisecond}, PayPal: paypalsim.Config{Captures: captures}})
	p := r.makePlan("plan.jsonl", "keyage", r.writeCaptures("captures.csv", captures, true))
	j := r.path("j.jsonl")
	kill := r.newStriker(syscall.SIGKILL)
	gap := max(2, len(p.Items)/(sz.KeyAgeRounds+1))
	forPerson := map[string]bool{} // in doubt past half the id memory, a refund on the capture
	resendable, kills := 0, 0
	for round := 0; round < sz.KeyAgeRounds+2; round++ {
		killing := round < sz.KeyAgeRounds
		since := r.sim.Creates()
		pr := r.runStruck(kill, killing, gap, j, p.Path)
		sent := r.sim.KeysSince(since)
		for _, key := range sent {
			if _, item, _, _ := parseKey(key); forPerson[item] {
				r.t.Errorf("key %s was sent for item %s, in doubt past half of PayPal's request-id memory with a refund on its capture", key, item)
			}
		}
		if pr.Code == -int(syscall.SIGKILL) {
			kills++
			inDoubt := r.ageIntents(p, j, keyAge)
			live := r.sim.LiveRefunds(p.Batch)
			for _, item := range inDoubt {
				if forPerson[item] {
					continue
				}
				if len(live[item]) > 0 {
					forPerson[item] = true
				} else {
					resendable++
				}
			}
			continue
		}
		want := 0
		if len(forPerson) > 0 {
			want = exitFailed
		}
		r.expectExit(pr, "a run with items in doubt past half the request-id memory", want)
		if s, ok := parseSummary(pr.Stderr.String()); !killing && (!ok || s.InDoubt+s.Failed != len(forPerson)) {
			r.t.Errorf("the summary counts %d items in doubt and %d failed, %d were left for a person past half the request-id memory", s.InDoubt, s.Failed, len(forPerson))
		}
		if round == sz.KeyAgeRounds+1 && len(sent) > 0 {
			r.t.Errorf("the last run sent %d refund calls, with nothing left to send", len(sent))
		}
	}
	r.t.inject("intents aged 23 days with calls in flight", kills)
	r.t.note("seed %d: %d items on captures without an order; %d kills with calls in flight, each followed by the journal's intents aged 23 days; %d items in doubt with a refund on their capture left for a person, never sent again; %d in doubt whose call never reached PayPal sent again; every other item refunded once",
		r.seed, len(p.Items), kills, len(forPerson), resendable)
	r.checkOnceForPerson(p, forPerson, j)
	r.auditExpect(p, exitFailed, "items in doubt", j)
}

// auditExpect is audit for a batch that does not end clean (items failed
// or in doubt): the offline audit must exit want. The audit column does
// not count it.
func (r *rig) auditExpect(p *plan, want int, what string, journals ...string) {
	if r.m.bins["audit"] == "" {
		return
	}
	r.t.auditOffline("the batch ends with " + what + ": the offline audit must report them (exit 1)")
	offline := r.run(nil, "audit", append([]string{"--plan", p.Path}, journals...)...)
	r.expectExit(offline, "audit --plan (offline) of "+what, want)
}
