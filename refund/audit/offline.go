package audit

// Checks by the journals alone: every item's own state, and the items of a
// charge together.

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/money"
)

// itemPass counts every item by status and reports what needs no look at
// other items or at the provider.
func (r *run) itemPass() {
	s := r.st
	var sums [len(passStatuses)]tally
	defer func() {
		for k := range sums {
			r.addTally(&sums[k], passStatuses[k])
		}
	}()
	// add counts item i's amount in the tally of status k, checked.
	add := func(k int, i uint32, currency uint32, amount int64) {
		if err := sums[k].add(currency, amount, &s.currencies); err != nil {
			batch, item := s.idx.Key(i)
			r.overflowed(totalName(passStatuses[k]), itemWhere(batch, item), err)
		}
	}
	for i := range s.n {
		if r.overflow.Load() != nil {
			return // no total can be told past it
		}
		sl := s.slot(i)
		refunded := sl.flags&flagRefunded != 0
		switch {
		case refunded && sl.flags&flagPending != 0:
			add(4, i, sl.currency, sl.amount)
			r.stalePending(i)
		case refunded:
			if sl.flags&flagExtras == 0 && len(s.canceled) == 0 {
				add(0, i, sl.currency, sl.amount)
			} else {
				sums[0].items++
				batch, item := s.idx.Key(i)
				for _, x := range r.journalRefunds(i) {
					if x.Amount == 0 {
						r.rep.Full["refunded"]++
					} else {
						r.addTo(r.rep.amounts("refunded"), x.Currency, x.Amount, totalName("refunded"), itemWhere(batch, item))
					}
				}
			}
		case sl.status == statusFailed:
			add(1, i, sl.reqCurrency, sl.reqAmount)
		case sl.status == statusInDoubt:
			add(2, i, sl.reqCurrency, sl.reqAmount)
		default:
			sums[3].items++
		}
		// With a provider, failures and credits are judged by what it lists.
		if !refunded && sl.status == statusFailed && (r.opts.Provider == nil || sl.target == 0) {
			r.out(r.failedFinding(i, sl))
		}
		if refunded && (r.opts.Provider == nil || sl.target == 0) && r.creditDiffers(i, sl) {
			r.creditFindings(i, sl)
		}
		failedAfter := refunded && sl.flags&flagFinalFailure != 0
		if other := r.recordConflict(i, sl); other || failedAfter && (r.opts.Provider == nil || sl.target == 0) {
			r.out(r.conflictFinding(i, sl, failedAfter, ""))
		}
		if s.planned && sl.flags&flagInPlan == 0 {
			f := r.withJournalRefunds(i, KindNotInPlan)
			f.Remedy = "the journal holds this item but the plan does not: check that the plan is the one this journal was run with"
			if len(f.Refunds) > 0 {
				f.Remedy += "; its refund moved money outside the plan"
			}
			r.out(f)
		}
	}
}

// passStatuses are the statuses itemPass counts, in the order of its tallies.
var passStatuses = [...]string{"refunded", "failed", "in_doubt", "none", "pending"}

// tally is what itemPass adds to the report for one status, by interned
// currency: a million items cost a million additions, not map writes.
type tally struct {
	items  int
	full   int     // amounts of 0 (Report.Full)
	sums   []int64 // by currency id
	summed []bool  // by currency id: some amount other than 0 was added
}

// add counts an item of amount in currency, checked: beyond int64 it is a
// *money.OverflowError and the sum stays as it was.
func (t *tally) add(currency uint32, amount int64, currencies *journal.Interner) error {
	t.items++
	if amount == 0 {
		t.full++
		return nil
	}
	if int(currency) >= len(t.sums) {
		t.sums = append(t.sums, make([]int64, int(currency)+1-len(t.sums))...)
		t.summed = append(t.summed, make([]bool, int(currency)+1-len(t.summed))...)
	}
	sum, err := money.Add(t.sums[currency], amount, currencies.Name(currency))
	if err != nil {
		return err
	}
	t.sums[currency] = sum
	t.summed[currency] = true
	return nil
}

// addTally adds the tally of status to the report.
func (r *run) addTally(t *tally, status string) {
	rep := r.rep
	if t.items > 0 {
		rep.ByStatus[status] += t.items
	}
	if t.full > 0 {
		rep.Full[status] += t.full
	}
	for c, ok := range t.summed {
		if ok {
			// Summing to 0 still names the currency.
			r.addTo(rep.amounts(status), r.st.currencies.Name(uint32(c)), t.sums[c], totalName(status), "the end of the journals")
		}
	}
}

// recordConflict reports the conflicts of item i the records settle alone:
// records that disagree, or every refund canceled.
func (r *run) recordConflict(i uint32, sl *itemSlot) bool {
	return sl.flags&flagConflict != 0 || sl.flags&flagRefunded != 0 && len(r.st.canceled) > 0 && r.liveRefundCount(i, sl) == 0
}

