package main

// Operator rows: what people do between runs (a new batch name, a journal
// restored from a backup or lost, another worker count, an edited plan).
// The promise is per charge: every row plans partial refunds, so a second
// refund of a charge would succeed at Stripe and nothing hides it.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// runKilled runs refund over p into j until it exits 0, killing it with
// SIGKILL at a random refund call in each of the first kills runs, and
// returns how many runs were killed. Every run must keep the journal's
// records.
func (r *rig) runKilled(p *plan, j string, kills int, extra ...string) int {
	kill := r.newStriker(syscall.SIGKILL)
	gap := max(2, len(p.Items)/(kills+1))
	killed := 0
	for round := 0; ; round++ {
		if round > kills+10 {
			r.fatalf("%s: not done after %d runs", p.Batch, round)
		}
		snap := crashrig.TakeSnapshot(j)
		pr := r.startRefund(j, p.Path, extra...)
		if round < kills {
			kill.Arm(r.sim, pr.Proc, r.rng, gap)
		}
		r.wait(pr)
		kill.Disarm()
		r.checkKept(snap)
		switch pr.Code {
		case 0:
			return killed
		case -int(syscall.SIGKILL):
			killed++
		default:
			r.expectExit(pr, "a run under kill -9", 0, -int(syscall.SIGKILL))
		}
	}
}

// refundedNow are the items of batch that hold a live refund at the
// simulator.
func (r *rig) refundedNow(batch string) map[string]bool {
	done := map[string]bool{}
	for item := range r.sim.LiveRefunds(batch) {
		done[item] = true
	}
	return done
}

// checkNoCreate counts a problem for every key of batch the simulator
// reserved after the first since for one of items, which says why none
// may be sent (an item that already held a refund must be found by the
// look-up, not refunded again).
func (r *rig) checkNoCreate(batch string, items map[string]bool, since int64, what, why string) {
	for _, key := range r.sim.KeysSince(since) {
		if b, item, _, ok := parseKey(key); ok && b == batch && items[item] {
			r.t.Errorf("%s: key %s was sent for item %s, %s", what, key, item, why)
		}
	}
}

// results are refund's result lines.
func (r *rig) results(pr *proc) []refund.Result {
	var out []refund.Result
	sc := bufio.NewScanner(bytes.NewReader(pr.Stdout.Bytes()))
	for sc.Scan() {
		var res refund.Result
		if err := json.Unmarshal(sc.Bytes(), &res); err != nil {
			r.t.Errorf("refund wrote a result line that is not JSON: %q", truncate(sc.Bytes(), 120))
			continue
		}
		out = append(out, res)
	}
	return out
}

// calls are the simulator's counts of refund creations and look-ups
// (listings, and reads of a charge with its refunds).
func (r *rig) calls() (creates, lists int64) {
	st := r.sim.Stats()
	return st.Requests["POST /v1/refunds"], st.Requests["GET /v1/refunds"] + st.Requests["GET /v1/charges/{id}"]
}

const whatNewBatch = "A batch of partial refunds is run under batch `day-1` and killed with SIGKILL at random refund calls until it is done. " +
	"The same charges are then planned under `day-2` and run, into the same journal and into a new one: every item must be held (result `failed`, code `refunded_by_other_batch`, naming batch day-1), exit 1, with zero create calls (one look-up per item). " +
	"Then `day-2` with `--allow-refunded-charges` (into the journal that holds the hold; the old one or the new one by seed), killed at random too, must refund each charge exactly once more and exit 0: two live refunds per charge, exactly, and audit clean for day-2."

