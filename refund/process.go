package refund

// An item's life, top to bottom: what the journal settles (settled); then,
// on a worker (process), a pending refund asked after or extras rechecked,
// the look-up and what it decides (decide, unlooked, otherItems, adopt),
// the call and its answer recorded (record, refused). It calls down only:
// reads (lookup.go), checks (answer.go), records (records.go), engine.go.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/refundkit/refundkit/journal"
)

// settled answers items the journal has finished with. In an offline dry
// run so are the items it cannot look up.
func (e *engine) settled(it *Item, st journal.ItemState, known bool) (Result, bool) {
	offline := e.cfg.DryRun && e.cfg.Offline
	if !known {
		if offline {
			r := newResult(it, StatusWould)
			r.Amount, r.Currency = it.Amount, it.Currency
			r.Message = "not in the journal (offline: not looked up at the provider)"
			return r, true
		}
		return Result{}, false
	}
	if res, shared := e.sharedRefund(it, st); shared {
		return res, true
	}
	switch st.Status {
	case journal.StatusRefunded:
		if st.Extras != "" && !e.cfg.DryRun {
			if _, shared := e.cfg.Checkpoint.(Claims); !shared {
				return Result{}, false // a worker asks whether its extras still stand
			}
		}
		return withExtras(asJournaled(it, StatusSkipped, st), st.ExtraIDs()), true
	case journal.StatusFailed:
		if e.cfg.AllowRefundedCharges && IsHold(st.Code) {
			break // held for a refund elsewhere on its charge: now allowed
		}
		msg := "failed for good in an earlier run (journaled); not retried"
		if IsHold(st.Code) {
			msg = "held in an earlier run: its charge has a refund made elsewhere; run again with --allow-refunded-charges if another refund is intended"
		}
		return failed(it, st.Attempt, st.Code, msg), true
	}
	if st.Status == journal.StatusPending && offline {
		return stillPending(it, st, "", "its refund was pending when journaled: a run asks the provider how it ended (offline: not asked)"), true
	}
	if offline {
		r := newResult(it, StatusWouldRec)
		r.Attempt = st.Attempt
		r.Message = "in doubt in the journal: the real run looks it up first (offline: not looked up)"
		if st.Unsure() {
			r.Refund, r.Code = st.Refund, journal.CodeStatusUnknown
			r.Message = "its refund is journaled in a status refundkit does not know: the real run asks the provider for it, sending nothing (offline: not asked)"
		}
		return r, true
	}
	return Result{}, false
}

// sharedRefund answers an item whose refund the journal credits to another
// item first: it is not done, and nothing is sent for it.
func (e *engine) sharedRefund(it *Item, st journal.ItemState) (Result, bool) {
	s, ok := e.cfg.Checkpoint.(sharer)
	if !ok || st.Refund == "" || !st.Credited() {
		return Result{}, false
	}
	batch, item, shared := s.SharedRefund(st.Refund, it.Batch, it.Item)
	if !shared {
		return Result{}, false
	}
	r := inDoubt(it, st.Attempt, CodeSharedRefund, fmt.Sprintf("the journal credits refund %s to this item and, first, to item %q of batch %q: one refund refunds one item at most, so the records cannot all be true. Nothing is sent for it; a person checks the refund at the provider (audit --stripe) and mends the journal", st.Refund, item, batch))
	r.Refund = st.Refund
	return r, true
}

