package main

import (
	"maps"
	"slices"
	"strings"

	"github.com/refundkit/refundkit/scripts/crashrig"
)

// checkOnce is the end of every scenario run: exactly once per planned
// item at the simulator and in the journals (crashrig's CheckOnce), no
// payment holding more live refunds than the plans meant to run on it
// intend, and every key the simulator saw journaled as an intent first.
// Items of forPerson are meant to be left for a person (in doubt or
// held): at most one live refund, counted apart, not as missing.
func (r *rig) checkOnce(p *plan, journals ...string) {
	r.checkOnceForPerson(p, nil, journals...)
}

func (r *rig) checkOnceForPerson(p *plan, forPerson map[string]bool, journals ...string) {
	r.t.Items += len(p.Items)
	r.mean(p)
	want := make([]crashrig.Want, len(p.Items))
	for i, it := range p.Items {
		want[i] = crashrig.Want{Item: it.Item.Item, Charge: it.Charge, PaymentIntent: it.PaymentIntent, Capture: it.Capture, PSPReference: it.PSPReference,
			Amount: it.Want, ForPerson: forPerson[it.Item.Item]}
	}
	r.t.Missing += r.sim.CheckOnce(r.t, p.Batch, want, journals...)
	r.checkPayments()
	r.checkIntents(p.Batch, journals...)
}

// mean records that p's refunds are meant to stay at the simulator.
func (r *rig) mean(p *plan) {
	if !slices.Contains(r.meant, p) {
		r.meant = append(r.meant, p)
	}
}

// checkPayments is the promise per payment (charge or capture): none at
// the simulator holds more live refunds (of any batch, with or without
// metadata) than the plans meant to run on it intend, and the extra
// refunds a scenario put there. Each refund beyond is a duplicate, counted
// once however often it is checked.
func (r *rig) checkPayments() {
	want := maps.Clone(r.extra)
	for _, p := range r.meant {
		for _, it := range p.Items {
			want[r.paymentOf(it.Target())]++
		}
	}
	have := map[string][]string{}
	for _, rf := range r.sim.AllRefunds() {
		if rf.Live {
			have[rf.Payment] = append(have[rf.Payment], rf.ID)
		}
	}
	for pay, ids := range have {
		excess := len(ids) - want[pay]
		if excess <= r.dups[pay] {
			continue
		}
		r.t.Dup += excess - r.dups[pay]
		r.dups[pay] = excess
		r.t.Errorf("%s %s: %d live refunds (%s), the plans meant %d", r.prov.paymentWord(), pay, len(ids), strings.Join(ids, ", "), want[pay])
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
// own records (checkOnce) are the only check, and the report says so. The
// exec rows' commands make Stripe refunds, which audit --stripe lists;
// PayPal's are listed through each capture's order (audit --provider
// paypal).
func (r *rig) audit(p *plan, journals ...string) {
	if r.m.bins["audit"] == "" {
		return
	}
	offline := r.run(nil, "audit", append([]string{"--plan", p.Path}, journals...)...)
	r.expectExit(offline, "audit --plan (offline) after the final run", 0)
	// --rate 0: the simulator has no rate limit to spare.
	online := []string{"--stripe"}
	if r.prov.name() == provPayPal {
		online = []string{"--provider", "paypal"}
	}
	what := "audit " + strings.Join(online, " ") + " --plan after the final run"
	stripe := r.run(nil, "audit", append(append(online, "--rate", "0", "--plan", p.Path), journals...)...)
	if r.expectExit(stripe, what, 0) && offline.Code == 0 {
		r.t.Audits++
	}
}

// finish is the end of a scenario run over one journal: exactly once at
// the simulator, in the journal, and by audit.
func (r *rig) finish(p *plan, journals ...string) {
	r.checkOnce(p, journals...)
	r.audit(p, journals...)
}
