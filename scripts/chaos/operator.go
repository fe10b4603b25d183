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
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/stripesim"
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
		snap := takeSnapshot(j)
		pr := r.startRefund(j, p.Path, extra...)
		if round < kills {
			kill.arm(r, pr, gap)
		}
		r.wait(pr)
		kill.disarm()
		r.checkKept(snap)
		switch pr.code {
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
	for item := range r.liveRefunds(batch) {
		done[item] = true
	}
	return done
}

// checkNoCreate counts a problem for every key of batch the simulator
// reserved after the first since for one of items, which says why none
// may be sent (an item that already held a refund must be found by the
// look-up, not refunded again).
func (r *rig) checkNoCreate(batch string, items map[string]bool, since int, what, why string) {
	for _, key := range r.keysSince(since) {
		if b, item, _, ok := parseKey(key); ok && b == batch && items[item] {
			r.t.problemf("%s: key %s was sent for item %s, %s", what, key, item, why)
		}
	}
}

// results are refund's result lines.
func (r *rig) results(pr *proc) []refund.Result {
	var out []refund.Result
	sc := bufio.NewScanner(bytes.NewReader(pr.stdout.Bytes()))
	for sc.Scan() {
		var res refund.Result
		if err := json.Unmarshal(sc.Bytes(), &res); err != nil {
			r.t.problemf("refund wrote a result line that is not JSON: %q", truncate(sc.Bytes(), 120))
			continue
		}
		out = append(out, res)
	}
	return out
}

// calls are the simulator's counts of refund creations and listings.
func (r *rig) calls() (creates, lists int64) {
	st := r.sim.Stats()
	return st.Requests["POST /v1/refunds"], st.Requests["GET /v1/refunds"]
}

const whatNewBatch = "A batch of partial refunds is run under batch `day-1` and killed with SIGKILL at random refund calls until it is done. " +
	"The same charges are then planned under `day-2` and run, into the same journal and into a new one: every item must be held (result `failed`, code `refunded_by_other_batch`, naming batch day-1), exit 1, with zero create calls (one look-up per item). " +
	"Then `day-2` with `--allow-refunded-charges` (into the journal that holds the hold; the old one or the new one by seed), killed at random too, must refund each charge exactly once more and exit 0: two live refunds per charge, exactly, and audit clean for day-2."

func runNewBatch(r *rig, sz sizes) {
	charges := stripesim.GenerateCharges(sz.NewBatchItems, int64(r.seed))
	r.serve(charges, stripesim.Faults{LatencyJitter: time.Millisecond})
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
		r.seed, len(charges), lists, map[bool]string{true: "same", false: "new"}[final == j], len(r.liveRefunds(day2.Batch)))
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
	creates, lists := r.calls()
	keys := r.keyCount()
	snap := takeSnapshot(path)
	pr := r.startRefund(path, p.Path)
	r.wait(pr)
	r.checkKept(snap)
	what := fmt.Sprintf("batch %s on charges batch %s refunded, journal %s", p.Batch, other, path)
	r.expectExit(pr, what, exitFailed)
	held := 0
	for _, res := range r.results(pr) {
		if res.Status == refund.StatusFailed && res.Code == refund.CodeRefundedByOtherBatch && strings.Contains(res.Message, "batch "+other) {
			held++
		} else {
			r.t.problemf("%s: item %s is %s %s, want failed %s naming batch %s", what, res.Item, res.Status, res.Code, refund.CodeRefundedByOtherBatch, other)
		}
	}
	if held != len(p.Items) {
		r.t.problemf("%s: %d items held, want all %d", what, held, len(p.Items))
	}
	creates2, lists2 := r.calls()
	if creates2 != creates || r.keyCount() != keys {
		r.t.problemf("%s: %d create calls, want none", what, creates2-creates)
	}
	st, _, err := journal.Load(path)
	r.must(err)
	for _, it := range p.Items {
		if s, _ := st.Lookup(p.Batch, it.Item.Item); s.Status != journal.StatusFailed || s.Code != refund.CodeRefundedByOtherBatch {
			r.t.problemf("%s: the journal says item %s is %v %q, want failed %s", what, it.Item.Item, s.Status, s.Code, refund.CodeRefundedByOtherBatch)
		}
	}
	r.checkCharges()
	return lists2 - lists
}

