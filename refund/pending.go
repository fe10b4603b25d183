package refund

// Refunds the provider accepted and has not finished (Stripe's and
// PayPal's pending): journaled as pending, counted apart, and settled by a
// later run that asks the provider how each ended. Nothing is sent for
// them again: the refund exists, only its outcome is news.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/refundkit/refundkit/journal"
)

// settlePending asks the provider how the item's pending refund ended, and
// journals the end if it came. It settles, the same way, an item whose
// refund is journaled in a status refundkit does not know (unsure): only
// a status on the allow-list ends that.
func (e *engine) settlePending(ctx context.Context, it *Item, st journal.ItemState) Result {
	journaled := "pending"
	if st.Unsure() {
		journaled = "in a status refundkit does not know"
	}
	r, res, ok, last := e.getRefund(ctx, it, st, st.Refund)
	switch {
	case !ok && last != nil && Classify(last).Class == ClassFinal && !errors.Is(last, ErrNoLookup):
		f := Classify(last)
		// The provider answered for good that it has no such refund (404:
		// another account's or mode's key, a refund that never was): the
		// item is not done, whatever its journal says. Nothing is journaled,
		// so every run asks again and says so until a person decides.
		res := e.inDoubt(it, st.Attempt, f.Code, fmt.Sprintf("journaled %s as refund %s, but %s answers %s: %s. No refund is known to exist for this item: check the payment and the API key's account and mode", journaled, st.Refund, e.name, f.Code, f.Message))
		res.Refund = st.Refund // the refund it is not (a shared checkpoint's end of run tells it so)
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
		// A read that says only the status: the amount is the one
		// journaled for this refund id.
		r.Amount, r.Currency = st.Amount, st.Currency
	}
	switch journal.OutcomeOf(r.Status) {
	case journal.OutcomeDone:
		e.logItem(slog.LevelDebug, "pending refund settled", it, st.Attempt, "refund", r.ID)
		return e.settle(it, st.Attempt, &r, journal.SourceSettled)
	case journal.OutcomeDead:
		if x, found := e.liveExtra(ctx, it, st); found {
			// Another refund of the item's own still stands: the item is
			// refunded by it, and the one that ended is no longer its.
			return e.recredit(it, st, &r, &x)
		}
		code := "refund_" + r.Status
		msg := fmt.Sprintf("%s refund %s ended %s at %s", journaled, r.ID, r.Status, e.name)
		if st.Unsure() {
			msg = fmt.Sprintf("refund %s, journaled %s, ended %s at %s", r.ID, journaled, r.Status, e.name)
		}
		if r.FailureReason != "" {
			msg += " (" + r.FailureReason + ")"
		}
		msg += ": it does not stand (no money moved, or it came back) and nothing is sent again; if it is still owed, refund it under a new item id"
		return e.failedWith(it, st.Attempt, r.ID, code, msg)
	case journal.OutcomeMoving:
		if st.Unsure() {
			return e.settle(it, st.Attempt, &r, journal.SourceSettled) // known now: pending
		}
		return e.stillPending(it, st, "", fmt.Sprintf("refund %s is still %s at %s: run again later to settle it", r.ID, r.Status, e.name))
	}
	if st.Unsure() {
		return e.unsettled(it, st, journal.CodeStatusUnknown, unknownStatus(e.name, &r))
	}
	return e.settle(it, st.Attempt, &r, journal.SourceSettled) // journaled: no longer pending, not done
}

// unsettled is the result of an item whose refund's end did not come:
// still pending, or still in doubt when its status is one refundkit does
// not know.
func (e *engine) unsettled(it *Item, st journal.ItemState, code, msg string) Result {
	if !st.Unsure() {
		return e.stillPending(it, st, code, msg)
	}
	if code == "" || code == CodeNoLookup {
		msg = fmt.Sprintf("refund %s is journaled in a status refundkit does not know, and %s did not say another: %s", st.Refund, e.name, msg)
		code = journal.CodeStatusUnknown
	}
	r := e.inDoubt(it, st.Attempt, code, msg)
	r.Refund, r.Amount = st.Refund, st.Amount
	return r
}

