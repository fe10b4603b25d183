package refund

// Journaling the refunds the provider answers with or lists, once they are
// shown to be the item's own.

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund/money"
)

// verify reports how r fails to be the refund of it: another charge,
// payment intent, capture or psp_reference, another amount than the one sent, another currency than
// the plan's, or metadata naming another item (or, with attempt > 0,
// another attempt's key).
func verify(it *Item, r *Refund, attempt int) error {
	switch {
	case it.Charge != "" && r.Charge != it.Charge:
		return fmt.Errorf("refund %s names charge %q, not %q", r.ID, r.Charge, it.Charge)
	case it.PaymentIntent != "" && r.PaymentIntent != it.PaymentIntent:
		return fmt.Errorf("refund %s names payment intent %q, not %q", r.ID, r.PaymentIntent, it.PaymentIntent)
	case it.Capture != "" && r.Capture != it.Capture:
		return fmt.Errorf("refund %s names capture %q, not %q", r.ID, r.Capture, it.Capture)
	case it.PSPReference != "" && r.PSPReference != it.PSPReference:
		return fmt.Errorf("refund %s names psp_reference %q, not %q", r.ID, r.PSPReference, it.PSPReference)
	case it.Amount > 0 && r.Amount != it.Amount:
		return fmt.Errorf("refund %s is of %d, not the %d sent", r.ID, r.Amount, it.Amount)
	case it.Currency != "" && r.Currency != it.Currency:
		return fmt.Errorf("refund %s is in %q, not the plan's %q", r.ID, r.Currency, it.Currency)
	case !Matches(r, it.Batch, it.Item):
		return fmt.Errorf("refund %s names batch %q item %q in its metadata, not %q %q",
			r.ID, r.Metadata[MetaBatch], r.Metadata[MetaItem], it.Batch, it.Item)
	case attempt > 0 && r.Metadata[MetaAttempt] != strconv.Itoa(attempt):
		return fmt.Errorf("refund %s names attempt %q in its metadata, not %d", r.ID, r.Metadata[MetaAttempt], attempt)
	}
	return nil
}

// record journals a refund the create call answered with.
func (e *engine) record(it *Item, attempt int, a Answer) Result {
	if err := verify(it, &a.Refund, attempt); err != nil {
		return e.mismatch(it, attempt, &a.Refund, a.HTTPStatus, err)
	}
	if journal.DeadStatus(a.Status) {
		// Created and already failed or canceled: no money moved.
		return e.deadRefund(it, &a.Refund)
	}
	source := journal.SourceAPI
	if a.Replayed {
		source = journal.SourceReplay
	}
	return e.settle(it, attempt, &a.Refund, source)
}

// adopt journals the refunds found for the item by listing its payment's
// refunds (all, newest first), its own oldest first: the first is the
// item's refund; any other is a second refund, journaled too so that audit
// reports it. An own refund that is not what the plan asks (another amount
// or currency, or, for a full refund, refunds that do not add up to the
// payment's amount) is the item's, made under an earlier plan: nothing is
// sent, and a person decides about the difference.
func (e *engine) adopt(ctx context.Context, it *Item, attempt int, unsent bool, own []*Refund, all []Refund, pay *payment) Result {
	e.reconciled.Add(1)
	r := own[0]
	if a, err := parseAttempt(r.Metadata[MetaAttempt]); err == nil {
		attempt = a
	}
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
		a, err := parseAttempt(x.Metadata[MetaAttempt])
		if err != nil {
			a = attempt
		}
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
		res := e.inDoubt(it, attempt, journal.CodeStatusUnknown, unknownStatus(e.name, r))
		res.Refund, res.Amount, res.Currency = r.ID, r.Amount, r.Currency
		return res
	}
	res := newResult(it, status)
	res.Refund, res.Amount, res.Currency, res.Attempt = r.ID, r.Amount, r.Currency, attempt
	return res
}

// unknownStatus says why an item whose refund r is in a status not on the
// allow-list is neither done nor failed, and what happens next.
func unknownStatus(provider string, r *Refund) string {
	return fmt.Sprintf("refund %s is in status %q at %s, which refundkit does not know: whether money moved cannot be told. Nothing new is sent for this item; a later run asks %s again, and only a status it knows settles it (check the refund at %s)",
		r.ID, r.Status, provider, provider, provider)
}

