package audit

// Charges refunded by more than one batch: a plan run again under a new
// batch id refunds no item twice, so only a look across batches finds it.

import (
	"fmt"
	"strings"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/money"
)

// otherBatchPass reports every target on which the journals hold live
// refunds of more than one batch.
func (r *run) otherBatchPass() {
	s := r.st
	if s.idx.Batches().Len() <= 2 {
		return // one batch (id 0 is ""): nothing to look across
	}
	// First the first item with a live refund on each target, and the
	// targets where an item of another batch has one too.
	var (
		targets journal.IDTable // target -> its number in firsts
		firsts  []uint32        // by target number: its first item with a live refund
	)
	firstHash := func(k uint32) uint64 { return s.hashItem(s.str(s.slot(firsts[k]).target)) }
	targets.Reserve(int(s.n), firstHash)
	var overlaps []uint32 // first items of targets with two batches
	flagged := map[uint32]bool{}
	targetOf := func(sl *itemSlot) (string, bool) {
		if sl.target == 0 || sl.flags&flagRefunded == 0 {
			return "", false
		}
		return s.str(sl.target), true
	}
	s.touched = s.inSpans(&targets, targetOf, s.hashItem, func(i uint32, sl *itemSlot, h uint64) {
		if r.liveRefundCount(i, sl) == 0 {
			return
		}
		if first, ok := s.firstOn(&targets, firsts, h, s.str(sl.target)); !ok {
			targets.Add(h, firstHash)
			firsts = append(firsts, i)
		} else if s.idx.BatchOf(first) != s.idx.BatchOf(i) && !flagged[first] {
			flagged[first] = true
			overlaps = append(overlaps, first)
		}
	})
	if len(overlaps) == 0 {
		return
	}
	// Then the items with live refunds on those targets.
	onTarget := make(map[string][]uint32, len(overlaps))
	for _, first := range overlaps {
		onTarget[s.str(s.slot(first).target)] = nil
	}
	for i := range s.n {
		sl := s.slot(i)
		t, ok := targetOf(sl)
		if items, on := onTarget[t]; ok && on && r.liveRefundCount(i, sl) > 0 {
			onTarget[t] = append(items, i)
		}
	}
	for _, first := range overlaps {
		fsl := s.slot(first)
		items := onTarget[s.str(fsl.target)]
		var refunds []Refund
		allowed := map[string]bool{}
		for _, i := range items {
			v := r.view(i)
			for _, x := range r.journalRefunds(i) {
				x.Batch, x.Item = v.batch, v.item
				refunds = append(refunds, x)
			}
			if v.flags&flagAllowed != 0 {
				allowed[v.batch] = true
			}
		}
		r.otherBatchFinding(r.view(first).pay, refunds, allowed)
	}
}

// firstOn returns the first item on target t, of hash h, in targets.
func (s *state) firstOn(targets *journal.IDTable, firsts []uint32, h uint64, t string) (uint32, bool) {
	for k := range targets.Candidates(h) {
		if first := firsts[k]; s.str(s.slot(first).target) == t {
			return first, true
		}
	}
	return 0, false
}

// otherBatches reports a target on which the provider lists live refunds
// of more than one batch.
func (r *run) otherBatches(t *target, gs []*group, all []*sref) {
	var refunds []Refund
	batches := map[string]bool{}
	for _, x := range all {
		if x.live && x.batch != "" {
			ref := x.plain()
			ref.Batch, ref.Item = x.batch, x.item
			refunds = append(refunds, ref)
			batches[x.batch] = true
		}
	}
	if len(batches) < 2 {
		return
	}
	allowed := map[string]bool{}
	for _, g := range gs {
		for _, m := range g.ms {
			if m.sl.flags&flagAllowed != 0 {
				allowed[g.batch] = true
			}
		}
	}
	r.otherBatchFinding(t.pay, refunds, allowed)
}

// otherBatchFinding reports refunds (oldest first) of several batches on
// one target; none when every batch but one was allowed to refund on top
// of the others (--allow-refunded-charges).
func (r *run) otherBatchFinding(pay refund.Payment, refunds []Refund, allowed map[string]bool) {
	batches := distinct(refunds, func(x Refund) string { return x.Batch })
	unallowed := 0
	for _, b := range batches {
		if !allowed[b] {
			unallowed++
		}
	}
	if len(batches) < 2 || unallowed <= 1 {
		return
	}
	f := &Finding{Finding: KindOtherBatch, Refunds: refunds}
	f.on(pay)
	var named []string
	var later []Refund
	for _, x := range refunds {
		named = append(named, fmt.Sprintf("%s (batch %s, item %s, %s)", x.ID, x.Batch, x.Item, money.Format(x.Amount, x.Currency)))
		if x.Batch != batches[0] {
			later = append(later, x)
		}
	}
	r.sumRefunds(f, later)
	f.Message = fmt.Sprintf("refunds of %d refundkit batches (%s) on one charge: %s", len(batches), strings.Join(batches, ", "), strings.Join(named, ", "))
	f.Remedy = fmt.Sprintf("batches after %s refunded %s more on a charge that %s had refunded: a person decides whether that was intended; "+
		"if not, a refund that still requires action can be canceled in the dashboard, but a succeeded refund cannot be reversed through the API: the customer must be charged again to recover it; "+
		"refund holds an item whose charge holds another batch's refund unless --allow-refunded-charges is given", batches[0], amounts(r.totals(f, later)), batches[0])
	r.out(f)
}