// process settles one item that needs the provider. Items on one payment
// are processed one at a time, so one's look-up sees the other's refund.
func (e *engine) process(ctx context.Context, j job) Result {
	it, st := j.it, j.st
	switch {
	case j.known && st.Status == journal.StatusRefunded:
		return e.recheckExtras(ctx, it, st)
	case j.known && (st.Status == journal.StatusPending || st.Unsure()):
		// The refund exists: only its outcome is news. Nothing is sent.
		return withExtras(e.settlePending(ctx, it, st), st.ExtraIDs())
	}
	attempt := 1
	if j.known {
		attempt = max(st.Attempt, 1)
	}
	unsent := !j.known || !st.Sent // no intent was ever journaled for it
	pay, res, ok := e.payment(ctx, it, attempt, unsent)
	if !ok {
		return res
	}
	defer e.targets.lock(pay.keys...)()
	unlock, ok := e.lockPayments(ctx, it, pay.keys)
	if !ok {
		return notCalled(it, unsent, "interrupted", "stopped while another run held the payment's lock; a later run looks it up first")
	}
	defer unlock()
	// Another run, journal or batch may have refunded the charge: look
	// before the first call. NoLookup skips it, only for an item never seen.
	var listed *[]Refund // the payment's refunds, when they were listed
	if j.known || !e.cfg.NoLookup {
		refunds, looked, res, ok := e.list(ctx, it, attempt, unsent, pay)
		switch {
		case !ok:
			return res
		case looked:
			if res, done := e.decide(ctx, it, attempt, unsent, st, j.burnedInRun, refunds, pay); done {
				return res
			}
			listed = &refunds
		}
	}
	if listed == nil {
		// Not looked up: the checkpoint alone is trusted.
		if res, done := e.unproven(it, attempt, unsent, st, pay, true); done {
			return res
		}
	}
	if res, done := e.checkPayment(ctx, it, attempt, unsent, pay); done {
		return res
	}
	// A new key only after a full listing found nothing for a key that
	// replays an indeterminate answer; never for the key's age.
	newKey := st.KeyBurned && listed != nil && !e.facts.PartialLookup
	if newKey {
		attempt++
		e.newKeys.Add(1)
		msg := fmt.Sprintf("new idempotency key: the old one replays %s's 500 and the look-up found no refund", e.name)
		if e.facts.LateOutcomes {
			msg += " (--resend-after-500)"
		}
		e.logItem(slog.LevelInfo, msg, it, attempt)
	} else if !unsent {
		e.logItem(slog.LevelDebug, "in doubt and not found at "+e.name+": the same key again", it, attempt)
	}
	answer, err := e.call(ctx, it, attempt)
	switch {
	case errors.Is(err, errWouldSend):
		return e.wouldSend(ctx, it, attempt, unsent, newKey, pay, listed)
	case err == nil:
		return e.record(it, attempt, answer)
	case errors.Is(err, errIntentUnwritten):
		return e.unrecorded(it, attempt, "journal write failed before the call; nothing was sent")
	case errors.Is(err, errNotSent):
		if unsent {
			return Result{} // never sent: the next run starts it afresh
		}
		return inDoubt(it, attempt, "interrupted", "stopped before this call was sent, but an earlier one was: a later run looks it up first")
	}
	return e.refused(it, attempt, unsent, Classify(err))
}