// credit reserves refund r for it before it is journaled as it's: a
// refund is credited to one item, ever, in this run and in the checkpoint.
// A refund another item holds is not it's, whatever answered with it: ok
// is false, and res is the mismatch.
func (e *engine) credit(it *Item, attempt int, r *Refund) (res Result, ok bool) {
	if !e.holds(context.Background(), it) {
		// A worker paused past its lease: the item is another's now, and
		// what it holds is for that one to find.
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
	// This run's credits, by hashes (16 bytes a refund): two refund ids
	// whose hashes collide would stop the run, never pass for one.
	mine := e.plan.key(it.Batch, it.Item)
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

// mismatch handles an answer that is not the item's refund: the API (or
// something in front of it) is not what refund expects, so nothing more is
// sent by this run and the item stays in doubt for a person to check.
// status is the answer's HTTP status (0 for a refund found by a look-up).
func (e *engine) mismatch(it *Item, attempt int, r *Refund, status int, err error) Result {
	msg := err.Error() + ": not this item's refund; check it at " + e.name + " before running again"
	if !e.append(e.failure(it, attempt, status, CodeAnswerMismatch, msg, false)) {
		return e.unrecorded(it, attempt, msg)
	}
	e.logItem(slog.LevelError, "answer is not this item's refund", it, attempt, "refund", r.ID, "detail", err.Error())
	e.halt(&HaltError{Err: fmt.Errorf("%s answered item %s of batch %s with a refund that is not its own: %v", strings.ToLower(e.name), it.Item, it.Batch, err)})
	return e.inDoubt(it, attempt, CodeAnswerMismatch, msg)
}

// withExtras says, on the result of an item the provider refunded, that
// it was refunded more than once: extras are the ids of its other live
// refunds. Said on every run, as a final failure is, until each extra's
// end is journaled (audit --cancel-extras, or a rerun that finds it ended).
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

// recheckExtras answers an item the journal holds refunded more than
// once: the payment's refunds are listed, the end of each extra the
// provider shows ended (canceled by Stripe, or by hand) is journaled, and
// the item is said refunded twice while any still stands. Only a refund
// shown ended ends: one the list leaves out (a list that cannot be whole,
// as PayPal's when an order cannot be read) is asked for by its id, and
// stands unless that answer says it ended. Nothing is sent.
func (e *engine) recheckExtras(ctx context.Context, it *Item, st journal.ItemState) Result {
	res := newResult(it, StatusSkipped)
	res.Refund, res.Amount, res.Currency, res.Attempt = st.Refund, st.Amount, st.Currency, st.Attempt
	extras := st.ExtraIDs()
	refunds, looked, _, ok := e.list(ctx, it, st.Attempt, false)
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
			if x, _, ok, _ := e.getRefund(ctx, it, st, id); ok && x.ID == id {
				r, found = &x, true
			}
		}
		if !found || Live(r) {
			still = append(still, id)
			continue
		}
		rec := e.base(journal.TypeCanceled, it, max(st.Attempt, 1))
		rec.Refund, rec.Status, rec.Source = id, r.Status, journal.SourceReconciled
		rec.Amount, rec.Currency = r.Amount, r.Currency
		if !e.append(rec) {
			return e.unrecorded(it, st.Attempt, fmt.Sprintf("extra refund %s ended at %s but its end could not be journaled", id, e.name))
		}
		e.logItem(slog.LevelInfo, "an extra refund ended at "+e.name+"; journaled", it, st.Attempt, "refund", id)
	}
	return withExtras(res, still)
}

// liveSum adds up the live refunds of refunds, checked: ok is false when
// they add up beyond int64.
func liveSum(refunds []Refund) (n int64, ok bool) {
	for i := range refunds {
		if Live(&refunds[i]) {
			var err error
			if n, err = money.Add(n, refunds[i].Amount, refunds[i].Currency); err != nil {
				return n, false // no payment's amount: never equal to one
			}
		}
	}
	return n, true
}

