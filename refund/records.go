package refund

// The records a run writes to its checkpoint, and the results and log
// lines that go with them.

import (
	"context"
	"errors"
	"log/slog"
	"strconv"

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

// append records recs durably, in one commit; a failure halts the run.
// It is the run's one write to its checkpoint: in a dry run it writes
// nothing and says it did, so that the item flow goes on as the real
// run's would.
func (e *engine) append(recs ...*journal.Record) bool {
	if e.cfg.DryRun {
		return true
	}
	if err := e.cfg.Checkpoint.Append(recs...); err != nil {
		e.halt(&HaltError{Journal: true, Err: err})
		return false
	}
	return true
}

// logItem logs a decision about an item with what names it: batch, item,
// charge or payment intent, attempt and idempotency key (never the API key).
func (e *engine) logItem(level slog.Level, msg string, it *Item, attempt int, args ...any) {
	if !e.cfg.Log.Enabled(context.Background(), level) {
		return
	}
	all := []any{"batch", it.Batch, "item", it.Item, "target", it.Target()}
	if attempt > 0 {
		all = append(all, "attempt", attempt, "key", IdempotencyKey(it.Batch, it.Item, attempt))
	}
	e.cfg.Log.Log(context.Background(), level, msg, append(all, args...)...)
}

func (e *engine) inDoubt(it *Item, attempt int, code, msg string) Result {
	r := newResult(it, StatusInDoubt)
	r.Attempt, r.Code, r.Message = attempt, code, msg
	return r
}

// failed is the result of an item failed for good, as journaled.
func (e *engine) failed(it *Item, attempt int, code, msg string) Result {
	r := newResult(it, StatusFailed)
	r.Attempt, r.Code, r.Message = attempt, code, msg
	return r
}

// unrecorded reports an item whose outcome the checkpoint could not take.
// It is logged for people; the next run finds the item in doubt and
// reconciles.
func (e *engine) unrecorded(it *Item, attempt int, msg string) Result {
	e.logItem(slog.LevelError, "item not journaled", it, attempt, "detail", msg)
	return e.inDoubt(it, attempt, "journal_failed", msg)
}

func parseAttempt(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err == nil && n < 1 {
		err = errors.New("attempt below 1")
	}
	return n, err
}
