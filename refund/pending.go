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
// journals the end if it came.
func (e *engine) settlePending(ctx context.Context, it *Item, st journal.ItemState) Result {
	var r Refund
	var last error
	res, ok := e.read(ctx, it, st.Attempt, false, EndpointGet, "read pending refund "+st.Refund, func(ctx context.Context) error {
		var err error
		r, err = e.cfg.Provider.Get(ctx, st.Refund)
		if errors.Is(err, ErrNoLookup) {
			// A provider that reads refunds only by listing a payment's
			// (exec with --exec-find): the refund is among the item's.
			if found, ferr := e.findRefund(ctx, it, st.Refund); !errors.Is(ferr, ErrNoLookup) {
				r, err = found, ferr
			}
		}
		last = err
		return err
	})
	switch {
	case !ok && last != nil && Classify(last).Class == ClassFinal && !errors.Is(last, ErrNoLookup):
		f := Classify(last)
		// The provider answered for good that it has no such refund (404:
		// another account's or mode's key, a refund that never was): the
		// item is not done, whatever its journal says. Nothing is journaled,
		// so every run asks again and says so until a person decides.
		return e.inDoubt(it, st.Attempt, f.Code, fmt.Sprintf("journaled pending as refund %s, but %s answers %s: %s. No refund is known to exist for this item: check the payment and the API key's account and mode", st.Refund, e.name, f.Code, f.Message))
	case !ok:
		return e.stillPending(it, st, res.Code, res.Message+"; a later run asks again")
	}
	if r.ID != st.Refund {
		return e.mismatch(it, st.Attempt, &r, 0, fmt.Errorf("asked for refund %s, %s answered with %s", st.Refund, e.name, r.ID))
	}
	switch r.Status {
	case RefundSucceeded:
		e.logItem(slog.LevelDebug, "pending refund settled", it, st.Attempt, "refund", r.ID)
		return e.settle(it, st.Attempt, &r, journal.SourceSettled)
	case RefundFailed, RefundCanceled:
		code := "refund_" + r.Status
		msg := fmt.Sprintf("pending refund %s ended %s at %s", r.ID, r.Status, e.name)
		if r.FailureReason != "" {
			msg += " (" + r.FailureReason + ")"
		}
		msg += ": no money moved and nothing is sent again; if it is still owed, refund it under a new item id"
		return e.failedWith(it, st.Attempt, r.ID, code, msg)
	}
	return e.stillPending(it, st, "", fmt.Sprintf("refund %s is still %s at %s: run again later to settle it", r.ID, r.Status, e.name))
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