func runNewBatch(r *rig, sz sizes) {
	charges := r.serveCharges(sz.NewBatchItems, stripesim.Faults{LatencyJitter: time.Millisecond})
	csvPath := r.writePartialCharges("charges.csv", charges)
	day1 := r.makePlan("day1.jsonl", "day-1", csvPath)
	j := r.path("j.jsonl")
	kills := r.runKilled(day1, j, sz.NewBatchKills)
	r.finish(day1, j)

	day2 := r.makePlan("day2.jsonl", "day-2", csvPath)
	journals := []string{j, r.path("new.jsonl")}
	lists := int64(0)
	for _, path := range journals {
		lists += r.checkHeld(day2, path, "day-1")
	}
	r.t.inject("runs of a new batch id on refunded charges", len(journals))

	final := journals[r.seed%2]
	kills += r.runKilled(day2, final, max(1, sz.NewBatchKills/2), "--allow-refunded-charges")
	r.t.inject("kill -9 with a call in flight", kills)
	// Two plans meant: two live refunds a charge. The old journal holds
	// both batches, so audit reads both plans there.
	r.checkOnce(day2, final)
	if final == j {
		r.audit(r.joinPlans("both.jsonl", day1, day2), final)
	} else {
		r.audit(day2, final)
	}
	r.t.note("seed %d: %d charges; day-2 held twice with 0 create calls and %d look-ups; with --allow-refunded-charges into the %s journal: %d refunds more, 2 live refunds on each charge",
		r.seed, len(charges), lists, map[bool]string{true: "same", false: "new"}[final == j], len(r.sim.LiveRefunds(day2.Batch)))
}

// joinPlans writes the plans' lines into one plan file, for audit.
func (r *rig) joinPlans(name string, plans ...*plan) *plan {
	var b bytes.Buffer
	for _, p := range plans {
		b.Write(r.readFile(p.Path))
	}
	path := r.path(name)
	r.must(os.WriteFile(path, b.Bytes(), 0o600))
	return &plan{Path: path}
}

// checkHeld runs p into journal path on charges another batch refunded:
// every item must be held with nothing sent, exit 1. It returns the
// look-ups made.
func (r *rig) checkHeld(p *plan, path, other string) int64 {
	snap := crashrig.TakeSnapshot(path)
	lists := r.heldRun(p, "journal "+path, other, func() *proc {
		pr := r.startRefund(path, p.Path)
		r.wait(pr)
		return pr
	})
	r.checkKept(snap)
	r.checkHeldJournal(p, "journal "+path, path)
	return lists
}

// heldRun runs p by run on charges batch other refunded (where names the
// checkpoint): every item must be held with nothing sent, exit 1. It
// returns the look-ups made.
func (r *rig) heldRun(p *plan, where, other string, run func() *proc) int64 {
	creates, lists := r.calls()
	keys := r.sim.Creates()
	pr := run()
	what := fmt.Sprintf("batch %s on charges batch %s refunded, %s", p.Batch, other, where)
	r.expectExit(pr, what, exitFailed)
	held := 0
	for _, res := range r.results(pr) {
		if res.Status == refund.StatusFailed && res.Code == refund.CodeRefundedByOtherBatch && strings.Contains(res.Message, "batch "+other) {
			held++
		} else {
			r.t.Errorf("%s: item %s is %s %s, want failed %s naming batch %s", what, res.Item, res.Status, res.Code, refund.CodeRefundedByOtherBatch, other)
		}
	}
	if held != len(p.Items) {
		r.t.Errorf("%s: %d items held, want all %d", what, held, len(p.Items))
	}
	creates2, lists2 := r.calls()
	if creates2 != creates || r.sim.Creates() != keys {
		r.t.Errorf("%s: %d create calls, want none", what, creates2-creates)
	}
	r.checkPayments()
	return lists2 - lists
}

// checkHeldJournal checks that the journal at path (of the checkpoint
// where names) holds every item of p as held.
func (r *rig) checkHeldJournal(p *plan, where, path string) {
	st, _, err := journal.Load(path)
	r.must(err)
	for _, it := range p.Items {
		if s, _ := st.Lookup(p.Batch, it.Item.Item); s.Status != journal.StatusFailed || s.Code != refund.CodeRefundedByOtherBatch {
			r.t.Errorf("%s: item %s is %v %q there, want failed %s", where, it.Item.Item, s.Status, s.Code, refund.CodeRefundedByOtherBatch)
		}
	}
}

