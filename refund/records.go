package refund

// The records an item's life writes to the checkpoint and the results that
// go with them. They call only the engine's primitives (engine.go).

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/refundkit/refundkit/journal"
)

func (e *engine) base(t journal.Type, it *Item, attempt int) *journal.Record {
	return &journal.Record{
		V: journal.Version, Type: t, Time: e.cfg.Now().UTC(),
		Batch: it.Batch, Item: it.Item, Charge: it.Charge, PaymentIntent: it.PaymentIntent, Capture: it.Capture,
		PSPReference: it.PSPReference, Attempt: attempt, Key: IdempotencyKey(it.Batch, it.Item, attempt),
	}
}

func (e *engine) intent(it *Item, attempt int) *journal.Record {
	rec := e.base(journal.TypeIntent, it, attempt)
	rec.Amount, rec.Currency, rec.Reason = it.Amount, it.Currency, it.Reason
	return rec
}

func (e *engine) failure(it *Item, attempt, status int, code, msg string, final bool) *journal.Record {
	rec := e.base(journal.TypeFailed, it, attempt)
	rec.HTTPStatus, rec.Code, rec.Message, rec.Final = status, code, msg, final
	return rec
}

// refunded is the record of refund r, the item's, found or answered.
func (e *engine) refunded(it *Item, attempt int, r *Refund, source string) *journal.Record {
	rec := e.base(journal.TypeRefunded, it, attempt)
	rec.Refund, rec.Amount, rec.Currency, rec.Status, rec.Source = r.ID, r.Amount, r.Currency, r.Status, source
	return rec
}

func inDoubt(it *Item, attempt int, code, msg string) Result {
	return outcome(it, StatusInDoubt, attempt, code, msg)
}

// failed is the result of an item failed for good, as journaled.
func failed(it *Item, attempt int, code, msg string) Result {
	return outcome(it, StatusFailed, attempt, code, msg)
}

func outcome(it *Item, status string, attempt int, code, msg string) Result {
	r := newResult(it, status)
	r.Attempt, r.Code, r.Message = attempt, code, msg
	return r
}

// fail journals rec, the item's failure, and returns its result: failed
// when final, else in doubt; ok is false when the checkpoint could not take
// it (the result then says lost).
func (e *engine) fail(it *Item, rec *journal.Record, lost string) (res Result, ok bool) {
	if !e.append(rec) {
		return e.unrecorded(it, rec.Attempt, lost), false
	}
	res = inDoubt(it, rec.Attempt, rec.Code, rec.Message)
	if rec.Final {
		res.Status = StatusFailed
	}
	res.Refund = rec.Refund
	return res, true
}

// notCalled is the result of an item stopped before any call of this run:
// one never sent is dropped, unjournaled.
func notCalled(it *Item, unsent bool, code, msg string) Result {
	if unsent {
		return Result{} // not started: emit drops it
	}
	return inDoubt(it, 0, code, msg)
}

// stillPending is the result of an item whose refund has not finished.
func stillPending(it *Item, st journal.ItemState, code, msg string) Result {
	r := asJournaled(it, StatusPending, st)
	r.Code, r.Message = code, msg
	return r
}

// asJournaled is the item's result as the checkpoint holds its refund.
func asJournaled(it *Item, status string, st journal.ItemState) Result {
	r := newResult(it, status)
	r.Refund, r.Amount, r.Currency, r.Attempt = st.Refund, st.Amount, st.Currency, st.Attempt
	return r
}

// unrecorded reports an item whose outcome the checkpoint could not take.
func (e *engine) unrecorded(it *Item, attempt int, msg string) Result {
	e.logItem(slog.LevelError, "item not journaled", it, attempt, "detail", msg)
	return inDoubt(it, attempt, "journal_failed", msg)
}

