package main

import (
	"maps"
	"slices"
	"strings"

	"github.com/refundkit/refundkit/refund/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// checkOnce is the end of every scenario run: exactly once per planned
// item at the simulator and in the journals (crashrig's CheckOnce), no
// charge holding more live refunds than the plans meant to run on it
// intend, and every key the simulator saw journaled as an intent first.
func (r *rig) checkOnce(p *plan, journals ...string) {
	r.t.Items += len(p.Items)
	r.mean(p)
	want := make([]crashrig.Want, len(p.Items))
	for i, it := range p.Items {
		want[i] = crashrig.Want{Item: it.Item.Item, Charge: it.Charge, PaymentIntent: it.PaymentIntent, Amount: it.Want}
	}
	r.t.Missing += r.sim.CheckOnce(r.t, p.Batch, want, journals...)
	r.checkCharges()
	r.checkIntents(p.Batch, journals...)
}

// mean records that p's refunds are meant to stay at the simulator.
func (r *rig) mean(p *plan) {
	if !slices.Contains(r.meant, p) {
		r.meant = append(r.meant, p)
	}
}

// chargeOf is the simulator's charge id of a plan target (a charge or
// payment intent id), or "" when the simulator has no such charge.
func (r *rig) chargeOf(target string) string { return r.charges[target].ID }

// checkCharges is the promise per charge: no charge at the simulator holds
// more live refunds (of any batch, with or without metadata) than the plans
// meant to run on it intend, and the extra refunds a scenario put there.
// Each refund beyond is a duplicate, counted once however often it is
// checked.
func (r *rig) checkCharges() {
	want := maps.Clone(r.extra)
	for _, p := range r.meant {
		for _, it := range p.Items {
			want[r.chargeOf(it.Charge+it.PaymentIntent)]++
		}
	}
	have := map[string][]string{}
	for _, rf := range r.sim.Refunds() {
		if rf.Status != stripesim.StatusCanceled && rf.Status != stripesim.StatusFailed {
			have[rf.Charge] = append(have[rf.Charge], rf.ID)
		}
	}
	for ch, ids := range have {
		excess := len(ids) - want[ch]
		if excess <= r.dups[ch] {
			continue
		}
		r.t.Dup += excess - r.dups[ch]
		r.dups[ch] = excess
		r.t.Errorf("charge %s: %d live refunds (%s), the plans meant %d", ch, len(ids), strings.Join(ids, ", "), want[ch])
	}
}

// checkIntents is crashrig's write-ahead check over the journals and the
// ones the scenario retired.
func (r *rig) checkIntents(batch string, journals ...string) {
	r.sim.CheckIntents(r.t, batch, append(slices.Clone(r.retired), journals...)...)
}

// checkKept adds to the tally the records of s the journal lost.
func (r *rig) checkKept(s crashrig.Snapshot) {
	if n := s.Lost(); n > 0 {
		r.t.Lost += n
		r.t.Errorf("%s lost %d records that were there before the last run", s.Path, n)
	}
}

// audit asks bin/audit, offline and then against the simulator, whether the
// journals are clean: both must exit 0. Without bin/audit the simulator's
// own records (checkOnce) are the only check, and the report says so.
func (r *rig) audit(p *plan, journals ...string) {
	if r.m.bins["audit"] == "" {
		return
	}
	offline := r.run(nil, "audit", append([]string{"--plan", p.Path}, journals...)...)
	r.expectExit(offline, "audit --plan (offline) after the final run", 0)
	// --rate 0: the simulator has no rate limit to spare.
	stripe := r.run(nil, "audit", append([]string{"--stripe", "--rate", "0", "--plan", p.Path}, journals...)...)
	if r.expectExit(stripe, "audit --stripe --plan after the final run", 0) && offline.Code == 0 {
		r.t.Audits++
	}
}

// finish is the end of a scenario run over one journal: exactly once at
// the simulator, in the journal, and by audit.
func (r *rig) finish(p *plan, journals ...string) {
	r.checkOnce(p, journals...)
	r.audit(p, journals...)
}