// settlePending asks the provider how the item's pending (or unsure)
// refund ended, and journals the end if it came.
func (e *engine) settlePending(ctx context.Context, it *Item, st journal.ItemState) Result {
	journaled := "pending"
	if st.Unsure() {
		journaled = "in a status refundkit does not know"
	}
	r, res, ok, last, told := e.getRefund(ctx, it, st, st.Refund)
	switch {
	case !ok && last != nil && Classify(last).Class == ClassFinal && !errors.Is(last, ErrNoLookup):
		// The provider says for good it has no such refund (another
		// account's key?). Nothing is journaled: every run asks again.
		f := Classify(last)
		res := inDoubt(it, st.Attempt, f.Code, fmt.Sprintf("journaled %s as refund %s, but %s answers %s: %s. No refund is known to exist for this item: check the payment and the API key's account and mode", journaled, st.Refund, e.name, f.Code, f.Message))
		res.Refund = st.Refund // the refund it is not
		return res
	case !ok:
		return e.unsettled(it, st, res.Code, res.Message+"; a later run asks again")
	}
	if r.ID != st.Refund {
		return e.mismatch(it, st.Attempt, &r, 0, fmt.Errorf("asked for refund %s, %s answered with %s", st.Refund, e.name, r.ID))
	}
	if err := contradicts(it, st, &r); err != nil {
		return e.mismatch(it, st.Attempt, &r, 0, err)
	}
	if r.Amount == 0 && r.Currency == "" {
		r.Amount, r.Currency = st.Amount, st.Currency // a read that says only the status
	}
	switch journal.OutcomeOf(r.Status) {
	case journal.OutcomeDone:
		e.logItem(slog.LevelDebug, "pending refund settled", it, st.Attempt, "refund", r.ID)
		return e.countTold(told, e.settle(it, st.Attempt, &r, journal.SourceSettled))
	case journal.OutcomeDead:
		if x, found := e.liveExtra(ctx, it, st); found {
			// Another refund of the item's own stands: it is the item's now.
			return e.countTold(told, e.recredit(it, st, &r, &x))
		}
		msg := fmt.Sprintf("%s refund %s ended %s at %s", journaled, r.ID, r.Status, e.name)
		if st.Unsure() {
			msg = fmt.Sprintf("refund %s, journaled %s, ended %s at %s", r.ID, journaled, r.Status, e.name)
		}
		if r.FailureReason != "" {
			msg += " (" + r.FailureReason + ")"
		}
		msg += ": it does not stand (no money moved, or it came back) and nothing is sent again; if it is still owed, refund it under a new item id"
		return e.countTold(told, e.failedWith(it, st.Attempt, r.ID, "refund_"+r.Status, msg))
	case journal.OutcomeMoving:
		if st.Unsure() {
			return e.settle(it, st.Attempt, &r, journal.SourceSettled) // known now: pending
		}
		return stillPending(it, st, "", fmt.Sprintf("refund %s is still %s at %s: run again later to settle it", r.ID, r.Status, e.name))
	}
	if st.Unsure() {
		return e.unsettled(it, st, journal.CodeStatusUnknown, unknownStatus(e.name, &r))
	}
	return e.settle(it, st.Attempt, &r, journal.SourceSettled) // journaled: no longer pending, not done
}

// countTold counts res, an end journaled from the provider's events
// (told), among the refunds they settled with no request.
func (e *engine) countTold(told bool, res Result) Result {
	if told && !e.halted() && (res.Status == StatusRefunded || res.Status == StatusFailed) {
		e.refundsTold.Add(1)
	}
	return res
}

// recheckExtras answers an item the journal holds refunded more than once,
// journaling the end of each extra the provider shows ended.
func (e *engine) recheckExtras(ctx context.Context, it *Item, st journal.ItemState) Result {
	res, extras := asJournaled(it, StatusSkipped, st), st.ExtraIDs()
	refunds, looked, _, ok := e.list(ctx, it, st.Attempt, false, nil)
	if !ok || !looked {
		return withExtras(res, extras) // as journaled; a later run asks again
	}
	listed := make(map[string]*Refund, len(refunds))
	for i := range refunds {
		listed[refunds[i].ID] = &refunds[i]
	}
	var still []string
	for _, id := range extras {
		r, found := listed[id]
		if !found {
			if x, _, ok, _, _ := e.getRefund(ctx, it, st, id); ok && x.ID == id {
				r, found = &x, true
			}
		}
		if !found || Live(r) {
			still = append(still, id)
			continue
		}
		end := e.refunded(it, max(st.Attempt, 1), r, journal.SourceReconciled)
		end.Type = journal.TypeCanceled // the extra's end
		if !e.append(end) {
			return e.unrecorded(it, st.Attempt, fmt.Sprintf("extra refund %s ended at %s but its end could not be journaled", id, e.name))
		}
		e.logItem(slog.LevelInfo, "an extra refund ended at "+e.name+"; journaled", it, st.Attempt, "refund", id)
	}
	return withExtras(res, still)
}

