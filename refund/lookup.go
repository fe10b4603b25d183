package refund

// The look-up's reads at the provider: the payment, its refunds, one
// refund. They call only records.go, retry.go and engine.go.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund/money"
)

// onCharge is what the refunds of an item's charge say about the item.
type onCharge struct {
	own        []*Refund // live refunds naming the item, oldest first
	dead       *Refund   // its oldest canceled or failed refund, when none is live
	otherBatch []*Refund // live refunds of other refundkit batches
	otherItem  []*Refund // live refunds of this batch for items the plan does not put on this payment
	unread     []*Refund // live refunds of this batch for items the plan read so far does not list
	outside    []*Refund // live refunds without refundkit metadata
	unknown    []*Refund // live refunds whose maker cannot be told (Unattributed)
}

// Whose a refund of the item's batch for another item is (owner).
const (
	ownedByPlan   = iota // the plan lists that item on the same payment: two partial refunds of one payment
	ownedByNobody        // the plan does not list that item on this payment (renamed, dropped, or moved)
	ownedUnread          // the plan read so far does not list that item; a later line may
)

// sortRefunds sorts the payment's refunds (newest first, as providers list
// them) by what they mean for it. What a journal says of an item the plan
// no longer lists is no licence for another refund: owner says whose.
func sortRefunds(it *Item, refunds []Refund, owner func(r *Refund) int) onCharge {
	var c onCharge
	for i := len(refunds) - 1; i >= 0; i-- {
		r := &refunds[i]
		batch := r.Metadata[MetaBatch]
		switch {
		case Matches(r, it.Batch, it.Item):
			if Live(r) {
				c.own = append(c.own, r)
			} else if c.dead == nil {
				c.dead = r
			}
		case !Live(r):
		case r.Unattributed:
			c.unknown = append(c.unknown, r)
		case batch == "":
			c.outside = append(c.outside, r)
		case batch != it.Batch:
			c.otherBatch = append(c.otherBatch, r)
		default:
			switch owner(r) {
			case ownedByNobody:
				c.otherItem = append(c.otherItem, r)
			case ownedUnread:
				c.unread = append(c.unread, r)
			}
		}
	}
	if len(c.own) > 0 {
		c.dead = nil
		// The item is credited with its first own refund of the plan's
		// amount that has finished: the one audit --cancel-extras keeps.
		rank := func(r *Refund) int {
			n := 2 // requires_action: the customer may never act
			switch r.Status {
			case RefundSucceeded:
				n = 0
			case RefundPending:
				n = 1
			}
			if it.Amount > 0 && r.Amount != it.Amount {
				n += 3
			}
			return n
		}
		slices.SortStableFunc(c.own, func(a, b *Refund) int { return rank(a) - rank(b) })
	}
	return c
}

// owner says whose refund r, of another item of it's batch, is: the plan's
// when the plan lists that item on the payment r was made on (keys are
// it's payment's names).
func (e *engine) owner(it *Item, r *Refund, keys []string) int {
	names := append([]string{r.Charge, r.PaymentIntent, r.Capture, r.PSPReference, it.Target()}, keys...)
	on, listed := e.plan.on(it.Batch, r.Metadata[MetaItem], names...)
	switch {
	case on:
		return ownedByPlan
	case !listed && !e.plan.whole.Load():
		return ownedUnread
	}
	return ownedByNobody
}

// keyKept reports whether a provider that keeps keys for ttl (0: for ever)
// surely still keeps one first sent at sentAt: within half its time.
func keyKept(sentAt int64, ttl time.Duration, now time.Time) bool {
	if ttl == 0 {
		return true
	}
	age := now.Sub(time.Unix(sentAt, 0))
	return sentAt > 0 && age > -time.Minute && age < ttl/2
}

// payment is what the engine knows of an item's payment while it works on
// it: the names its locks take, and what the provider holds of it, read at
// most once and only when a check needs it.
type payment struct {
	keys  []string // its charge, capture or psp_reference, or its payment intent and the intent's charges
	info  PaymentInfo
	read  bool // info was asked for
	known bool // and the provider told (not ErrNoLookup)
}