const whatStale = "A batch of partial refunds is killed with SIGKILL at a random refund call, again and again. Before each kill, at another random call, the journal is copied as it is at that moment (a backup). " +
	"After each kill the operator puts back a wrong journal, in turn: the copy from earlier in that run, no journal at all (deleted), the oldest copy; and the simulator forgets every idempotency key (Stripe, after 24 hours). " +
	"The next run must find every refund the journal no longer knows by its look-up: no create call for an item that held a refund before the run; at the end every item is refunded exactly once and the journal names its refund."

func runStale(r *rig, sz sizes) {
	p := r.newPartialBatch(sz.StaleItems, stripesim.Faults{LatencyJitter: time.Millisecond}, "stale")
	j := r.path("j.jsonl")

	kill := r.newStriker(syscall.SIGKILL)
	var backupAt atomic.Int64
	var backupTo atomic.Pointer[string]
	r.sim.OnCreate(func(n int64, key string) {
		if at := backupAt.Load(); at > 0 && n >= at && backupAt.CompareAndSwap(at, 0) {
			data, err := os.ReadFile(j) // no journal yet: an empty backup
			if err != nil && !os.IsNotExist(err) {
				r.t.Errorf("setup: back up the journal: %v", err)
			}
			if err := os.WriteFile(*backupTo.Load(), data, 0o600); err != nil {
				r.t.Errorf("setup: back up the journal: %v", err)
			}
		}
		kill.Hook(n, key)
	})

	modes := []string{"replaced by the copy from earlier in the killed run", "deleted", "replaced by the oldest copy"}
	// The journal a run found, for its checks: the mode before it.
	found := "intact"
	done := map[string]int{}
	gap := max(4, len(p.Items)/(sz.StaleRounds+1))
	var backups []string
	before, since := map[string]bool{}, int64(0)
	forgotten, adopted := 0, 0
	for round := 0; ; round++ {
		if round > sz.StaleRounds+10 {
			r.fatalf("not done after %d runs", round)
		}
		killing := round < sz.StaleRounds
		backup := r.path(fmt.Sprintf("backup-%d.jsonl", round))
		snap := crashrig.TakeSnapshot(j)
		var killAt int64
		if killing {
			now := r.sim.Creates()
			killAt = now + 1 + r.rng.Int64N(int64(gap))
			backupTo.Store(&backup)
			backupAt.Store(now + 1 + r.rng.Int64N(killAt-now))
		}
		pr := r.startRefund(j, p.Path)
		if killing {
			kill.ArmAt(pr.Proc, killAt)
		}
		r.wait(pr)
		kill.Disarm()
		backupAt.Store(0)
		r.checkKept(snap)
		r.checkNoCreate(p.Batch, before, since, "a run after the journal was "+found, "which already had its refund")
		if s, ok := parseSummary(pr.Stderr.String()); ok {
			adopted += s.Reconciled
		}
		if pr.Code == 0 {
			break
		}
		if !r.expectExit(pr, "a run under kill -9", -int(syscall.SIGKILL)) {
			continue
		}
		if _, err := os.Stat(backup); err == nil {
			backups = append(backups, backup)
		}
		// The operator's mistake. The journal it replaces is kept aside:
		// its intents still count for the write-ahead check.
		mode := round % len(modes)
		if _, err := os.Stat(j); err == nil {
			retired := r.path(fmt.Sprintf("retired-%d.jsonl", round))
			r.must(os.Rename(j, retired))
			r.retired = append(r.retired, retired)
		}
		switch {
		case mode == 1 || len(backups) == 0:
			mode = 1
		case mode == 0:
			r.must(copyFile(backups[len(backups)-1], j))
		default:
			r.must(copyFile(backups[0], j))
		}
		done[modes[mode]]++
		found = modes[mode]
		forgotten += r.sim.ForgetKeys()
		before, since = r.refundedNow(p.Batch), r.sim.Creates()
		r.t.inject("journals put back stale or deleted", 1)
	}
	r.t.inject("key expiries", done[modes[0]]+done[modes[1]]+done[modes[2]])
	r.t.note("seed %d: %d items; the journal %d times replaced by a copy from earlier in the killed run, %d times deleted, %d times replaced by the oldest copy; %d keys forgotten; %d refunds found by the look-up instead of sent",
		r.seed, len(p.Items), done[modes[0]], done[modes[1]], done[modes[2]], forgotten, adopted)
	r.finish(p, j)
}