// decide settles the item by its payment's refunds as listed: its own is
// adopted, a dead one or one made elsewhere holds it; done is false when
// nothing stands in the way of a call. burnedInRun: no new key in this run.
func (e *engine) decide(ctx context.Context, it *Item, attempt int, unsent bool, st journal.ItemState, burnedInRun bool, refunds []Refund, pay *payment) (res Result, done bool) {
	burned := st.KeyBurned
	c := sortRefunds(it, refunds, func(r *Refund) int { return e.owner(it, r, pay.keys) })
	allowed := e.cfg.AllowRefundedCharges
	switch {
	case len(c.own) > 0:
		return e.adopt(ctx, it, attempt, unsent, c.own, refunds, pay), true
	case c.dead != nil:
		return e.deadRefund(it, c.dead), true
	case len(c.otherBatch) > 0 && !allowed:
		return e.hold(it, attempt, unsent, CodeRefundedByOtherBatch, c.otherBatch), true
	case len(c.unread) > 0 && !allowed:
		return Result{Status: statusDeferred}, true // whose is known once the plan is whole
	case len(c.otherItem) > 0 && !allowed:
		return e.hold(it, attempt, unsent, CodeRefundedByOtherItem, c.otherItem), true
	case len(c.unknown) > 0 && !allowed:
		return e.hold(it, attempt, unsent, CodeRefundedUnattributed, c.unknown), true
	case len(c.outside) > 0 && e.cfg.AllRefunds && !allowed:
		return e.hold(it, attempt, unsent, CodeRefundedOutside, c.outside), true
	case burned && burnedInRun && e.facts.LateOutcomes:
		return inDoubt(it, attempt, "api_error", fmt.Sprintf("%s answered 500 to a call of another worker during this run and has no refund for it yet: its result is indeterminate (%[1]s may still complete it). No new key in this run; a later run looks it up again", e.name)), true
	case burned && !e.cfg.ResendAfter500 && e.facts.LateOutcomes:
		return inDoubt(it, attempt, "api_error", fmt.Sprintf("%s answered 500 to an earlier call and still has no refund for it: its result is indeterminate (%[1]s may still complete it while it repairs an incident). Check the charge; to send it under a new key, run again with --resend-after-500", e.name)), true
	}
	// What the listing cannot show yet, the checkpoint may: a refund the
	// provider has not told of (PartialLookup), or one a 500 may still make.
	if res, done := e.unproven(it, attempt, unsent, st, pay, e.facts.PartialLookup); done {
		return res, true
	}
	if len(c.otherBatch)+len(c.otherItem)+len(c.unread)+len(c.unknown) > 0 {
		e.logItem(slog.LevelWarn, "charge already refunded for another batch or item, or by whom cannot be told; refunding again as --allow-refunded-charges says", it, 0,
			"refunds", describe(slices.Concat(c.otherBatch, c.otherItem, c.unread, c.unknown)))
	}
	if len(c.outside) > 0 && !e.cfg.AllRefunds {
		e.logItem(slog.LevelWarn, "charge has refunds without refundkit metadata; refunding anyway (--all-refunds holds such items)", it, 0,
			"refunds", describe(c.outside))
	}
	e.logItem(slog.LevelDebug, "looked up: nothing stands in the way of a call", it, 0, "refunds_on_charge", len(refunds))
	return Result{}, false
}

// unproven decides by the checkpoint what no full listing of the payment's
// refunds (unlisted) shows: other items on it, and an earlier call's key.
// Nothing found is not nothing made.
func (e *engine) unproven(it *Item, attempt int, unsent bool, st journal.ItemState, pay *payment, unlisted bool) (Result, bool) {
	if res, done := e.otherItems(it, attempt, unsent, pay, unlisted); done || !unlisted {
		return res, done
	}
	return e.unlooked(it, attempt, unsent, st)
}

// unlooked decides by the checkpoint alone for an item whose refunds
// cannot be looked up: one sent before goes again under its key only while
// the provider surely keeps it (keyKept). Never a new key.
func (e *engine) unlooked(it *Item, attempt int, unsent bool, st journal.ItemState) (Result, bool) {
	switch {
	case unsent:
		return Result{}, false
	case !keyKept(st.SentAt, e.facts.KeyTTL, e.cfg.Now()) && !st.KeyBurned && !e.facts.PartialLookup:
		return inDoubt(it, attempt, CodeNoLookup, fmt.Sprintf("an earlier call was sent (%s), %s cannot look its refunds up and keeps keys only %v: check the payment there before planning it again", sentWhen(st.SentAt), e.name, e.facts.KeyTTL)), true
	case !keyKept(st.SentAt, e.facts.KeyTTL, e.cfg.Now()):
		what := "an earlier call was sent"
		if st.KeyBurned {
			what = e.name + " answered 500 to an earlier call"
		}
		return inDoubt(it, attempt, CodeNoLookup, fmt.Sprintf("%s (%s); %s cannot list refunds and is counted on to keep keys only %s, half of which may have passed by the journal's clock, so nothing is sent: %s", what, sentWhen(st.SentAt), e.name, keyLife(e.facts.KeyTTL), e.personChecks())), true
	case st.KeyBurned:
		e.logItem(slog.LevelInfo, fmt.Sprintf("in doubt after %[1]s's 500, and %[1]s cannot list refunds: the same key again while %[1]s surely keeps it (it answers for the first call, or makes the refund once)", e.name), it, attempt)
		return Result{}, false
	}
	e.logItem(slog.LevelDebug, "in doubt, no look-up, the key is still kept: the same key again", it, attempt)
	return Result{}, false
}