// unsettled is the result of an item whose refund's end did not come:
// pending, or in doubt when its status is not known.
func (e *engine) unsettled(it *Item, st journal.ItemState, code, msg string) Result {
	if !st.Unsure() {
		return stillPending(it, st, code, msg)
	}
	if code == "" || code == CodeNoLookup {
		msg = fmt.Sprintf("refund %s is journaled in a status refundkit does not know, and %s did not say another: %s", st.Refund, e.name, msg)
		code = journal.CodeStatusUnknown
	}
	r := inDoubt(it, st.Attempt, code, msg)
	r.Refund, r.Amount = st.Refund, st.Amount
	return r
}

// settle journals refund r as the item's and says so.
func (e *engine) settle(it *Item, attempt int, r *Refund, source string) Result {
	if r.Amount <= 0 {
		// A refund of nothing, or less, is no refund: never credited.
		return e.mismatch(it, attempt, r, 0, fmt.Errorf("refund %s is of %d", r.ID, r.Amount))
	}
	if res, ok := e.credit(it, attempt, r); !ok {
		return res
	}
	if !e.append(e.refunded(it, attempt, r, source)) {
		return e.unrecorded(it, attempt, fmt.Sprintf("refund %s exists but could not be journaled", r.ID))
	}
	status := StatusRefunded
	switch journal.OutcomeOf(r.Status) {
	case journal.OutcomeMoving:
		status = StatusPending
	case journal.OutcomeUnknown:
		e.logItem(slog.LevelWarn, "refund in a status refundkit does not know", it, attempt, "refund", r.ID, "status", r.Status)
		res := inDoubt(it, attempt, journal.CodeStatusUnknown, unknownStatus(e.name, r))
		res.Refund, res.Amount, res.Currency = r.ID, r.Amount, r.Currency
		return res
	}
	res := newResult(it, status)
	res.Refund, res.Amount, res.Currency, res.Attempt = r.ID, r.Amount, r.Currency, attempt
	return res
}

// unknownStatus says why an item whose refund r is in a status not on the
// allow-list is neither done nor failed.
func unknownStatus(provider string, r *Refund) string {
	return fmt.Sprintf("refund %s is in status %q at %s, which refundkit does not know: whether money moved cannot be told. Nothing new is sent for this item; a later run asks %s again, and only a status it knows settles it (check the refund at %s)",
		r.ID, r.Status, provider, provider, provider)
}

// credit reserves refund r for it before it is journaled: one item per
// refund, ever. ok is false when another item holds it (res: the mismatch).
func (e *engine) credit(it *Item, attempt int, r *Refund) (res Result, ok bool) {
	if !e.holds(context.Background(), it) {
		// Paused past its lease: the item is another worker's now.
		return e.unrecorded(it, attempt, fmt.Sprintf("refund %s exists but the item's claim was lost before it could be journaled; its new holder looks it up", r.ID)), false
	}
	batch, item, held, err := e.cfg.Checkpoint.Holder(r.ID)
	if err != nil {
		e.halt(&HaltError{Journal: true, Err: err})
		return e.unrecorded(it, attempt, fmt.Sprintf("refund %s exists but whether another item holds it could not be read", r.ID)), false
	}
	if held && (batch != it.Batch || item != it.Item) {
		return e.mismatch(it, attempt, r, 0, fmt.Errorf("refund %s is credited to item %q of batch %q already", r.ID, item, batch)), false
	}
	// This run's credits, by the refund's 64-bit hash: a collision stops
	// the run, never passes two refunds for one.
	mine, _ := e.plan.find(it.Batch, it.Item)
	id := e.plan.targetHash(r.ID)
	e.creditMu.Lock()
	was, taken := e.credits[id]
	if !taken {
		e.credits[id] = mine
	}
	e.creditMu.Unlock()
	if taken && was != mine {
		return e.mismatch(it, attempt, r, 0, fmt.Errorf("refund %s is credited already, in this run, to the item on line %d of the plan", r.ID, e.plan.lineOf(was))), false
	}
	return Result{}, true
}