// getRefund reads refund id of the item as the provider holds it now: by
// Get, or, for a provider that reads refunds only by listing a payment's
// (exec with --exec-find), among the item's. last is the call's last
// error, which says whether a failed read was answered for good.
func (e *engine) getRefund(ctx context.Context, it *Item, st journal.ItemState, id string) (r Refund, res Result, ok bool, last error) {
	res, ok = e.read(ctx, it, st.Attempt, false, EndpointGet, "read refund "+id, func(ctx context.Context) error {
		var err error
		r, err = e.cfg.Provider.Get(ctx, id)
		if errors.Is(err, ErrNoLookup) {
			if found, ferr := e.findRefund(ctx, it, id); !errors.Is(ferr, ErrNoLookup) {
				r, err = found, ferr
			}
		}
		last = err
		if errors.Is(err, ErrNoLookup) {
			return nil // no call can tell: nothing to repeat
		}
		return err
	})
	if ok && errors.Is(last, ErrNoLookup) {
		// Adyen without its notifications: the refund stays as it is.
		return Refund{}, Result{Code: CodeNoLookup, Message: fmt.Sprintf("%s cannot be asked how refund %s ended (with Adyen: its notifications tell, --notifications)", e.name, id)}, false, last
	}
	return r, res, ok, last
}

// liveExtra returns the first of the item's extras that the provider
// still holds live and that is the item's as its plan says (payment,
// amount, currency, metadata: verify), if one is.
func (e *engine) liveExtra(ctx context.Context, it *Item, st journal.ItemState) (Refund, bool) {
	for _, id := range st.ExtraIDs() {
		if x, _, ok, _ := e.getRefund(ctx, it, st, id); ok && x.ID == id && Standing(&x) && verify(it, &x, 0) == nil {
			return x, true
		}
	}
	return Refund{}, false
}

// recredit journals, in one commit, the end of the item's refund r and
// its credit to x, another refund of its own that still stands.
func (e *engine) recredit(it *Item, st journal.ItemState, r, x *Refund) Result {
	attempt := max(st.Attempt, 1)
	if a, err := parseAttempt(x.Metadata[MetaAttempt]); err == nil {
		attempt = a
	}
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

// stillPending is the result of an item whose refund has not finished.
func (e *engine) stillPending(it *Item, st journal.ItemState, code, msg string) Result {
	r := newResult(it, StatusPending)
	r.Refund, r.Amount, r.Currency, r.Attempt, r.Code, r.Message = st.Refund, st.Amount, st.Currency, st.Attempt, code, msg
	return r
}

// findRefund returns refund id from the refunds of it's payment.
func (e *engine) findRefund(ctx context.Context, it *Item, id string) (Refund, error) {
	refunds, err := e.cfg.Provider.Find(ctx, paymentOf(it))
	if !errors.Is(err, ErrNoLookup) {
		e.lists.Add(1)
	}
	if err != nil {
		return Refund{}, err
	}
	for _, r := range refunds {
		if r.ID == id {
			return r, nil
		}
	}
	err = fmt.Errorf("refund %s is not among the refunds %s lists for %s", id, e.name, it.Target())
	return Refund{}, &Failure{Class: ClassFinal, Code: "refund_not_found", Message: err.Error(), Err: err}
}

// contradicts reports how a refund read back to settle it (Get) says it
// is not the item's: of the fields the provider said (a refund an Adyen
// notification told of says payment, amount, currency and whose it is;
// one read before any says only its id and status), any that differs from
// the plan's, or from the item's journaled record of that refund, st (a
// plan that leaves the amount or currency to the payment does not check
// them; a refund keeps both for life). A field not said is not a
// contradiction.
func contradicts(it *Item, st journal.ItemState, r *Refund) error {
	said := *r
	p := paymentOf(it)
	for _, f := range []struct {
		got  *string
		want string
	}{{&said.Charge, p.Charge}, {&said.PaymentIntent, p.PaymentIntent}, {&said.Capture, p.Capture},
		{&said.PSPReference, p.PSPReference}, {&said.Currency, it.Currency}} {
		if *f.got == "" {
			*f.got = f.want
		}
	}
	if said.Amount == 0 {
		said.Amount = it.Amount
	}
	if said.Metadata[MetaBatch] == "" {
		said.Metadata = map[string]string{MetaBatch: it.Batch, MetaItem: it.Item}
	}
	if err := verify(it, &said, 0); err != nil {
		return err
	}
	switch {
	case r.Amount != 0 && st.Amount > 0 && r.Amount != st.Amount:
		return fmt.Errorf("refund %s is of %d, but the journal records it of %d", r.ID, r.Amount, st.Amount)
	case r.Currency != "" && st.Currency != "" && r.Currency != st.Currency:
		return fmt.Errorf("refund %s is in %q, but the journal records it in %q", r.ID, r.Currency, st.Currency)
	}
	return nil
}