// otherItems holds the item when the checkpoint holds another item on its
// payment whose refund may stand there unseen. unlisted (no full listing)
// counts every other item in doubt, pending or refunded; else only keys
// holding a 500 that may still complete.
func (e *engine) otherItems(it *Item, attempt int, unsent bool, pay *payment, unlisted bool) (Result, bool) {
	if !unlisted && !e.facts.LateOutcomes {
		return Result{}, false // the listing is the whole truth
	}
	items, err := e.cfg.Checkpoint.OnPayment(pay.keys)
	if err != nil {
		e.halt(&HaltError{Journal: true, Err: err})
		return notCalled(it, unsent, "halted", "run halted before the look-up"), true
	}
	var otherBatch, otherItem, unread []journal.PaymentItem
	for _, p := range items {
		st := &p.State
		switch {
		case p.Batch == it.Batch && p.Item == it.Item:
			continue
		case st.Status == journal.StatusInDoubt && (unlisted || st.KeyBurned && e.facts.LateOutcomes):
		case hasRefundStatus(st.Status) && unlisted:
		default:
			continue
		}
		if p.Batch != it.Batch {
			otherBatch = append(otherBatch, p)
			continue
		}
		on, listed := e.plan.on(it.Batch, p.Item, append([]string{it.Target()}, pay.keys...)...)
		switch {
		case on: // two refunds the plan means on one payment
		case !listed && !e.plan.whole.Load():
			unread = append(unread, p)
		default:
			otherItem = append(otherItem, p)
		}
	}
	if e.cfg.AllowRefundedCharges {
		if all := slices.Concat(otherBatch, otherItem, unread); len(all) > 0 {
			e.logItem(slog.LevelWarn, "the journal holds other items on this payment; refunding again as --allow-refunded-charges says", it, 0,
				"items", describeItems(all))
		}
		return Result{}, false
	}
	switch {
	case len(otherBatch) > 0:
		return e.holdFor(it, attempt, unsent, CodeRefundedByOtherBatch, "the journal holds an item of another refundkit batch on this payment", e.unseen(otherBatch, unlisted)), true
	case len(unread) > 0:
		return Result{Status: statusDeferred}, true
	case len(otherItem) > 0:
		return e.holdFor(it, attempt, unsent, CodeRefundedByOtherItem, "the journal holds an item of this batch on this payment that the plan does not put there (an item renamed, dropped or moved to another payment?)", e.unseen(otherItem, unlisted)), true
	}
	return Result{}, false
}