func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o600)
}

const whatReshard = "Two workers, `refund --shard 1/2` and `--shard 2/2` over the whole plan, each with its journal, run at once and are killed with SIGKILL at random refund calls, twice, leaving the batch half done with items in doubt; the simulator forgets every key. " +
	"The next day three workers (`--shard k/3`, new journals) run it, killed once at random and then resumed until each exits 0: every item that held a refund before must get no create call (its refund is found by the look-up), " +
	"`journal-merge -o all.jsonl` of all five journals must exit 0, and the merged journal must account for every item exactly once (`audit --stripe --plan` clean)."

func runReshard(r *rig, sz sizes) {
	full := r.newPartialBatch(sz.ReshardItems, stripesim.Faults{LatencyJitter: time.Millisecond}, "reshard")

	two, twoJ := r.shardPlans(full, 2), r.shardJournals(2)
	kills := r.runWorkers(two, twoJ, 2, false)
	forgotten := r.sim.ForgetKeys()
	before, since := r.refundedNow(full.Batch), r.sim.Creates()

	three, threeJ := r.shardPlans(full, 3), r.shardJournals(3)
	kills += r.runWorkers(three, threeJ, 1, true)
	r.checkNoCreate(full.Batch, before, since, "a worker of 3 after 2", "which already had its refund")
	r.t.inject("shard workers killed", kills)
	r.t.inject("reshards, keys forgotten", 1)
	r.t.note("seed %d: %d items; 2 workers left %d refunded and were killed %d times in all; %d keys forgotten; 3 workers finished with no create call for those",
		r.seed, len(full.Items), len(before), kills, forgotten)

	merged := r.path("all.jsonl")
	pr := r.run(nil, "journal-merge", append([]string{"-o", merged}, append(twoJ, threeJ...)...)...)
	r.expectExit(pr, "journal-merge of 2 and 3 shards' journals", 0)
	r.finish(full, merged)
}

// shardPlans splits the full plan in n shards as refund --shard k/n
// works them, each worker reading the whole plan, and checks they split
// it: every item in exactly one shard.
func (r *rig) shardPlans(full *plan, n int) []*plan {
	shards := make([]*plan, n)
	for k := range shards {
		shards[k] = &plan{Path: full.Path, Batch: full.Batch, index: map[string]int{}, Args: []string{"--shard", fmt.Sprintf("%d/%d", k+1, n)}}
	}
	for _, it := range full.Items {
		sp := shards[refund.ShardOf(full.Batch, it.Target(), n)-1]
		sp.index[it.Item.Item] = len(sp.Items)
		sp.Items = append(sp.Items, it)
	}
	total := 0
	for _, sp := range shards {
		total += len(sp.Items)
	}
	if total != len(full.Items) {
		r.t.Errorf("the %d shards hold %d items, the plan %d", n, total, len(full.Items))
	}
	return shards
}

func (r *rig) shardJournals(n int) []string {
	journals := make([]string, n)
	for k := range journals {
		journals[k] = r.path(fmt.Sprintf("j%d-of-%d.jsonl", k+1, n))
	}
	return journals
}

func (r *rig) readFile(path string) []byte {
	data, err := os.ReadFile(path)
	r.must(err)
	return data
}