const whatStale = "A batch of partial refunds is killed with SIGKILL at a random refund call, again and again. Before each kill, at another random call, the journal is copied as it is at that moment (a backup). " +
	"After each kill the operator puts back a wrong journal, in turn: the copy from earlier in that run, no journal at all (deleted), the oldest copy; and the simulator forgets every idempotency key (Stripe, after 24 hours). " +
	"The next run must find every refund the journal no longer knows by its look-up: no create call for an item that held a refund before the run; at the end every item is refunded exactly once and the journal names its refund."

func runStale(r *rig, sz sizes) {
	charges := stripesim.GenerateCharges(sz.StaleItems, int64(r.seed))
	r.serve(charges, stripesim.Faults{LatencyJitter: time.Millisecond})
	p := r.makePlan("plan.jsonl", "stale", r.writePartialCharges("charges.csv", charges))
	j := r.path("j.jsonl")

	kill := r.newStriker(syscall.SIGKILL)
	var backupAt atomic.Int64
	var backupTo atomic.Pointer[string]
	r.setOnCreate(func(n int64, key string) {
		if at := backupAt.Load(); at > 0 && n >= at && backupAt.CompareAndSwap(at, 0) {
			data, err := os.ReadFile(j) // no journal yet: an empty backup
			if err != nil && !os.IsNotExist(err) {
				r.t.problemf("setup: back up the journal: %v", err)
			}
			if err := os.WriteFile(*backupTo.Load(), data, 0o600); err != nil {
				r.t.problemf("setup: back up the journal: %v", err)
			}
		}
		kill.hook(n, key)
	})

	modes := []string{"replaced by the copy from earlier in the killed run", "deleted", "replaced by the oldest copy"}
	// The journal a run found, for its checks: the mode before it.
	found := "intact"
	done := map[string]int{}
	gap := max(4, len(p.Items)/(sz.StaleRounds+1))
	var backups []string
	before, since := map[string]bool{}, 0
	forgotten, adopted := 0, 0
	for round := 0; ; round++ {
		if round > sz.StaleRounds+10 {
			r.fatalf("not done after %d runs", round)
		}
		killing := round < sz.StaleRounds
		backup := r.path(fmt.Sprintf("backup-%d.jsonl", round))
		snap := takeSnapshot(j)
		var killAt int64
		if killing {
			now := r.creates.Load()
			killAt = now + 1 + r.rng.Int64N(int64(gap))
			backupTo.Store(&backup)
			backupAt.Store(now + 1 + r.rng.Int64N(killAt-now))
		}
		pr := r.startRefund(j, p.Path)
		if killing {
			kill.armAt(pr, killAt)
		}
		r.wait(pr)
		kill.disarm()
		backupAt.Store(0)
		r.checkKept(snap)
		r.checkNoCreate(p.Batch, before, since, "a run after the journal was "+found, "which already had its refund")
		if s, ok := parseSummary(pr.stderr.String()); ok {
			adopted += s.Reconciled
		}
		if pr.code == 0 {
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
		before, since = r.refundedNow(p.Batch), r.keyCount()
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

// shardPlans plans the charges in n shards and checks they split the full
// plan: every item in exactly one shard.
func (r *rig) shardPlans(full *plan, chargesPath string, n int) []*plan {
	shards := make([]*plan, n)
	in := map[string]int{}
	total := 0
	for k := range shards {
		shards[k] = r.makePlan(fmt.Sprintf("shard%d-of-%d.jsonl", k+1, n), full.Batch, chargesPath, "--shard", fmt.Sprintf("%d/%d", k+1, n))
		for _, it := range shards[k].Items {
			in[it.Item.Item]++
		}
		total += len(shards[k].Items)
	}
	for _, it := range full.Items {
		if in[it.Item.Item] != 1 {
			r.t.problemf("item %s is in %d of the %d shards", it.Item.Item, in[it.Item.Item], n)
		}
	}
	if total != len(full.Items) {
		r.t.problemf("the %d shards hold %d items, the plan %d", n, total, len(full.Items))
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

const whatReshard = "Two workers, `plan --shard 1/2` and `--shard 2/2`, each with its journal, run at once and are killed with SIGKILL at random refund calls, twice, leaving the batch half done with items in doubt; the simulator forgets every key. " +
	"The next day three workers (`--shard k/3`, new journals) run it, killed once at random and then resumed until each exits 0: every item that held a refund before must get no create call (its refund is found by the look-up), " +
	"`journal-merge -o all.jsonl` of all five journals must exit 0, and the merged journal must account for every item exactly once (`audit --stripe --plan` clean)."

func runReshard(r *rig, sz sizes) {
	if r.m.bins["journal-merge"] == "" {
		r.t.Skipped = "bin/journal-merge is not built"
		return
	}
	charges := stripesim.GenerateCharges(sz.ReshardItems, int64(r.seed))
	r.serve(charges, stripesim.Faults{LatencyJitter: time.Millisecond})
	chargesPath := r.writePartialCharges("charges.csv", charges)
	full := r.makePlan("plan.jsonl", "reshard", chargesPath)

	two, twoJ := r.shardPlans(full, chargesPath, 2), r.shardJournals(2)
	kills := r.runWorkers(two, twoJ, 2, false)
	forgotten := r.sim.ForgetKeys()
	before, since := r.refundedNow(full.Batch), r.keyCount()

	three, threeJ := r.shardPlans(full, chargesPath, 3), r.shardJournals(3)
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

const whatEdited = "A batch of partial refunds is killed with SIGKILL at a random refund call; then items the journal holds get their charge (or payment intent), amount or currency changed in a copy of the plan, one edit a copy, each kind in turn. " +
	"`refund` over the edited plan must exit 2 naming `file:line` of the edited item and both values; when every item before it is settled in the journal it must make zero API calls (no look-up, no create), and in any case no key may be sent for the edited item or any after it. " +
	"The edited charges are real charges of the simulator outside the plan: a refund sent there would count as a duplicate. After each round the original plan resumes; at the end it finishes with exit 0, every item once."

// edits change one plan line the way an operator would after a crash:
// they return the line edited and the old and new values as refund's
// message quotes them.
var edits = []struct {
	name string
	edit func(r *rig, it *plannedItem, spare stripesim.Charge) (from, to string, ok bool)
}{
	{"charge", func(r *rig, it *plannedItem, spare stripesim.Charge) (string, string, bool) {
		if it.PaymentIntent != "" {
			return strconv.Quote(it.PaymentIntent), strconv.Quote(spare.PaymentIntent), true
		}
		return strconv.Quote(it.Charge), strconv.Quote(spare.ID), true
	}},
	{"amount", func(r *rig, it *plannedItem, _ stripesim.Charge) (string, string, bool) {
		if it.Amount == 0 {
			return "", "", false
		}
		return strconv.FormatInt(it.Amount, 10), strconv.FormatInt(it.Amount+1+r.rng.Int64N(9), 10), true
	}},
	{"currency", func(r *rig, it *plannedItem, _ stripesim.Charge) (string, string, bool) {
		if it.Currency == "" {
			return "", "", false
		}
		return strconv.Quote(it.Currency), strconv.Quote("eur"), true
	}},
}

func runEdited(r *rig, sz sizes) {
	all := stripesim.GenerateCharges(sz.EditItems+2*sz.EditRounds+2, int64(r.seed))
	charges, spares := all[:sz.EditItems], all[sz.EditItems:]
	r.serve(all, stripesim.Faults{LatencyJitter: time.Millisecond})
	p := r.makePlan("plan.jsonl", "edited", r.writePartialCharges("charges.csv", charges))
	lines := bytes.SplitAfter(r.readFile(p.Path), []byte("\n"))
	j := r.path("j.jsonl")
	kill := r.newStriker(syscall.SIGKILL)
	gap := max(2, len(p.Items)/(sz.EditRounds+1))

	var edited, silent [2]int // by prefix: [0] any item held, [1] every item before it settled
	for round := 0; ; round++ {
		if round > sz.EditRounds+10 {
			r.fatalf("not done after %d runs", round)
		}
		snap := takeSnapshot(j)
		pr := r.startRefund(j, p.Path)
		if round < sz.EditRounds {
			kill.arm(r, pr, gap)
		}
		r.wait(pr)
		kill.disarm()
		r.checkKept(snap)
		if pr.code == 0 {
			break
		}
		if !r.expectExit(pr, "a run under kill -9", -int(syscall.SIGKILL)) {
			continue
		}
		st, _, err := journal.Load(j)
		r.must(err)
		// Each kind on an item all of whose predecessors are settled (no
		// call may be made), then one on any item the journal holds.
		for k := range len(edits) + 1 {
			e, prefix := edits[k%len(edits)], k < len(edits)
			if !prefix {
				e = edits[round%len(edits)]
			}
			at := r.pickEdit(p, st, prefix)
			if at < 0 {
				continue
			}
			it := &p.Items[at]
			from, to, ok := e.edit(r, it, spares[(round*2+k/len(edits))%len(spares)])
			if !ok {
				continue
			}
			field := jsonField(e.name, it)
			line := lines[at]
			changed := bytes.Replace(line, []byte(fmt.Sprintf("%q:%s", field, from)), []byte(fmt.Sprintf("%q:%s", field, to)), 1)
			if bytes.Equal(changed, line) {
				r.fatalf("setup: plan line %d has no %s %s: %s", at+1, field, from, line)
			}
			path := r.path(fmt.Sprintf("edited-%d-%d-%s.jsonl", round, k, e.name))
			var b bytes.Buffer
			for i, l := range lines {
				if i == at {
					l = changed
				}
				b.Write(l)
			}
			r.must(os.WriteFile(path, b.Bytes(), 0o600))
			v := 0
			if prefix {
				v = 1
			}
			edited[v]++
			if r.checkEditRefused(p, j, path, at, e.name, from, to, prefix) {
				silent[v]++
			}
		}
	}
	r.t.inject("plan items edited after a crash", edited[0]+edited[1])
	r.t.note("seed %d: %d items; %d edited plans refused: %d with every item before the edit settled, all with zero API calls (%d); %d at any item the journal holds, %d of them with zero API calls (the others went on with items before the edit)",
		r.seed, len(p.Items), edited[0]+edited[1], edited[1], silent[1], edited[0], silent[0])
	r.finish(p, j)
}

// jsonField is the plan field an edit of kind changes.
func jsonField(kind string, it *plannedItem) string {
	if kind == "charge" && it.PaymentIntent != "" {
		return "payment_intent"
	}
	return kind
}

// pickEdit draws a plan item the journal holds an intent of, by index, or
// -1 if none. With settledBefore it draws among items all of whose
// predecessors the journal has settled (refunded or failed for good): the
// run then has nothing to call before it reaches the edited line.
func (r *rig) pickEdit(p *plan, st *journal.State, settledBefore bool) int {
	var held []int
	for i, it := range p.Items {
		s, known := st.Lookup(p.Batch, it.Item.Item)
		if known && s.Sent {
			held = append(held, i)
		}
		if settledBefore && s.Status != journal.StatusRefunded && s.Status != journal.StatusFailed {
			break // known or not, a later item has this one before it
		}
	}
	if len(held) == 0 {
		return -1
	}
	return held[r.rng.IntN(len(held))]
}

// checkEditRefused runs refund over an edited plan and checks it refused
// the edited line, at, before sending anything for it or after it; with
// prefix, before any API call at all. It reports whether no call was made.
func (r *rig) checkEditRefused(p *plan, j, path string, at int, kind, from, to string, prefix bool) bool {
	it := &p.Items[at]
	what := fmt.Sprintf("plan with item %s's %s edited from %s to %s at line %d", it.Item.Item, kind, from, to, at+1)
	creates, lists := r.calls()
	keys := r.keyCount()
	snap := takeSnapshot(j)
	pr := r.startRefund(j, path)
	r.wait(pr)
	r.checkKept(snap)
	r.expectExit(pr, what, exitUsage)
	msg := pr.stderr.String()
	if want := fmt.Sprintf("%s:%d:", path, at+1); !strings.Contains(msg, want) {
		r.t.problemf("%s: the message does not name %s: %s", what, want, firstLines(msg, 2))
	}
	if !strings.Contains(msg, from) || !strings.Contains(msg, to) {
		r.t.problemf("%s: the message does not name both %s and %s: %s", what, from, to, firstLines(msg, 2))
	}
	after := map[string]bool{}
	for _, later := range p.Items[at:] {
		after[later.Item.Item] = true
	}
	r.checkNoCreate(p.Batch, after, keys, what, "at or after the edited line")
	creates2, lists2 := r.calls()
	silent := creates2 == creates && lists2 == lists
	if prefix && !silent {
		r.t.problemf("%s: every item before it is settled, yet refund made %d create and %d list calls", what, creates2-creates, lists2-lists)
	}
	return silent
}

func (r *rig) readFile(path string) []byte {
	data, err := os.ReadFile(path)
	r.must(err)
	return data
}