// adopt journals the item's own refunds found (oldest first): the first is
// its refund, any other a second one.
func (e *engine) adopt(ctx context.Context, it *Item, attempt int, unsent bool, own []*Refund, all []Refund, pay *payment) Result {
	e.reconciled.Add(1)
	r := own[0]
	attempt = attemptOf(r, attempt)
	if it.Amount > 0 && r.Amount != it.Amount {
		return e.amountDiffers(it, attempt, r)
	}
	if it.Currency != "" && r.Currency != it.Currency {
		msg := fmt.Sprintf("refund %s of this item at %s is in %s, the plan says %s: an earlier plan made it. Nothing sent; if more is owed, plan it under a new item id", r.ID, e.name, r.Currency, it.Currency)
		return e.failedWith(it, attempt, r.ID, CodeCurrencyDiffers, msg)
	}
	if it.Amount == 0 {
		if res, ok := e.readPayment(ctx, it, attempt, unsent, pay); !ok {
			return res
		}
		if live, ok := liveSum(all); pay.known && (!ok || live != pay.info.Amount) {
			sum := strconv.FormatInt(live, 10)
			if !ok {
				sum = "more than an int64 of minor units holds"
			}
			msg := fmt.Sprintf("the plan asks for the whole of the payment (%d %s), but its live refunds at %s add up to %s, this item's own %s of %d among them: an earlier plan made it. Nothing sent; if more is owed, plan the difference under a new item id", pay.info.Amount, pay.info.Currency, e.name, sum, r.ID, r.Amount)
			return e.failedWith(it, attempt, r.ID, CodeAmountDiffers, msg)
		}
	}
	if err := verify(it, r, 0); err != nil {
		return e.mismatch(it, attempt, r, 0, err)
	}
	res := e.settle(it, attempt, r, journal.SourceReconciled)
	res.Found = true
	e.logItem(slog.LevelDebug, "found at "+e.name+" and adopted: nothing sent", it, attempt, "refund", r.ID)
	if res.Status != StatusRefunded && res.Status != StatusPending || len(own) == 1 {
		return res
	}
	for _, x := range own[1:] {
		a := attemptOf(x, attempt)
		if res, ok := e.credit(it, a, x); !ok {
			return res
		}
		if !e.append(e.refunded(it, a, x, journal.SourceReconciled)) {
			return e.unrecorded(it, attempt, fmt.Sprintf("a second refund %s exists but could not be journaled", x.ID))
		}
	}
	extra := describe(own[1:])
	e.logItem(slog.LevelError, "item has more than one refund at "+e.name, it, attempt, "kept", r.ID, "extra", extra)
	res.Code = CodeDuplicateRefunds
	res.Message = fmt.Sprintf("%s holds more than one refund for this item: kept %s, also %s; all are journaled and audit reports them (a succeeded refund cannot be reversed through the API)", e.name, r.ID, extra)
	return res
}

// checkPayment checks, before a call, that the provider holds the payment
// in the plan's currency (one that cannot read payments: verify checks).
func (e *engine) checkPayment(ctx context.Context, it *Item, attempt int, unsent bool, pay *payment) (res Result, done bool) {
	if it.Currency == "" {
		return Result{}, false
	}
	if res, ok := e.readPayment(ctx, it, attempt, unsent, pay); !ok {
		return res, true
	}
	if !pay.known || pay.info.Currency == it.Currency {
		return Result{}, false
	}
	msg := fmt.Sprintf("the plan says %s, but %s holds the payment in %s: nothing sent. Plan it in the payment's currency under a new item id", it.Currency, e.name, pay.info.Currency)
	if !unsent {
		msg += "; an earlier call for it was sent, and its refund is not found"
	}
	res, ok := e.fail(it, e.failure(it, attempt, 0, CodeCurrencyDiffers, msg, unsent), msg)
	if ok {
		e.logItem(slog.LevelWarn, "currency differs from the payment's", it, attempt, "plan", it.Currency, "payment", pay.info.Currency)
	}
	return res, true
}

// Errors of call that say nothing was sent under the attempt's key by it.
var (
	errNotSent         = errors.New("stopped before the call was sent") // a signal or halt before the first request
	errIntentUnwritten = errors.New("intent not journaled")
	errWouldSend       = errors.New("a dry run sends nothing")
)

// call sends one refund request, repeating it under the same key while the
// provider asks for patience or does not answer. The intent is journaled
// once the pacer lets the first request go.
func (e *engine) call(ctx context.Context, it *Item, attempt int) (Answer, error) {
	if e.cfg.DryRun {
		return Answer{}, errWouldSend // before the pacer: no create budget spent
	}
	for try := 0; ; try++ {
		if err := e.cfg.Pacer.Wait(ctx, EndpointCreate); err != nil || e.halted() || !e.holds(ctx, it) {
			if try == 0 {
				return Answer{}, errNotSent
			}
			return Answer{}, context.Canceled
		}
		if try == 0 && !e.append(e.intent(it, attempt)) {
			return Answer{}, errIntentUnwritten
		}
		e.creates.Add(1)
		// A sent request is never abandoned on the first signal: its
		// answer must be journaled.
		a, err := e.cfg.Provider.Create(context.WithoutCancel(ctx), it, attempt)
		e.cfg.Pacer.Done(EndpointCreate, err)
		if err == nil {
			e.unanswered.Store(0)
			return a, nil
		}
		if !e.retryable(ctx, err, try, it, attempt, "create") {
			if ctx.Err() != nil && !e.halted() {
				return Answer{}, context.Canceled // a signal, not a halt
			}
			return Answer{}, err
		}
	}
}

