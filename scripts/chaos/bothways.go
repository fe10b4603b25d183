package main

// The row of one payment named two ways in three shards.

import (
	"strconv"
	"time"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
)

const whatShardBothWays = "One payment, two names, three shards: a plan that names every third payment twice, by its charge and by its payment intent, a partial refund (a third) each, is refused by `plan --shard` (exit 2: plan cannot tell offline that a charge and an intent are one payment) and split by `refund --shard k/3` over the whole plan, so the two items of one payment may be worked by two workers at once, each knowing the other's item; " +
	"the three run concurrently with a journal each, each killed with SIGKILL at one of its refund calls drawn at random, three times over, then resumed until each exits 0; " +
	"`journal-merge` of the three journals must account for every item exactly once, each payment must hold exactly the refunds its items plan (none held, none twice), and `audit --stripe --plan` must be clean, as for the same plan run unsplit."

func runShardBothWays(r *rig, sz sizes) {
	charges := r.serveCharges(sz.ShardItems, stripesim.Faults{LatencyJitter: time.Millisecond})
	rows := [][]string{{"item", "charge", "payment_intent", "amount", "currency"}}
	for i, ch := range charges {
		third := strconv.FormatInt(ch.Amount/3, 10)
		rows = append(rows, []string{"c" + strconv.Itoa(i), ch.ID, "", third, "usd"})
		if i%3 == 0 {
			rows = append(rows, []string{"p" + strconv.Itoa(i), "", ch.PaymentIntent, third, "usd"})
		}
	}
	chargesPath := r.writeCSV("charges.csv", rows)
	if pr := r.run(nil, "plan", "--batch", "both", "--shard", "1/3", chargesPath); pr.Code != exitUsage {
		r.t.Errorf("plan --shard of a plan naming payments both ways exited %d, want %d: %s", pr.Code, exitUsage, firstLines(pr.Stderr.String(), 2))
	}
	full := r.makePlan("plan.jsonl", "both", chargesPath)
	split := 0
	for _, it := range full.Items {
		if it.PaymentIntent != "" && refund.ShardOf(full.Batch, it.PaymentIntent, 3) != refund.ShardOf(full.Batch, r.paymentOf(it.PaymentIntent), 3) {
			split++
		}
	}
	shards, journals := r.shardPlans(full, 3), r.shardJournals(3)
	kills := r.runWorkers(shards, journals, 3, true)
	r.t.inject("shard workers killed", kills)
	r.t.note("seed %d: %d items on %d payments; %d payments named both ways, %d of them split across two workers", r.seed, len(full.Items), len(charges), (len(charges)+2)/3, split)
	merged := r.path("all.jsonl")
	pr := r.run(nil, "journal-merge", append([]string{"-o", merged}, journals...)...)
	r.expectExit(pr, "journal-merge of the three shards", 0)
	r.finish(full, merged)
}
