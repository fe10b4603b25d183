package refund

// The refund of one item that needs the provider: the look-up, the intent,
// the call and its outcome.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/refundkit/refundkit/journal"
)

// process settles one item that needs the provider: in doubt from an
// earlier run, held and now allowed, or never tried. Items on one charge or
// payment intent are processed one at a time, so that one's look-up sees
// the other's refund.
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
		return e.notCalled(it, unsent, "interrupted", "stopped while another run held the payment's lock; a later run looks it up first")
	}
	defer unlock()
	// An earlier run, a run under another journal or another batch may have
	// refunded the charge: look before the first call. Only NoLookup skips
	// it, and only for an item the journal has never seen.
	var listed *[]Refund // the payment's refunds, when they were listed
	if j.known || !e.cfg.NoLookup {
		var res Result
		var done bool
		if res, done, listed = e.lookup(ctx, it, attempt, unsent, st, j.burnedInRun, pay); done {
			return res
		}
	} else if res, done := e.otherItems(it, attempt, unsent, pay, true); done {
		return res // the journal alone is trusted: its other items on the payment too
	}
	if res, done := e.checkPayment(ctx, it, attempt, unsent, pay); done {
		return res
	}
	// A new key only after a look-up that lists every refund found none
	// for an item whose key holds an indeterminate answer (lookup let it
	// through). Without one (no look-up, or a PartialLookup), unlooked
	// let it through under its same key, which the provider still keeps:
	// it answers for the first call, never a second refund.
	newKey := st.KeyBurned && listed != nil && !e.facts.PartialLookup
	if newKey {
		// The provider replays its saved answer under this key forever, and
		// lookup let it through: a new key. Never because of the key's age:
		// an old key can still be in flight, and reusing it is never less
		// safe than a new one.
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
		return e.inDoubt(it, attempt, "interrupted", "stopped before this call was sent, but an earlier one was: a later run looks it up first")
	}
	return e.refused(it, attempt, unsent, Classify(err))
}

// refused settles an item whose create call failed as f says.
func (e *engine) refused(it *Item, attempt int, unsent bool, f Failure) Result {
	status, code, msg := f.Status, f.Code, f.Message
	final := f.Class == ClassFinal
	if f.Class == ClassKeyReused {
		msg = e.name + " holds another request under this item's key (other parameters: the plan changed after an earlier run); nothing sent now. Plan the changed refund under a new item id"
		if !unsent {
			// That earlier request is this item's own intent: it may still
			// be making its refund. In doubt, not failed.
			msg = e.name + " holds this item's earlier request under its key, with other parameters (the plan's reason or metadata changed since): nothing sent now, but that request may have made or still make a refund. Restore the plan as it was and run again; a later run looks it up first"
			e.logItem(slog.LevelWarn, "key used before with other parameters", it, attempt)
			if !e.append(e.failure(it, attempt, status, code, msg, false)) {
				return e.unrecorded(it, attempt, "answer could not be journaled")
			}
			return e.inDoubt(it, attempt, code, msg)
		}
		final = true
	}
	journaled := status
	if f.Class == ClassIndeterminate {
		// The journal's mark of an answer saved under the key, which
		// burns it, whatever status the provider gave that answer.
		journaled = journal.HTTPStatusSaved
	}
	if !e.append(e.failure(it, attempt, journaled, code, msg, final)) {
		return e.unrecorded(it, attempt, "answer could not be journaled")
	}
	switch f.Class {
	case ClassFinal, ClassKeyReused:
		e.logItem(slog.LevelDebug, "refused for good", it, attempt, "status", status, "code", code)
		return e.failed(it, attempt, code, msg)
	case ClassFatal:
		why := code // an exec command's refusal has no HTTP status
		if status != 0 {
			why = fmt.Sprintf("%d %s", status, code)
		}
		e.halt(&HaltError{Err: fmt.Errorf("%s refused the API key (%s)", strings.ToLower(e.name), why)})
		return e.inDoubt(it, attempt, code, "run halted")
	case ClassStopped:
		return e.inDoubt(it, attempt, code, "interrupted while retrying a call that was sent; a later run looks it up first")
	case ClassInDoubt:
		e.logItem(slog.LevelDebug, "no answer: in doubt, not sent again in this run", it, attempt, "code", code)
		return e.inDoubt(it, attempt, code, msg+"; a later run looks it up first and sends nothing new until it knows")
	case ClassRetry:
		// call gave up after too many unanswered tries and halted the run.
		return e.inDoubt(it, attempt, code, e.name+" did not answer; a later run looks it up first")
	}
	// An indeterminate answer is saved under the key, and the call may
	// still complete later (Facts.LateOutcomes): no new key in this run;
	// see ResendAfter500.
	e.indeterminate.Add(1)
	e.logItem(slog.LevelDebug, fmt.Sprintf("%s answered %d: in doubt, no new key in this run", strings.ToLower(e.name), status), it, attempt, "code", code)
	if e.facts.LateOutcomes {
		return e.inDoubt(it, attempt, code, fmt.Sprintf("%s answered %d: its result is indeterminate (%s may still complete it). A later run looks it up; it sends under a new key only with --resend-after-500", e.name, status, e.name))
	}
	return e.inDoubt(it, attempt, code, fmt.Sprintf("%s answered %d: its result is indeterminate. %s", e.name, status, upperFirst(e.facts.AfterIndeterminate())))
}

// upperFirst starts a sentence with s.
func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// Errors of call that say nothing was sent under the attempt's key by it.
var (
	// errNotSent: stopped (signal or halt) before the first request.
	errNotSent = errors.New("stopped before the call was sent")
	// errIntentUnwritten: the intent could not be journaled, so the call
	// was not made.
	errIntentUnwritten = errors.New("intent not journaled")
	// errWouldSend: a dry run came to the call, and made none.
	errWouldSend = errors.New("a dry run sends nothing")
)

// wouldSend is a dry run's result for an item the real run would send:
// how much, in what currency, under which key. A full refund (no amount)
// would refund what the payment has left: its amount, read at the
// provider, less its live refunds as listed; unknown (0) when the
// provider cannot say either.
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
				// Live refunds that add up beyond int64 (or below 0) leave
				// the rest unknown.
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

// call sends one refund request, repeating it with the same key while the
// provider asks for patience (429, 409, 503) or does not answer. The intent
// is journaled only once the pacer lets the first request go, so a stop
// while waiting leaves nothing in doubt that was never sent.
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
		// A sent request is never abandoned half-way on the first signal:
		// its answer must be journaled.
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