// payment names the item's payment for the run's locks: a payment intent
// is named with its charges (read at the provider), so that one named by
// its charge on one line and by its intent on another is one.
func (e *engine) payment(ctx context.Context, it *Item, attempt int, unsent bool) (p *payment, res Result, ok bool) {
	p = &payment{}
	for _, id := range []string{it.Charge, it.Capture, it.PSPReference} {
		if id != "" {
			p.keys = []string{id}
			return p, Result{}, true
		}
	}
	res, ok = e.readPayment(ctx, it, attempt, unsent, p)
	p.keys = append([]string{it.PaymentIntent}, p.info.Charges...)
	return p, res, ok
}

// readPayment asks the provider for the item's payment, once. ok is false
// when the read failed; res then says what became of the item.
func (e *engine) readPayment(ctx context.Context, it *Item, attempt int, unsent bool, p *payment) (res Result, ok bool) {
	if p.read {
		return Result{}, true
	}
	res, ok = e.read(ctx, it, attempt, unsent, EndpointCharges, "read the payment", func(ctx context.Context) error {
		info, err := e.cfg.Provider.Payment(ctx, paymentOf(it))
		if errors.Is(err, ErrNoLookup) {
			return nil // nothing was asked
		}
		if !info.Kept {
			e.paymentReads.Add(1)
		}
		p.info, p.known = info, err == nil
		return err
	})
	p.read = ok
	return res, ok
}

// list returns the refunds of the item's payment, newest first; looked is
// false on ErrNoLookup. ok is false when the listing failed (res: why).
// Of a PaymentKeeper, pay (when not nil) then holds what Find read of the
// payment, with no request of its own.
func (e *engine) list(ctx context.Context, it *Item, attempt int, unsent bool, pay *payment) (refunds []Refund, looked bool, res Result, ok bool) {
	looked = true
	res, ok = e.read(ctx, it, attempt, unsent, EndpointList, "list the charge's refunds", func(ctx context.Context) error {
		var err error
		refunds, err = e.cfg.Provider.Find(ctx, paymentOf(it))
		if errors.Is(err, ErrNoLookup) {
			looked = false
			return nil
		}
		e.refundLists.Add(1)
		return err
	})
	if k, keeps := e.cfg.Provider.(PaymentKeeper); ok && looked && pay != nil && !pay.read && keeps {
		if info, kept := k.Kept(paymentOf(it)); kept {
			pay.info, pay.known, pay.read = info, true, true
		} // else a check that needs it reads it, paced
	}
	return refunds, looked, res, ok
}

// read makes one read call for the item at endpoint ep, repeating it while
// it may succeed. ok is false when it failed; res then says what became of
// the item.
func (e *engine) read(ctx context.Context, it *Item, attempt int, unsent bool, ep Endpoint, what string, call func(context.Context) error) (res Result, ok bool) {
	for try := 0; ; try++ {
		if err := e.cfg.Pacer.Wait(ctx, ep); err != nil {
			return notCalled(it, unsent, "interrupted", "interrupted before the look-up"), false
		}
		if e.halted() {
			return notCalled(it, unsent, "halted", "run halted before the look-up"), false
		}
		err := call(context.WithoutCancel(ctx))
		e.cfg.Pacer.Done(ep, err)
		if err == nil {
			e.unanswered.Store(0)
			return Result{}, true
		}
		f := Classify(err)
		code := f.Code
		switch f.Class {
		case ClassIndeterminate:
			// A GET changes nothing: a 500 on it is safe to repeat.
			if e.retryGet(ctx, try) {
				continue
			}
		case ClassRetry:
			if e.retryable(ctx, err, try, it, 0, "look-up") {
				continue
			}
		case ClassFatal:
			e.refusedKey(code)
		case ClassFinal:
			msg := "could not " + what + ": " + f.Message
			if unsent {
				// Nothing was ever sent, and the payment cannot be read (an
				// unknown charge): nothing can be refunded on it either.
				res, _ := e.fail(it, e.failure(it, attempt, f.Status, code, msg, true), msg)
				return res, false
			}
			return inDoubt(it, 0, code, msg), false
		}
		if e.halted() || ctx.Err() != nil {
			return notCalled(it, unsent, code, "could not "+what), false
		}
		if unsent {
			// Nothing sent, nothing journaled: the next run starts it
			// afresh. Said as a failure, so the run does not exit 0.
			return failed(it, attempt, CodeLookupFailed, fmt.Sprintf("could not %s (%s); nothing sent, nothing journaled: run again", what, code)), false
		}
		return inDoubt(it, 0, code, "could not "+what), false
	}
}