// checkPayment checks, before a call, that the provider holds the payment
// in the plan's currency: a refund is made in the payment's currency
// whatever the plan says, so 50000 "usd" on a JPY charge would refund
// 50,000 JPY. done is true when the item was settled here (nothing sent).
// A provider that cannot read payments (ErrNoLookup) is taken on the
// plan's word, and its answer's currency is checked (verify).
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
	if !e.append(e.failure(it, attempt, 0, CodeCurrencyDiffers, msg, unsent)) {
		return e.unrecorded(it, attempt, msg), true
	}
	e.logItem(slog.LevelWarn, "currency differs from the payment's", it, attempt, "plan", it.Currency, "payment", pay.info.Currency)
	if !unsent {
		return e.inDoubt(it, attempt, CodeCurrencyDiffers, msg), true
	}
	return e.failed(it, attempt, CodeCurrencyDiffers, msg), true
}

// amountDiffers settles an item whose own refund (its metadata names the
// item) exists at Stripe for another amount than the plan's: an earlier
// plan made it. It is the item's refund, so nothing more is sent, and it is
// not what the plan asks, so a person decides about the difference.
func (e *engine) amountDiffers(it *Item, attempt int, r *Refund) Result {
	msg := fmt.Sprintf("refund %s of this item at %s is of %d %s, the plan asks %d: an earlier plan made it. Nothing sent; if more is owed, plan the difference under a new item id", r.ID, e.name, r.Amount, r.Currency, it.Amount)
	return e.failedWith(it, attempt, r.ID, CodeAmountDiffers, msg)
}

// failedWith journals the item as failed for good because of its refund
// refundID at Stripe, and says so.
func (e *engine) failedWith(it *Item, attempt int, refundID, code, msg string) Result {
	rec := e.failure(it, attempt, 0, code, msg, true)
	rec.Refund = refundID
	if !e.append(rec) {
		return e.unrecorded(it, attempt, msg)
	}
	res := e.failed(it, attempt, code, msg)
	res.Refund = refundID
	return res
}

// deadRefund settles an item whose refund exists at Stripe but was canceled
// or failed there. Its key would replay the creation as a success, and a new
// key would send the money a second time to where it did not arrive: either
// is a decision for a person, so the item is journaled as failed for good.
func (e *engine) deadRefund(it *Item, r *Refund) Result {
	attempt, err := parseAttempt(r.Metadata[MetaAttempt])
	if err != nil {
		attempt = 1
	}
	code := "refund_" + r.Status
	msg := fmt.Sprintf("refund %s for this item is %s at %s", r.ID, r.Status, e.name)
	if r.FailureReason != "" {
		msg += " (" + r.FailureReason + ")"
	}
	msg += ": not sent again; if the money is still owed, refund it under a new item id"
	return e.failedWith(it, attempt, r.ID, code, msg)
}