// recredit journals, in one commit, the end of the item's refund r and its
// credit to x, another refund of its own that still stands.
func (e *engine) recredit(it *Item, st journal.ItemState, r, x *Refund) Result {
	attempt := attemptOf(x, max(st.Attempt, 1))
	if res, ok := e.credit(it, attempt, x); !ok {
		return res
	}
	end := e.failure(it, attempt, 0, "refund_"+r.Status, fmt.Sprintf("refund %s ended %s at %s; the item's refund %s stands", r.ID, r.Status, e.name, x.ID), true)
	end.Refund = r.ID
	if !e.append(end, e.refunded(it, attempt, x, journal.SourceSettled)) {
		return e.unrecorded(it, attempt, fmt.Sprintf("refund %s stands for the item but could not be journaled", x.ID))
	}
	e.logItem(slog.LevelInfo, "the item's refund ended; another of its own stands", it, attempt, "ended", r.ID, "refund", x.ID)
	res := newResult(it, StatusRefunded)
	res.Refund, res.Amount, res.Currency, res.Attempt, res.Found = x.ID, x.Amount, x.Currency, attempt, true
	if journal.Unfinished(x.Status) {
		res.Status = StatusPending
	}
	return res
}

// mismatch handles an answer that is not the item's refund: the run halts
// and the item stays in doubt. status is the answer's (0: a look-up's).
func (e *engine) mismatch(it *Item, attempt int, r *Refund, status int, err error) Result {
	msg := err.Error() + ": not this item's refund; check it at " + e.name + " before running again"
	res, ok := e.fail(it, e.failure(it, attempt, status, CodeAnswerMismatch, msg, false), msg)
	if ok {
		e.logItem(slog.LevelError, "answer is not this item's refund", it, attempt, "refund", r.ID, "detail", err.Error())
		e.halt(&HaltError{Err: fmt.Errorf("%s answered item %s of batch %s with a refund that is not its own: %v", strings.ToLower(e.name), it.Item, it.Batch, err)})
	}
	return res
}

// failedWith journals the item as failed for good because of its refund
// refundID, and says so.
func (e *engine) failedWith(it *Item, attempt int, refundID, code, msg string) Result {
	rec := e.failure(it, attempt, 0, code, msg, true)
	rec.Refund = refundID
	res, _ := e.fail(it, rec, msg)
	return res
}

// amountDiffers fails an item whose own refund is of another amount than
// the plan's (an earlier plan made it): a person decides about the rest.
func (e *engine) amountDiffers(it *Item, attempt int, r *Refund) Result {
	msg := fmt.Sprintf("refund %s of this item at %s is of %d %s, the plan asks %d: an earlier plan made it. Nothing sent; if more is owed, plan the difference under a new item id", r.ID, e.name, r.Amount, r.Currency, it.Amount)
	return e.failedWith(it, attempt, r.ID, CodeAmountDiffers, msg)
}

// deadRefund fails for good an item whose refund was canceled or failed:
// its key would replay it, a new key resend to where it did not arrive.
func (e *engine) deadRefund(it *Item, r *Refund) Result {
	attempt := attemptOf(r, 1)
	msg := fmt.Sprintf("refund %s for this item is %s at %s", r.ID, r.Status, e.name)
	if r.FailureReason != "" {
		msg += " (" + r.FailureReason + ")"
	}
	msg += ": not sent again; if the money is still owed, refund it under a new item id"
	return e.failedWith(it, attempt, r.ID, "refund_"+r.Status, msg)
}

// hold journals an item whose charge holds refunds made elsewhere: failed
// for good when never sent, else in doubt.
func (e *engine) hold(it *Item, attempt int, unsent bool, code string, refunds []*Refund) Result {
	why := "the charge already has refunds made outside refundkit"
	switch code {
	case CodeRefundedByOtherBatch:
		why = "another refundkit batch already refunded this charge"
	case CodeRefundedByOtherItem:
		why = "the charge holds a refund of this batch for an item the plan does not put on this payment (an item renamed, dropped or moved to another payment?)"
	case CodeRefundedUnattributed:
		why = "the charge holds refunds the provider cannot say whose they are (one may be refundkit's own, from a journal that was lost)"
	}
	return e.holdFor(it, attempt, unsent, code, why, describe(refunds))
}