// record journals a refund the create call answered with.
func (e *engine) record(it *Item, attempt int, a Answer) Result {
	if err := verify(it, &a.Refund, attempt); err != nil {
		return e.mismatch(it, attempt, &a.Refund, a.HTTPStatus, err)
	}
	if journal.DeadStatus(a.Status) {
		return e.deadRefund(it, &a.Refund) // created and already failed or canceled: no money moved
	}
	source := journal.SourceAPI
	if a.Replayed {
		source = journal.SourceReplay
	}
	return e.settle(it, attempt, &a.Refund, source)
}

// refused settles an item whose create call failed as f says.
func (e *engine) refused(it *Item, attempt int, unsent bool, f Failure) Result {
	status, code, msg := f.Status, f.Code, f.Message
	final := f.Class == ClassFinal
	if f.Class == ClassKeyReused {
		msg = e.name + " holds another request under this item's key (other parameters: the plan changed after an earlier run); nothing sent now. Plan the changed refund under a new item id"
		if !unsent {
			// That request is this item's own intent: it may still make its
			// refund. In doubt, not failed.
			msg = e.name + " holds this item's earlier request under its key, with other parameters (the plan's reason or metadata changed since): nothing sent now, but that request may have made or still make a refund. Restore the plan as it was and run again; a later run looks it up first"
			e.logItem(slog.LevelWarn, "key used before with other parameters", it, attempt)
			res, _ := e.fail(it, e.failure(it, attempt, status, code, msg, false), "answer could not be journaled")
			return res
		}
		final = true
	}
	journaled := status
	if f.Class == ClassIndeterminate {
		journaled = journal.HTTPStatusSaved // the mark of an answer saved under the key, which burns it
	}
	if !e.append(e.failure(it, attempt, journaled, code, msg, final)) {
		return e.unrecorded(it, attempt, "answer could not be journaled")
	}
	switch f.Class {
	case ClassFinal, ClassKeyReused:
		e.logItem(slog.LevelDebug, "refused for good", it, attempt, "status", status, "code", code)
		return failed(it, attempt, code, msg)
	case ClassFatal:
		why := code // an exec command's refusal has no HTTP status
		if status != 0 {
			why = fmt.Sprintf("%d %s", status, code)
		}
		e.refusedKey(why)
		return inDoubt(it, attempt, code, "run halted")
	case ClassStopped:
		return inDoubt(it, attempt, code, "interrupted while retrying a call that was sent; a later run looks it up first")
	case ClassInDoubt:
		e.logItem(slog.LevelDebug, "no answer: in doubt, not sent again in this run", it, attempt, "code", code)
		return inDoubt(it, attempt, code, msg+"; a later run looks it up first and sends nothing new until it knows")
	case ClassRetry:
		// call gave up after too many unanswered tries and halted the run.
		return inDoubt(it, attempt, code, e.name+" did not answer; a later run looks it up first")
	}
	// An indeterminate answer is saved under the key, and the call may still
	// complete (LateOutcomes): no new key in this run (ResendAfter500).
	e.indeterminate.Add(1)
	e.logItem(slog.LevelDebug, fmt.Sprintf("%s answered %d: in doubt, no new key in this run", strings.ToLower(e.name), status), it, attempt, "code", code)
	if e.facts.LateOutcomes {
		return inDoubt(it, attempt, code, fmt.Sprintf("%s answered %d: its result is indeterminate (%s may still complete it). A later run looks it up; it sends under a new key only with --resend-after-500", e.name, status, e.name))
	}
	return inDoubt(it, attempt, code, fmt.Sprintf("%s answered %d: its result is indeterminate. %s", e.name, status, upperFirst(e.facts.AfterIndeterminate())))
}