// CheckBinding reports a plan item that says otherwise than the journal
// (or checkpoint) about what its refund is: another payment, or another
// amount or currency than its intent sent. Such an item was edited after
// the journal was written; sending it would refund what the journal
// cannot account for. It is the one check of a plan item against its
// records, whichever way they arrived (a run, a merge, an import).
func CheckBinding(it *Item, st journal.ItemState) error {
	hint := ": the journal binds an item to what was sent; plan the changed refund under a new item id"
	if st.Status == journal.StatusInDoubt {
		// Its call may have made a refund that a provider without a full
		// look-up (Adyen) cannot show: a new item id now could be a second.
		hint = ": the journal binds an item to what was sent, and this one is in doubt (its call may have made a refund): settle it first, by running again with the plan as it was (with Adyen, once its notifications have come), then plan what is still owed under a new item id"
	}
	if err := CheckRecords(it.Batch, it.Item, st); err != nil {
		return err
	}
	switch {
	case st.Rebound:
		return fmt.Errorf("item %q of batch %q: the journal's records name two different payments for it (%s first): records of two plans merged into one journal? Which payment the item is cannot be told; a person checks its refunds at the provider and plans what is still owed under a new item id", it.Item, it.Batch, boundTarget(st))
	case st.Charge != "" && it.Charge != st.Charge:
		return fmt.Errorf("item %q of batch %q: %s, but the journal records charge %q for it%s", it.Item, it.Batch, planTarget(it), st.Charge, hint)
	case st.PaymentIntent != "" && it.PaymentIntent != st.PaymentIntent:
		return fmt.Errorf("item %q of batch %q: %s, but the journal records payment_intent %q for it%s", it.Item, it.Batch, planTarget(it), st.PaymentIntent, hint)
	case st.Capture != "" && it.Capture != st.Capture:
		return fmt.Errorf("item %q of batch %q: %s, but the journal records capture %q for it%s", it.Item, it.Batch, planTarget(it), st.Capture, hint)
	case st.PSPReference != "" && it.PSPReference != st.PSPReference:
		return fmt.Errorf("item %q of batch %q: %s, but the journal records psp_reference %q for it%s", it.Item, it.Batch, planTarget(it), st.PSPReference, hint)
	case st.Sent && it.Amount != st.SentAmount:
		return fmt.Errorf("item %q of batch %q: amount %s, but the journal records %s as sent%s", it.Item, it.Batch, amountText(it.Amount), amountText(st.SentAmount), hint)
	case st.Sent && it.Currency != "" && st.SentCurrency != "" && it.Currency != st.SentCurrency:
		return fmt.Errorf("item %q of batch %q: currency %q, but the journal records %q as sent%s", it.Item, it.Batch, it.Currency, st.SentCurrency, hint)
	case st.Credited() && it.Amount > 0 && st.Amount != it.Amount:
		// The refund's own amount is what a partial item must match,
		// whatever its intent sent.
		return fmt.Errorf("item %q of batch %q: amount %d, but the journal records refund %s of %d for it%s", it.Item, it.Batch, it.Amount, st.Refund, st.Amount, hint)
	case (st.Status == journal.StatusRefunded || st.Status == journal.StatusPending) && it.Currency != "" && st.Currency == "":
		// A refund the provider answered always says its currency (and
		// refundkit journals the plan's): a record that says none does not
		// show that the money moved in the plan's. (An item whose refund's
		// status is unknown keeps no currency: it is in doubt already.)
		return fmt.Errorf("item %q of batch %q: currency %q, but the journal records refund %s in no currency for it: a record not written by refundkit, or edited; nothing is sent for it until a person checks the refund at the provider (audit --stripe) and its record", it.Item, it.Batch, it.Currency, st.Refund)
	case st.Credited() && it.Currency != "" && st.Currency != "" && st.Currency != it.Currency:
		return fmt.Errorf("item %q of batch %q: currency %q, but the journal records refund %s in %q for it%s", it.Item, it.Batch, it.Currency, st.Refund, st.Currency, hint)
	}
	return nil
}

// CheckRecords reports an item whose records are not consistent with
// themselves, whatever its plan says: its refund journaled again with
// another amount or currency, or credited with an amount no refund has.
// Such records were not written as refundkit writes them (edited, or
// merged by hand); the item is not done, and nothing is sent for it.
func CheckRecords(batch, item string, st journal.ItemState) error {
	switch {
	case st.Contradiction != "":
		return fmt.Errorf("item %q of batch %q: the journal's records of it cannot all be true (%s): records of two runs or plans merged by hand, or edited? Nothing is sent for it; a person checks its refund at the provider (audit --stripe) and mends the journal", item, batch, st.Contradiction)
	case st.Credited() && st.Amount <= 0:
		// No provider refunds nothing, or less than nothing.
		return fmt.Errorf("item %q of batch %q: the journal records refund %s of %d for it, which is no refund: a record not written by refundkit, or edited; nothing is sent for it until a person checks the refund at the provider (audit --stripe) and its record", item, batch, st.Refund, st.Amount)
	}
	return nil
}

func boundTarget(st journal.ItemState) string {
	switch {
	case st.Charge != "":
		return "charge " + st.Charge
	case st.PaymentIntent != "":
		return "payment_intent " + st.PaymentIntent
	case st.Capture != "":
		return "capture " + st.Capture
	}
	return "psp_reference " + st.PSPReference
}

func planTarget(it *Item) string {
	switch {
	case it.Charge != "":
		return fmt.Sprintf("the plan names charge %q", it.Charge)
	case it.PaymentIntent != "":
		return fmt.Sprintf("the plan names payment_intent %q", it.PaymentIntent)
	case it.Capture != "":
		return fmt.Sprintf("the plan names capture %q", it.Capture)
	}
	return fmt.Sprintf("the plan names psp_reference %q", it.PSPReference)
}

func amountText(a int64) string {
	if a == 0 {
		return "0 (the full remaining amount)"
	}
	return strconv.FormatInt(a, 10)
}
