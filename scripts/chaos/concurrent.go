package main

import (
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

const whatConcurrent = "Two operators, one journal: while a first `refund` holds the journal with a refund call in flight (held in the simulator's create hook), a second `refund` on the same journal must refuse at once with exit 4, naming the journal and the lock; " +
	"the first is then killed with SIGKILL (the lock must die with it: the next round's first run takes it), except in the last round where it goes on to finish the batch. " +
	"Two workers, two shards: `refund --shard 1/2` and `--shard 2/2`, each fed the whole plan, split it with no item in both or neither; the two run concurrently with a journal each, each killed with SIGKILL at one of its refund calls drawn at random, three times over, then resumed; " +
	"`journal-merge -o all.jsonl` merges the journals, and the merged journal must account for every item of the whole plan exactly once (and `audit --stripe --plan` on it exit 0)."

func runConcurrent(r *rig, sz sizes) {
	lockItems := 8*sz.LockRounds + 10 // each round refunds a few before its kill
	shardCharges := stripesim.GenerateCharges(sz.ShardItems, int64(r.seed))
	lockCharges := renamed(stripesim.GenerateCharges(lockItems, int64(r.seed)+1), "lock")
	r.serve(append(shardCharges, lockCharges...), stripesim.Faults{LatencyJitter: time.Millisecond})

	r.runLocked(sz, r.makePlan("lock-plan.jsonl", "lock", r.writeCharges("lock.csv", lockCharges)))
	r.runShards(r.writeCharges("charges.csv", shardCharges))
}

// renamed gives generated charges ids of their own (ch_<tag>0000001...), so
// a simulator can hold two generated sets.
func renamed(charges []stripesim.Charge, tag string) []stripesim.Charge {
	for i := range charges {
		charges[i].ID = strings.Replace(charges[i].ID, "sim", tag, 1)
		charges[i].PaymentIntent = strings.Replace(charges[i].PaymentIntent, "sim", tag, 1)
	}
	return charges
}

func (r *rig) runLocked(sz sizes, p *plan) {
	j := r.path("lock.jsonl")
	current := r.parkCreates()
	defer r.sim.OnCreate(nil)

	refused, killed := 0, 0
	for round := range sz.LockRounds {
		h := r.newHold(r.sim.Creates()+1+r.rng.Int64N(4), 1)
		current.Store(h)
		snap := crashrig.TakeSnapshot(j)
		first := r.startRefund(j, p.Path, "-j", "2")
		waited := r.background(first)
		select {
		case <-h.Held():
			second := r.startRefund(j, p.Path)
			r.wait(second)
			if r.expectExit(second, "a second run on a held journal", exitLocked) {
				refused++
			}
			if msg := second.Stderr.String(); !strings.Contains(msg, "locked by another run") || !strings.Contains(msg, j) {
				r.t.Errorf("the second run's message does not name the journal and the lock: %s", firstLines(msg, 3))
			}
			if round < sz.LockRounds-1 {
				// Killed, so later rounds have items left; the lock must
				// die with the process.
				first.Cmd.Process.Kill()
				killed++
			}
			h.Free()
		case <-waited: // the batch was done before the hold
			current.Store(nil)
		}
		<-waited
		r.checkKept(snap)
		r.expectExit(first, "the run holding the journal", 0, -int(syscall.SIGKILL))
	}
	final := r.startRefund(j, p.Path)
	r.wait(final)
	r.expectExit(final, "the run after the second runs", 0)
	r.t.inject("second runs refused", refused)
	r.t.inject("holders killed", killed)
	r.finish(p, j)
}

func (r *rig) runShards(chargesPath string) {
	full := r.makePlan("plan.jsonl", "shards", chargesPath)
	shards := r.shardPlans(full, 2)
	journals := []string{r.path("j1.jsonl"), r.path("j2.jsonl")}
	kills := r.runWorkers(shards, journals, 3, true)
	r.t.inject("shard workers killed", kills)

	if r.m.bins["journal-merge"] == "" {
		// The merge is the missing step: check the two journals together.
		r.t.note("seed %d: bin/journal-merge was not built: the two shard journals were checked and audited together, unmerged", r.seed)
		r.finish(full, journals...)
		return
	}
	merged := r.path("all.jsonl")
	pr := r.run(nil, "journal-merge", append([]string{"-o", merged}, journals...)...)
	r.expectExit(pr, "journal-merge of the shards", 0)
	r.finish(full, merged)
}

// runWorkers runs one refund worker per shard plan, each with its journal,
// all at once, round after round. In the first killRounds rounds each is
// killed with SIGKILL at one of its own refund calls, drawn at random from
// the simulator's hook; then, if untilDone, they run until every one exits
// 0. It returns how many workers were killed.
func (r *rig) runWorkers(shards []*plan, journals []string, killRounds int, untilDone bool) int {
	shardOf := map[string]int{}
	for k, sp := range shards {
		for _, it := range sp.Items {
			shardOf[refund.IdempotencyKey(sp.Batch, it.Item.Item, 1)] = k
		}
	}
	procs := make([]atomic.Pointer[proc], len(shards))
	seen := make([]atomic.Int64, len(shards))
	marks := make([]atomic.Int64, len(shards))
	r.sim.OnCreate(func(_ int64, key string) {
		k, ok := shardOf[key]
		if !ok {
			return
		}
		if n := seen[k].Add(1); n == marks[k].Load() {
			if pr := procs[k].Load(); pr != nil {
				pr.Cmd.Process.Kill()
				<-pr.Exited()
			}
		}
	})
	defer r.sim.OnCreate(nil)
	kills := 0
	for round := 0; round < killRounds || untilDone; round++ {
		if round > killRounds+10 {
			r.fatalf("the shards are not done after %d rounds", round)
		}
		var wg sync.WaitGroup
		snaps := make([]crashrig.Snapshot, len(shards))
		ran := make([]*proc, len(shards))
		for k := range shards {
			snaps[k] = crashrig.TakeSnapshot(journals[k])
			ran[k] = r.startRefund(journals[k], shards[k].Path, shards[k].Args...)
			if round < killRounds {
				procs[k].Store(ran[k])
				marks[k].Store(seen[k].Load() + 1 + r.rng.Int64N(int64(max(1, len(shards[k].Items)/(2*killRounds)))))
			}
			wg.Go(func() { r.wait(ran[k]) })
		}
		wg.Wait()
		done := true
		for k, pr := range ran {
			procs[k].Store(nil)
			marks[k].Store(0)
			r.checkKept(snaps[k])
			if pr.Code == -int(syscall.SIGKILL) {
				kills++
			}
			r.expectExit(pr, "a shard worker", 0, -int(syscall.SIGKILL))
			done = done && pr.Code == 0
		}
		if done {
			break
		}
	}
	return kills
}
