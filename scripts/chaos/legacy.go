package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

const whatLegacy = "An old script without a checkpoint refunded part of the batch (every third charge, for the amount the plan asks: full or partial) with no refundkit metadata, then died. " +
	"`audit --stripe --all-refunds --plan` over an empty journal must name every affected charge in a finding other than `missing`, and no other charge; " +
	"`audit --stripe --all-refunds --plan --backfill J J` must journal each of those refunds (source backfill); `refund --journal J` then finishes the batch with exit 0, skipping the affected items: " +
	"no affected charge may get a second refund. `audit --stripe --plan J` (with and without `--all-refunds`) must then exit 0."

func runLegacy(r *rig, sz sizes) {
	charges := stripesim.GenerateCharges(sz.LegacyItems, int64(r.seed))
	csvPath := r.writeCharges("charges.csv", charges)
	// The old run's refunds, as the plan asks for them (writeCharges plans
	// half of every 5th charge).
	affected := map[string]bool{}
	for i := range charges {
		if i%sz.LegacyRefundedEach != 0 {
			continue
		}
		amount := charges[i].Amount
		if i%5 == 0 {
			amount /= 2
		}
		charges[i].Refunds = []stripesim.SeedRefund{{Amount: amount, Reason: "requested_by_customer"}}
		affected[charges[i].ID] = true
	}
	r.serve(charges, stripesim.Faults{})
	p := r.makePlan("plan.jsonl", "legacy", csvPath)
	for i := range p.Items {
		if affected[r.paymentOf(p.Items[i].Target())] {
			p.Items[i].Want = 0 // nothing more is to be refunded
		}
	}
	j := r.path("j.jsonl")
	r.must(os.WriteFile(j, nil, 0o600))
	seeded := map[string]string{} // charge -> the old run's refund
	for _, rf := range r.sim.Refunds() {
		seeded[rf.Charge] = rf.ID
	}

	// Find them.
	find := r.run(nil, "audit", "--stripe", "--all-refunds", "--rate", "0", "--plan", p.Path, j)
	r.expectExit(find, "audit --all-refunds after the old run", exitFailed)
	named := r.chargesNamed(find.Stdout.Bytes())
	found := 0
	for ch := range affected {
		if named[ch] {
			found++
		} else {
			r.t.Errorf("audit --all-refunds does not name charge %s, refunded by the old run", ch)
		}
	}
	for ch := range named {
		if !affected[ch] {
			r.t.Errorf("audit --all-refunds names charge %s, which the old run did not touch", ch)
		}
	}

	// Backfill them, then finish the batch.
	fill := r.run(nil, "audit", "--stripe", "--all-refunds", "--rate", "0", "--plan", p.Path, "--backfill", j, j)
	r.expectExit(fill, "audit --backfill", 0, exitFailed)
	snap := crashrig.TakeSnapshot(j)
	pr := r.startRefund(j, p.Path)
	r.wait(pr)
	r.checkKept(snap)
	r.expectExit(pr, "refund after the backfill", 0)
	if s, ok := parseSummary(pr.Stderr.String()); !ok || s.Skipped != len(affected) {
		r.t.Errorf("refund after the backfill skipped %d items, want the %d the old run refunded", s.Skipped, len(affected))
	}
	r.t.inject("refunds by an old uncheckpointed run", len(affected))
	r.t.note("seed %d: %d items, %d refunded by the old run; audit --all-refunds named %d of them", r.seed, len(p.Items), len(affected), found)

	// At Stripe: the old run's refund is the one meant on each affected
	// charge (checkOnce counts any more); in the journal: that refund.
	st, _, err := journal.Load(j)
	r.must(err)
	var rest plan
	rest.Path, rest.Batch, rest.index = p.Path, p.Batch, map[string]int{}
	for _, it := range p.Items {
		ch := r.paymentOf(it.Target())
		if !affected[ch] {
			rest.index[it.Item.Item] = len(rest.Items)
			rest.Items = append(rest.Items, it)
			continue
		}
		r.extra[ch]++
		if s, _ := st.Lookup(p.Batch, it.Item.Item); s.Status != journal.StatusRefunded || s.Refund != seeded[ch] {
			r.t.Errorf("item %s: the journal says %v by %q, want the old run's refund %s", it.Item.Item, s.Status, s.Refund, seeded[ch])
		}
	}
	r.t.Items += len(p.Items) - len(rest.Items) // checkOnce counts the rest
	r.checkOnce(&rest, j)
	r.audit(p, j)
	all := r.run(nil, "audit", "--stripe", "--all-refunds", "--rate", "0", "--plan", p.Path, j)
	r.expectExit(all, "audit --stripe --all-refunds after the backfill and the run", 0)
}

// chargesNamed are the charges (payment intents resolved) that audit's
// findings name, except findings of kind missing.
func (r *rig) chargesNamed(findings []byte) map[string]bool {
	named := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(findings))
	for sc.Scan() {
		var f struct {
			Finding       string `json:"finding"`
			Charge        string `json:"charge"`
			PaymentIntent string `json:"payment_intent"`
		}
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			r.t.Errorf("audit wrote a line that is not JSON: %q", truncate(sc.Bytes(), 120))
			continue
		}
		if f.Finding == "missing" {
			continue
		}
		if pay, ok := r.payments[f.Charge+f.PaymentIntent]; ok {
			named[pay.ID] = true
		}
	}
	return named
}