// holdFor journals the item as held for what (refunds or items named for
// people) on its payment; why says whose they are.
func (e *engine) holdFor(it *Item, attempt int, unsent bool, code, why, what string) Result {
	sent := "nothing sent"
	if !unsent {
		sent = fmt.Sprintf("nothing sent now; attempt %d was sent by an earlier run and its refund is not found", attempt)
	}
	msg := fmt.Sprintf("%s: %s; %s. If another refund is intended, run again with --allow-refunded-charges", why, what, sent)
	res, ok := e.fail(it, e.failure(it, attempt, 0, code, msg, unsent), msg)
	if ok {
		e.logItem(slog.LevelDebug, "item held: "+why, it, attempt, "refunds", what)
	}
	return res
}

// unseen names items for a hold, and says why the look-up did not show
// their refunds.
func (e *engine) unseen(items []journal.PaymentItem, unlisted bool) string {
	why := fmt.Sprintf("%s cannot list this payment's refunds, or not all of them yet: finding none there proves nothing", e.name)
	if !unlisted {
		why = fmt.Sprintf("%s lists no refund for it yet, but it answered its call with its own 500 and may still complete it", e.name)
	}
	return describeItems(items) + "; " + why
}

// personChecks says what a person does for an item in doubt that refund
// leaves alone (no_lookup) on a PartialLookup provider's payment.
func (e *engine) personChecks() string {
	return fmt.Sprintf("check the payment %s: if %[2]s has the refund, the next run adopts it once %[2]s has told of it; if it has none, plan the refund again under a new item id (docs/providers.md)", e.facts.checkWhere(), e.name)
}

// describe names refunds for people: id, whose, how much.
func describe(refunds []*Refund) string {
	parts := make([]string, len(refunds))
	for i, r := range refunds {
		who := "no refundkit metadata"
		switch b := r.Metadata[MetaBatch]; {
		case r.Unattributed:
			who = "whose cannot be told"
			if r.FailureReason != "" {
				who += ": " + r.FailureReason
			}
		case b != "":
			who = "batch " + b + ", item " + r.Metadata[MetaItem]
		}
		parts[i] = fmt.Sprintf("%s (%s, %d %s, %s)", r.ID, who, r.Amount, r.Currency, r.Status)
	}
	return strings.Join(parts, "; ")
}

// describeItems names items of the checkpoint for people: whose, in what
// state, which refund.
func describeItems(items []journal.PaymentItem) string {
	parts := make([]string, len(items))
	for i, p := range items {
		st := &p.State
		state := st.Status.String()
		switch {
		case hasRefundStatus(st.Status):
			state += ", " + st.Refund
		case st.Status == journal.StatusInDoubt:
			state = fmt.Sprintf("in doubt, attempt %d sent %s", max(st.Attempt, 1), sentWhen(st.SentAt))
		}
		parts[i] = fmt.Sprintf("item %q of batch %q (%s)", p.Item, p.Batch, state)
	}
	return strings.Join(parts, "; ")
}

// withExtras says on a refunded item's result that it was refunded more
// than once (extras: its other live refunds).
func withExtras(r Result, extras []string) Result {
	extras = slices.DeleteFunc(slices.Clone(extras), func(id string) bool { return id == r.Refund }) // the one credited now
	if len(extras) == 0 || r.Code != "" || r.Status != StatusRefunded && r.Status != StatusSkipped && r.Status != StatusPending {
		return r
	}
	r.Code = CodeDuplicateRefunds
	r.Message = fmt.Sprintf("the journal holds %d more %s for this item beside %s (%s): refunded more than once; audit reports them (a succeeded refund cannot be reversed through the API)",
		len(extras), plural(len(extras), "refund"), r.Refund, strings.Join(extras, ", "))
	return r
}

// upperFirst starts a sentence with s.
func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// hasRefundStatus reports the statuses of an item with a live refund.
func hasRefundStatus(s journal.Status) bool {
	return s == journal.StatusRefunded || s == journal.StatusPending
}

func sentWhen(sentAt int64) string {
	if sentAt == 0 {
		return "when is not journaled"
	}
	return "at " + time.Unix(sentAt, 0).UTC().Format(time.RFC3339)
}
