package refund

// A dry run goes an item's life as the real run would, its appends no-ops
// and its create call a would_refund: what it comes to says what the real
// run would journal (dryOutcome).

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/refundkit/refundkit/journal"
)

// readOnly is a dry run's provider: a create or a cancel is refused before
// it is sent, whatever path asks for one (call never does: errWouldSend).
type readOnly struct{ Provider }

var errDryRunWrite = &Failure{Class: ClassFatal, Code: "dry_run", Message: "a dry run sends no create or cancel", Err: errors.New("refund: a dry run sends no create or cancel")}

func (readOnly) Create(context.Context, *Item, int) (Answer, error) { return Answer{}, errDryRunWrite }
func (readOnly) Cancel(context.Context, string) (Refund, error)     { return Refund{}, errDryRunWrite }

// dryOutcome is what the real run would do with j, said of the result the
// dry run came to: refunded, failed or held say what it would journal;
// what the journal already holds (still pending, still in doubt) stays. A
// real run's result is returned as it is.
func (e *engine) dryOutcome(j job, r Result) Result {
	if !e.cfg.DryRun {
		return r
	}
	was := journal.StatusUnknown
	if j.known {
		was = j.st.Status
	}
	switch r.Status {
	case StatusRefunded, StatusPending:
		if r.Status == StatusPending && was == journal.StatusPending && r.Refund == j.st.Refund && !r.Found {
			return r // still pending at the provider: as journaled
		}
		what := "the look-up finds the item's own refund: the real run journals it as the item's, sending nothing"
		if was == journal.StatusPending {
			what = fmt.Sprintf("its pending refund has ended %s at %s: the real run journals it", r.Status, e.name)
		}
		if r.Status == StatusPending {
			what += " (pending at " + e.name + ": journaled pending)"
		}
		r.Status, r.Message = StatusWouldAdopt, joinMessage(what, r.Message)
	case StatusFailed, StatusInDoubt:
		switch {
		case IsHold(r.Code):
			r.Status, r.Message = StatusWouldHold, joinMessage("the real run holds it", r.Message)
		case r.Status == StatusInDoubt && (was == journal.StatusInDoubt || was == journal.StatusPending):
			return r // stays in doubt: nothing the look-up found settles it
		case r.Code == CodeLookupFailed:
			r.Status, r.Message = StatusWouldFail, joinMessage("the dry run could not look it up, and neither could a real run now", r.Message)
		default:
			r.Status, r.Message = StatusWouldFail, joinMessage("the real run fails it", r.Message)
		}
	}
	return r
}

func joinMessage(a, b string) string {
	if b == "" {
		return a
	}
	return a + ": " + b
}

// wouldSend is a dry run's result for an item the real run would send: how
// much, in what currency, under which key. A full refund would refund the
// payment's amount less its live refunds as listed; 0 when unknown.
func (e *engine) wouldSend(ctx context.Context, it *Item, attempt int, unsent, newKey bool, pay *payment, listed *[]Refund) Result {
	r := newResult(it, StatusWould)
	r.Attempt, r.Amount, r.Currency = attempt, it.Amount, it.Currency
	if r.Amount == 0 || r.Currency == "" {
		if res, ok := e.readPayment(ctx, it, attempt, unsent, pay); !ok {
			return res
		}
		if pay.known {
			r.Currency = cmp.Or(r.Currency, pay.info.Currency)
			if r.Amount == 0 && listed != nil {
				// Live refunds beyond int64 (or below 0) leave the rest unknown.
				if live, ok := liveSum(*listed); ok && live >= 0 {
					r.Amount = max(pay.info.Amount-live, 0)
				}
			}
		}
	}
	key := IdempotencyKey(it.Batch, it.Item, attempt)
	switch {
	case unsent:
		r.Message = "the real run sends it under key " + key
	case newKey:
		r.Message = fmt.Sprintf("in doubt, and %s has no refund for it: the real run sends it under a new key, %s", e.name, key)
	default:
		r.Message = fmt.Sprintf("in doubt, and %s has no refund for it: the real run sends it again under the same key, %s (%s answers for the earlier call if it made a refund)", e.name, key, e.name)
	}
	if it.Amount == 0 && r.Amount == 0 {
		r.Message += "; the rest of the payment, of an amount " + e.name + " did not say"
	}
	return r
}