// failedFinding reports an item that failed for good.
func (r *run) failedFinding(i uint32, sl *itemSlot) *Finding {
	s := r.st
	f := r.view(i).finding(KindFailed)
	f.Code, f.Message = s.codes.Name(sl.code), s.failures[i]
	f.Amount, f.Currency = sl.reqAmount, s.currencies.Name(sl.reqCurrency)
	f.Remedy = failedRemedy(f.Code, r.rep.Provider)
	return f
}

// failedRemedy is the remedy of a final failure with code, refused by
// provider ("" for unknown).
func failedRemedy(code, provider string) string {
	provider = cmp.Or(provider, "The provider")
	if heldCode(code) {
		what := "a refund of another refundkit batch"
		switch code {
		case refund.CodeRefundedOutside:
			what = "a refund made outside refundkit"
		case refund.CodeRefundedByOtherItem:
			what = "a refund of this batch for an item the plan does not put on this payment"
		case refund.CodeRefundedUnattributed:
			what = "a refund whose maker the provider cannot tell"
		}
		return "refund held this item before any call: its charge already holds " + what + " (named in the message), and nothing was sent; " +
			"a person decides: if this refund is meant on top of it, run refund again with --allow-refunded-charges; if that refund already settles this item, nothing is owed, and this finding stays as the record of that decision"
	}
	return fmt.Sprintf("%s refused this refund for good (%s); refund will not try it again in this batch: fix the cause, then refund it under a new batch or item id, or settle it outside refundkit", provider, code)
}

// conflictFinding reports the records of item i that cannot all be true;
// failedAfter includes a final failure journaled after its refund, and
// stripe, when set, is the provider's remedy.
func (r *run) conflictFinding(i uint32, sl *itemSlot, failedAfter bool, stripe string) *Finding {
	s := r.st
	f := r.view(i).finding(KindConflict)
	f.Refunds = r.journalRefunds(i)
	var reasons, remedies []string
	refunded := sl.flags&flagRefunded != 0
	if failedAfter {
		f.Code = s.codes.Name(sl.code)
		reasons = append(reasons, fmt.Sprintf("journaled as refunded (%s), then as failed for good (%s: %s)", s.str(sl.refund), f.Code, s.failures[i]))
		remedies = append(remedies, cmp.Or(stripe, "refund skips the item as refunded; run audit --stripe: if Stripe has the refund live, the item is refunded once and that audit says nothing of it, and with --backfill JOURNAL it journals the refund again after the failure so this audit agrees"))
	}
	if refunded && len(f.Refunds) == 0 {
		reasons = append(reasons, "every refund journaled for it was canceled")
		remedies = append(remedies, "refund skips it as refunded, yet no refund of it is left: check with audit --stripe and refund it under a new item id if it is still owed")
	}
	if sl.flags&flagConflict != 0 {
		reasons = append(reasons, s.conflicts[i]...)
		remedies = append(remedies, "the records disagree on what was refunded: check the charge and refunds in the dashboard before running refund again")
	}
	f.Message = strings.Join(reasons, "; ")
	f.Remedy = strings.Join(remedies, "; ")
	return f
}

// journalPass checks every group of items sharing a batch and charge by
// the journals alone.
func (r *run) journalPass() {
	s := r.st
	for i := range s.n {
		sl := s.slot(i)
		if s.grouped && sl.target != 0 && sl.flags&flagGroupHead == 0 {
			continue // checked with its group's first item
		}
		if sl.next == 0 {
			r.journalItem(i, sl, "") // the common case: one item on its charge
			continue
		}
		g := r.newGroup(i)
		for _, m := range g.ms {
			for _, x := range r.journalRefunds(m.v.idx) {
				x.Item = m.v.item
				m.refunds = append(m.refunds, &sref{Refund: x, live: true, batch: g.batch, item: m.v.item})
			}
		}
		r.checkGroup(context.Background(), g, nil, nil) // no provider: no error
	}
}

// unplannedNote warns a missing item's remedy of refunds on its charge no
// planned item accounts for.
func unplannedNote(items []string) string {
	if len(items) == 0 {
		return ""
	}
	return fmt.Sprintf("; but careful: this charge already holds refunds of the batch for %s, which the plan does not list: if one was meant for this item, refunding it again refunds the charge twice", strings.Join(items, ", "))
}