// getRefund reads refund id of the item as the provider holds it now:
// from its events when they tell an outcome that binds (Teller: told), by
// Get, or, for a provider that reads refunds only by listing a payment's
// (exec with --exec-find), among the item's. last is the call's last
// error, which says whether a failed read was answered for good.
func (e *engine) getRefund(ctx context.Context, it *Item, st journal.ItemState, id string) (r Refund, res Result, ok bool, last error, told bool) {
	if t, tells := e.cfg.Provider.(Teller); tells {
		x, ok, err := t.Told(ctx, id)
		if err != nil {
			// What was kept cannot be read (a line that no longer verifies):
			// said, and nothing is taken from it nor asked past it.
			return Refund{}, inDoubt(it, 0, CodeLookupFailed, fmt.Sprintf("could not read what %s's events told of refund %s: %v", e.name, id, err)), false, err, false
		}
		if o := journal.OutcomeOf(x.Status); ok && (o == journal.OutcomeDone || o == journal.OutcomeDead) {
			bad := toldDiffers(it, st, id, &x)
			if bad == nil {
				return x, Result{}, true, nil, true
			}
			// Signed, yet not the item's: it settles nothing, and the
			// provider is asked as if no event had come.
			e.eventsContradicting.Add(1)
			e.logItem(slog.LevelWarn, "the provider's events contradict the journal: they settle nothing, the provider is asked", it, st.Attempt, "refund", id, "error", bad.Error())
		}
	}
	res, ok = e.read(ctx, it, st.Attempt, false, EndpointGet, "read refund "+id, func(ctx context.Context) error {
		var err error
		r, err = e.cfg.Provider.Get(ctx, id)
		if !errors.Is(err, ErrNoLookup) {
			e.refundReads.Add(1)
		} else if found, ferr := e.findRefund(ctx, it, id); !errors.Is(ferr, ErrNoLookup) {
			r, err = found, ferr
		}
		last = err
		if errors.Is(err, ErrNoLookup) {
			return nil // no call can tell: nothing to repeat
		}
		return err
	})
	if ok && errors.Is(last, ErrNoLookup) {
		// Adyen without its notifications: the refund stays as it is.
		return Refund{}, Result{Code: CodeNoLookup, Message: fmt.Sprintf("%s cannot be asked how refund %s ended (with Adyen: its notifications tell, --notifications)", e.name, id)}, false, last, false
	}
	return r, res, ok, last, false
}

// findRefund returns refund id from the refunds of it's payment.
func (e *engine) findRefund(ctx context.Context, it *Item, id string) (Refund, error) {
	refunds, err := e.cfg.Provider.Find(ctx, paymentOf(it))
	if !errors.Is(err, ErrNoLookup) {
		e.refundLists.Add(1)
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

// liveExtra returns the first of the item's extras that the provider still
// holds standing and that is the item's as its plan says (verify), if one is.
func (e *engine) liveExtra(ctx context.Context, it *Item, st journal.ItemState) (Refund, bool) {
	for _, id := range st.ExtraIDs() {
		if x, _, ok, _, _ := e.getRefund(ctx, it, st, id); ok && x.ID == id && Standing(&x) && verify(it, &x, 0) == nil {
			return x, true
		}
	}
	return Refund{}, false
}

// liveSum adds up the live refunds, checked: ok is false beyond int64.
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
