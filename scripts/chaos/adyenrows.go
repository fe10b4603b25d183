package main

import (
	"sync"
	"syscall"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund/provider/adyen"
	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
	"github.com/refundkit/refundkit/refund/sim/adyensim"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// The Adyen rows: kill -9, faults, keys past their age.

// adyenRun is one refund run's summary figures the rows keep.
type adyenRun struct {
	code                    int
	summary                 summary
	ok                      bool // a summary was printed
	pending                 int
	refunded, failed, doubt int
}

func (r *rig) adyenRunOf(pr *proc) adyenRun {
	s, ok := parseSummary(pr.Stderr.String())
	return adyenRun{code: pr.Code, summary: s, ok: ok, pending: pendingCount(pr.Stderr.String()),
		refunded: s.Refunded, failed: s.Failed, doubt: s.InDoubt}
}

// settled reports a run that ended with every item refunded or failed:
// nothing pending, nothing in doubt, exit 1 if some failed, else 0.
func (a adyenRun) settled() bool {
	want := 0
	if a.failed > 0 {
		want = exitFailed
	}
	return a.ok && a.code == want && a.pending == 0 && a.doubt == 0
}

const whatAdyenKill9 = "`refund --provider adyen -j 16` over a batch of Adyen payments is killed with SIGKILL from inside the simulator's create hook, a refund call in flight: the process is gone before the simulator makes the refund (\"received\") and queues its signed REFUND notification, which it posts 50-350ms later to bin/adyen-webhook, until [accepted]. " +
	"The runs go on, each reading the receiver's file (--notifications): an item in doubt whose refund a notification names is adopted; one no notification names yet is sent again under its same Idempotency-Key, which Adyen answers by replaying the first answer; an item Adyen answered \"received\" is journaled pending, and settled refunded by a later run once its notification is in. " +
	"Once the kills are spent, every notification is delivered (POST /_sim/adyen/flush, which waits for them) before each run, until a run exits 0 with nothing pending or in doubt. Every item must end refunded in the journal by its one refund at the simulator, made under attempt 1's key, and audit --provider adyen must exit 0."

func runAdyenKill9(r *rig, sz sizes) {
	// Notifications come 50-350ms after their refund: the run after a
	// kill often finds none yet for an item it left in doubt, and sends it
	// again under its key; sometimes it finds one, and adopts the refund.
	p, rc := r.newAdyenBatch(sz.AdyenKillItems, stripesim.Faults{LatencyJitter: 2 * time.Millisecond,
		AdyenNotifyDelay: 50 * time.Millisecond, AdyenNotifyJitter: 300 * time.Millisecond}, "adyenkill9")
	j := r.path("j.jsonl")
	kill := r.newStriker(syscall.SIGKILL)
	gap := max(2, len(p.Items)/(sz.AdyenKills+1))
	kills, runs, settling, adopted := 0, 0, 0, 0
	for round := 0; ; round++ {
		if round > 2*sz.AdyenKills+20 {
			r.fatalf("not done after %d runs", round)
		}
		killing := kills < sz.AdyenKills
		if !killing {
			r.flush()
			settling++
		}
		pr := r.runStruck(kill, killing, gap, j, p.Path, "-j", "16")
		runs++
		if s, ok := parseSummary(pr.Stderr.String()); ok {
			adopted += s.Reconciled
		}
		if pr.Code == -int(syscall.SIGKILL) {
			kills++
			continue
		}
		r.expectExit(pr, "a run under kill -9", 0)
		if a := r.adyenRunOf(pr); !killing && a.settled() {
			if a.failed > 0 {
				r.t.Errorf("%d items failed with no refund refused", a.failed)
			}
			break
		}
	}
	ns := r.flush()
	rc.stop()
	st := r.sim.Stats()
	r.t.inject("kill -9 with a call in flight", kills)
	r.t.note("seed %d: %d kills over %d items, %d runs (%d after a flush); %d refund calls, of which %d reserved a key; %d answers replayed to a key sent again (an item in doubt no notification named yet), %d 704s while the first call ran; %d items adopted from a notification; %d refunds made; %d notifications delivered",
		r.seed, kills, len(p.Items), runs, settling, st.Requests[r.prov.createRoute()], r.sim.Creates(), st.Adyen.Replayed, st.Adyen.KeyInUse, adopted, st.Adyen.RefundsCreated, ns.Delivered)
	end := r.checkAdyen(p, j, nil)
	if n := end.journaled[journal.StatusRefunded]; n != len(p.Items) {
		r.t.Errorf("%d of %d items journaled refunded", n, len(p.Items))
	}
	r.auditAdyen(p, j, end)
}

const whatAdyenFaults = "Adyen's refund calls are answered 429 (a tenth), 500 before the refund is made (transient: sent again with the key), 500 after it was made (saved under the key: every retry gets it, and the item waits for its notification), made and left unanswered, or answered by a gateway's 504 at once while the call goes on behind it (each a tenth); every request takes 100-250ms, so a retry may come while the first runs (704). " +
	"A tenth of the refunds are refused (REFUND success false: the item fails for good and is never sent again), a tenth fail later (REFUND_FAILED after the REFUND) and a tenth are reversed (REFUNDED_REVERSED). Notifications come 20-100ms late, a fifth twice, a fifth of the deliveries count as failed and are retried, and in every other run a refund's later notification comes before its REFUND. " +
	"`refund --provider adyen -j 16` runs are killed with SIGKILL at random refund calls; once per seed the receiver is killed with SIGKILL too, while a run goes on, and restarted on the same address and file after it (the simulator retries every notification until [accepted]). Then every notification is delivered before each run (flush) until a run ends with nothing pending or in doubt (exit 1 when items failed). " +
	"Every item must have one refund, under attempt 1's key; an item whose refund was refused must be journaled failed; one failed later or reversed may be journaled refunded (its REFUND came first) or failed, and audit --provider adyen must report exactly those items, and the refused ones (exit 1). The audit column counts the runs where both audits agreed with the simulator."

func runAdyenFaults(r *rig, sz sizes) {
	faults := stripesim.Faults{
		RateLimitShare: 0.1, ErrorBeforeCommitShare: 0.1, ErrorAfterCommitShare: 0.1, DropAfterCommitShare: 0.1,
		GatewayTimeoutShare: 0.1,
		// Every request held long enough for a retry after a gateway's
		// 504 to meet the call still running.
		Latency: 100 * time.Millisecond, LatencyJitter: 150 * time.Millisecond,
		AdyenRefundFailedShare: 0.1, AdyenRefundFailedLaterShare: 0.1, AdyenReversedShare: 0.1,
		AdyenNotifyDelay: 20 * time.Millisecond, AdyenNotifyJitter: 80 * time.Millisecond,
		AdyenNotifyDuplicateShare: 0.2, AdyenNotifyFailShare: 0.2,
	}
	p, rc := r.newAdyenBatch(sz.AdyenFaultItems, faults, "adyenfaults")
	j := r.path("j.jsonl")
	kill := crashrig.NewStriker(syscall.SIGKILL)
	// The receiver is killed at a refund call of a killed run, no later
	// than the run's own kill, from a goroutine of its own (the call goes
	// on meanwhile), and started again once that run has ended.
	var (
		recvMu     sync.Mutex
		recvMark   int64 // 0: disarmed
		recvKilled sync.WaitGroup
	)
	disarmRecv := func() {
		recvMu.Lock()
		recvMark = 0
		recvMu.Unlock()
		recvKilled.Wait()
	}
	r.sim.OnCreate(func(n int64, key string) {
		recvMu.Lock()
		if recvMark > 0 && n >= recvMark {
			recvMark = 0
			recvKilled.Add(1)
			go func() { defer recvKilled.Done(); rc.kill() }()
		}
		recvMu.Unlock()
		kill.Hook(n, key)
	})
	r.cleanup(func() { r.sim.OnCreate(nil); disarmRecv() })
	recvRound := r.rng.IntN(max(sz.AdyenFaultRounds, 1))
	gap := max(2, len(p.Items)/(sz.AdyenFaultRounds+1))
	ends := map[int]int{}
	runs, settling := 0, 0
	for round := 0; ; round++ {
		if round > sz.AdyenFaultRounds+20 {
			r.fatalf("not done after %d runs", round)
		}
		killing := round < sz.AdyenFaultRounds
		faults.AdyenNotifyReorder = (round+int(r.seed))%2 == 0
		r.must(r.sim.SetFaults(faults))
		if !killing {
			r.flush()
			settling++
		}
		snap := crashrig.TakeSnapshot(j)
		pr := r.startRefund(j, p.Path, "-j", "16")
		base := r.sim.Creates()
		at := base + 1 + r.rng.Int64N(int64(gap))
		if killing {
			kill.ArmAt(pr.Proc, at)
		}
		if rc.kills == 0 && round >= recvRound {
			recvMu.Lock()
			recvMark = base + 1 + r.rng.Int64N(at-base)
			recvMu.Unlock()
		}
		r.wait(pr)
		kill.Disarm()
		disarmRecv()
		r.checkKept(snap)
		runs++
		if rc.cur == nil {
			rc.restart()
		}
		if r.expectExit(pr, "a run with Adyen's faults", 0, exitFailed, exitStripe, -int(syscall.SIGKILL)) {
			ends[pr.Code]++
		}
		if a := r.adyenRunOf(pr); !killing && a.settled() {
			break
		}
	}
	if rc.kills == 0 {
		r.t.Errorf("the receiver was never killed (round %d of %d)", recvRound, sz.AdyenFaultRounds)
	}
	ns := r.flush()
	rc.stop()
	st := r.sim.Stats()
	r.t.inject("429 answers", int(st.RateLimited))
	r.t.injectFaults(st, true)
	r.t.inject("refunds refused", int(st.Adyen.Refunds[adyensim.OutcomeRefused]))
	r.t.inject("refunds failed later", int(st.Adyen.Refunds[adyensim.OutcomeFailed]))
	r.t.inject("refunds reversed", int(st.Adyen.Refunds[adyensim.OutcomeReversed]))
	r.t.inject("notifications duplicated", int(ns.Duplicates))
	r.t.inject("notification deliveries failed and retried", int(ns.Retries))
	r.t.inject("kill -9 with a call in flight", int(kill.Struck()))
	r.t.inject("receiver kill -9, restarted", rc.kills)
	end := r.checkAdyen(p, j, nil)
	var dups int64
	for _, s := range rc.stops {
		dups += s.Duplicates
	}
	r.t.note("seed %d: %d items, %d runs (%d after a flush; %d exited 1, %d halted with exit 6, %d killed); %d 429s, %d 500s before and %d after commit, %d answers dropped, %d gateway 504s; %d 704s while the first call ran, %d answers replayed; %d refunds refused, %d failed later, %d reversed (journaled: %d refunded, %d failed); %d notifications delivered, %d duplicated, %d deliveries retried (%d failed by the knob); receiver killed %d times, %d duplicates it recognized after its last start; every key attempt 1",
		r.seed, len(p.Items), runs, settling, ends[exitFailed], ends[exitStripe], ends[-int(syscall.SIGKILL)],
		st.RateLimited, st.ErrorsBeforeCommit, st.ErrorsAfterCommit, st.Dropped, st.GatewayTimeouts, st.Adyen.KeyInUse, st.Adyen.Replayed,
		st.Adyen.Refunds[adyensim.OutcomeRefused], st.Adyen.Refunds[adyensim.OutcomeFailed], st.Adyen.Refunds[adyensim.OutcomeReversed],
		end.journaled[journal.StatusRefunded], end.journaled[journal.StatusFailed],
		ns.Delivered, ns.Duplicates, ns.Retries, ns.FailedByKnob, rc.kills, dups)
	r.auditAdyen(p, j, end)
}

const whatAdyenKeyAge = "refundkit counts on Adyen keeping an Idempotency-Key 7 days (the lower of Adyen's published figures) and sends an item in doubt again under its key only while the key is younger than half of that, unless a notification names its refund. " +
	"With the receiver down (killed: nothing new reaches the file; the simulator keeps retrying), `refund --provider adyen -j 8` is killed with SIGKILL with refund calls in flight; once they have ended at the simulator, every intent in the journal is made 4 days older. Each item then in doubt must never be sent again (no key of it reaches the simulator), whatever run comes; this repeats, and a run to the end must exit 1 counting exactly those items in doubt. " +
	"Then the receiver is restarted and every notification delivered: the rerun must adopt each item in doubt whose refund a notification names (no call), settle the pending ones, and leave in doubt only the items whose call never reached Adyen (none of which has a refund); a last rerun sends nothing. audit --provider adyen must name exactly those items (exit 1 if any)."

// adyenKeyAge is how far back the journal's intents are moved: past half
// of the 7 days refundkit counts on.
const adyenKeyAge = 4 * 24 * time.Hour

func runAdyenKeyAge(r *rig, sz sizes) {
	r.pastHalf(adyenKeyAge, adyen.KeyTTL, "Adyen's")
	p, rc := r.newAdyenBatch(sz.AdyenKeyAgeItems, stripesim.Faults{LatencyJitter: time.Millisecond}, "adyenkeyage")
	j := r.path("j.jsonl")
	rc.kill() // down until every aged item has been checked
	kill := r.newStriker(syscall.SIGKILL)
	gap := max(2, len(p.Items)/(sz.AdyenKeyAgeRounds+1))
	aged := map[string]bool{} // in doubt when the intents were aged: never to be sent again
	kills, runs := 0, 0
	sentFor := func(since int64) []string {
		var bad []string
		for _, key := range r.sim.KeysSince(since) {
			for item := range aged {
				if key == wire.Key(p.Batch, item, 1) {
					bad = append(bad, item)
				}
			}
		}
		return bad
	}
	for round := 0; round < sz.AdyenKeyAgeRounds+1; round++ {
		killing := round < sz.AdyenKeyAgeRounds
		since := r.sim.Creates()
		pr := r.runStruck(kill, killing, gap, j, p.Path)
		runs++
		for _, item := range sentFor(since) {
			r.t.Errorf("item %s was sent again, in doubt past half of Adyen's key window with no notification", item)
		}
		if pr.Code == -int(syscall.SIGKILL) {
			kills++
			for _, item := range r.ageIntents(p, j, adyenKeyAge) {
				aged[item] = true
			}
			continue
		}
		a := r.adyenRunOf(pr)
		want := 0
		if len(aged) > 0 {
			want = exitFailed
		}
		r.expectExit(pr, "a run with items in doubt past half the key window", want)
		if !killing && (a.doubt != len(aged) || a.failed != 0) {
			r.t.Errorf("the run to the end counts %d items in doubt and %d failed; %d were in doubt past half the key window", a.doubt, a.failed, len(aged))
		}
	}
	// The notifications come in: adopted, settled; the rest stays.
	rc.restart()
	r.flush()
	live := map[string]bool{}
	for _, rf := range r.adyenRefunds() {
		if batch, item, _, ok := adyenItem(rf); ok && batch == p.Batch {
			live[item] = true
		}
	}
	forPerson := map[string]bool{}
	for item := range aged {
		if !live[item] {
			forPerson[item] = true
		}
	}
	for i, what := range []string{"the rerun once the notifications are in", "the last rerun"} {
		since := r.sim.Creates()
		snap := crashrig.TakeSnapshot(j)
		pr := r.startRefund(j, p.Path)
		r.wait(pr)
		r.checkKept(snap)
		runs++
		want := 0
		if len(forPerson) > 0 {
			want = exitFailed
		}
		r.expectExit(pr, what, want)
		a := r.adyenRunOf(pr)
		if a.doubt != len(forPerson) || a.pending != 0 {
			r.t.Errorf("%s counts %d items in doubt and %d pending; want %d in doubt (calls that never reached Adyen) and none pending", what, a.doubt, a.pending, len(forPerson))
		}
		if keys := r.sim.KeysSince(since); len(keys) > 0 {
			r.t.Errorf("%s sent %d refund calls: every item was sent, adopted or left for a person", what, len(keys))
		}
		if i == 0 {
			r.flush()
		}
	}
	ns := r.flush()
	rc.stop()
	r.t.inject("intents aged 4 days with calls in flight", kills)
	r.t.note("seed %d: %d items; %d kills with calls in flight, each followed by the journal's intents aged 4 days, the receiver down; %d items in doubt then, never sent again: %d adopted from their notification once the receiver was back, %d left in doubt (their call never reached Adyen: no refund); %d runs; %d notifications delivered",
		r.seed, len(p.Items), kills, len(aged), len(aged)-len(forPerson), len(forPerson), runs, ns.Delivered)
	end := r.checkAdyen(p, j, forPerson)
	r.auditAdyen(p, j, end)
}