// journalItem reports an item's duplicate refunds, doubt or absence; note
// is added to the remedy of a missing item.
func (r *run) journalItem(i uint32, sl *itemSlot, note string) {
	switch n := r.liveRefundCount(i, sl); {
	case n == 0:
		r.unsettled(i, sl, "a refund call may have been made without its outcome journaled: run refund again with this journal (it looks the item up at Stripe before any new call), or audit --stripe to see now", "",
			"nothing was journaled for this planned item: refund --journal with this journal and plan refunds it"+note)
	case n > 1:
		f := r.view(i).finding(KindDuplicate)
		f.Refunds = r.journalRefunds(i)
		r.sumRefunds(f, f.Refunds[1:])
		f.Currency = f.Refunds[0].Currency
		f.Remedy = r.duplicateRemedy(f, true)
		r.noteExtras(f, f.Refunds[1:])
		r.out(f)
	}
}

// unsettled reports item i when it has no refund and is in doubt (doubt is
// the remedy, seen what the provider lists for it) or planned and never
// journaled (missing is the remedy).
func (r *run) unsettled(i uint32, sl *itemSlot, doubt, seen, missing string) {
	kind, remedy := KindInDoubt, doubt
	switch {
	case sl.flags&flagRefunded == 0 && sl.status == statusInDoubt:
	case r.st.planned && sl.flags&flagInPlan != 0 && sl.flags&flagInJournal == 0:
		kind, remedy = KindMissing, missing
	default:
		return
	}
	f := r.view(i).finding(kind)
	f.Amount, f.Currency = sl.reqAmount, r.st.currencies.Name(sl.reqCurrency)
	f.Remedy = remedy
	if kind == KindInDoubt {
		r.mismatch(i, sl, f, seen)
		r.noteLive(f, sl)
	}
	r.out(f)
}

// mismatch fills the in_doubt finding f of an item whose last failure is
// an answer that was not its refund; seen is what the provider lists.
func (r *run) mismatch(i uint32, sl *itemSlot, f *Finding, seen string) {
	switch code := r.st.codes.Name(sl.code); code {
	case journal.CodeStatusUnknown:
		f.Code, f.Message = code, r.st.mismatches[i]
		f.Remedy = "the item is neither done nor failed: refund sends nothing new for it and asks the provider for that refund's status on every run until it answers one refundkit knows; check the refund at the provider (audit --stripe shows what Stripe holds)"
	case refund.CodeAnswerMismatch:
		f.Code, f.Message = code, r.st.mismatches[i]
		f.Remedy = "the API answered this item's refund call with a refund for another charge, amount or item (named in the message), and refund halted with the item in doubt" + seen +
			": check that refund at Stripe (dashboard) before running refund again: if it refunded this item's charge, the item may already be refunded"
	}
}

// noteLive says, in the finding f about an item in doubt, that a running
// refund holds a journal naming it: it may be in flight, not left in doubt
// by a crash. An answer that was not its refund keeps its message.
func (r *run) noteLive(f *Finding, sl *itemSlot) {
	if sl.flags&flagLive == 0 || f.Code == refund.CodeAnswerMismatch {
		return
	}
	what := "journal " + r.held[0] + " is held by a running refund"
	if len(r.held) > 1 {
		what = "journals " + strings.Join(r.held, ", ") + " are held by running refunds"
	}
	if f.Finding == KindStripeOnly {
		f.Message = what + ": this refund may be the answer to a call in flight, not yet journaled"
		f.Remedy = "audit again when the run has finished: it journals the outcome of each call it makes, this refund too if it answered one; if the journal still lacks it then, run audit --stripe with --backfill JOURNAL to journal it"
		return
	}
	f.Message = what + ": this item may be in flight now"
	f.Remedy = "audit again when the run has finished: it journals the outcome of each call it makes; if the item is still in doubt then, run refund again with this journal (it looks the item up at Stripe before any new call)"
}

// noteExtras counts the extra refunds of journal-only finding f in the report.
func (r *run) noteExtras(f *Finding, extras []Refund) {
	r.rep.ExtraJournal += len(extras)
	for _, x := range extras {
		r.addTo(r.rep.ExtraJournalAmount, x.Currency, x.Amount, "the total of extra refunds in the journals", f.where())
	}
}

// stalePending reports item i, journaled pending, when it has been for
// longer than Options.PendingAfter.
func (r *run) stalePending(i uint32) {
	since := time.Unix(r.st.pendingSince[i], 0)
	age := r.opts.Now().Sub(since)
	if age <= r.opts.PendingAfter {
		return
	}
	f := r.withJournalRefunds(i, KindPending)
	f.Message = fmt.Sprintf("journaled pending at %s, %s ago, and not settled since", since.UTC().Format(time.RFC3339), age.Round(time.Minute))
	f.Remedy = "run refund again with the same plan and journal: it asks the provider how the refund ended and journals it, sending nothing"
	r.out(f)
}

// withJournalRefunds starts a finding of kind about item i with its
// journaled refunds and their sum.
func (r *run) withJournalRefunds(i uint32, kind string) *Finding {
	f := r.view(i).finding(kind)
	f.Refunds = r.journalRefunds(i)
	r.sumRefunds(f, f.Refunds)
	return f
}
