package refund

// The look-up at the provider that stands before every call that could
// make a second refund: before an item's first call, before reusing the key
// of an item in doubt, and before a new key after a saved indeterminate
// answer. It reconciles the checkpoint with the provider's own records.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/refundkit/refundkit/journal"
)

// Codes of the results and journal records that the look-up and the checks
// of the provider's answers write.
const (
	// CodeRefundedByOtherBatch: the charge holds a live refund of another
	// refundkit batch; the item is held, nothing is sent.
	CodeRefundedByOtherBatch = "refunded_by_other_batch"
	// CodeRefundedOutside: the charge holds a live refund without refundkit
	// metadata and AllRefunds asks to hold such items.
	CodeRefundedOutside = "refunded_outside_refundkit"
	// CodeRefundedUnattributed: the charge holds a live refund the provider
	// cannot say whose it is (Refund.Unattributed); it may be refundkit's
	// own, so the item is held, nothing is sent.
	CodeRefundedUnattributed = "refunded_unattributed"
	// CodeDuplicateRefunds: the provider holds more than one live refund
	// for the item; one is kept, the others are journaled and reported.
	CodeDuplicateRefunds = "duplicate_refunds"
	// CodeRefundedByOtherItem: the charge holds a live refund of this batch
	// for an item that the plan does not put on this payment (an item
	// renamed, dropped or moved), whatever a journal says of that item; the
	// item is held, nothing is sent.
	CodeRefundedByOtherItem = "refunded_by_other_item"
	// CodeAnswerMismatch: the provider answered a create call with a refund
	// that is not the item's (another charge, amount or item); the run
	// halts.
	CodeAnswerMismatch = "answer_mismatch"
	// CodeSharedRefund: the journal credits the item's refund to another
	// item too (first); not done, nothing sent, until a person mends it.
	CodeSharedRefund = "shared_refund"
	// CodeAmountDiffers: the look-up found the item's own refund, of
	// another amount than the plan's (made under an earlier plan), or, for
	// a full refund, the payment's refunds do not add up to its amount.
	CodeAmountDiffers = "refund_amount_differs"
	// CodeCurrencyDiffers: the payment, or the item's own refund, is in
	// another currency than the plan says; nothing is sent.
	CodeCurrencyDiffers = "currency_differs"
	// CodeLookupFailed: the charge's refunds could not be listed; nothing
	// was sent and nothing journaled, so the next run tries again.
	CodeLookupFailed = "lookup_failed"
	// CodeNoLookup: an item in doubt that the provider cannot look up and
	// whose key it may have forgotten; nothing is sent, a person checks.
	CodeNoLookup = "no_lookup"
)

// heldCode reports a failure that is a hold for a refund made elsewhere on
// the charge, which AllowRefundedCharges lifts.
func heldCode(code string) bool {
	return code == CodeRefundedByOtherBatch || code == CodeRefundedOutside || code == CodeRefundedByOtherItem ||
		code == CodeRefundedUnattributed
}

// onCharge is what the refunds of an item's charge say about the item.
type onCharge struct {
	own        []*Refund // live refunds naming the item, oldest first
	dead       *Refund   // its oldest canceled or failed refund, when none is live
	otherBatch []*Refund // live refunds of other refundkit batches
	otherItem  []*Refund // live refunds of this batch for items the plan does not put on this payment
	// unread are live refunds of this batch for items the plan does not
	// list, while the plan is still being read: a later line may list them.
	unread  []*Refund
	outside []*Refund // live refunds without refundkit metadata
	unknown []*Refund // live refunds whose maker cannot be told (Unattributed)
}

// Whose a refund of the item's batch for another item is (owner).
const (
	ownedByPlan   = iota // the plan lists that item on the same payment: two partial refunds of one payment
	ownedByNobody        // the plan does not list that item on this payment (renamed, dropped, or moved)
	ownedUnread          // the plan read so far does not list that item; a later line may
)

// sortRefunds sorts the payment's refunds (newest first, as providers list
// them) by what they mean for it. A refund of the same batch for another
// item is the plan's own business only when owner says the plan lists that
// item on this payment: what a journal says of an item the plan no longer
// lists is no licence for another refund.
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
		// amount that has finished (then the oldest): the one an extra's
		// cancel leaves standing, as audit --cancel-extras keeps it, and
		// never one of another amount while one of the plan's stands.
		rank := func(r *Refund) int {
			n := finishRank(r)
			if it.Amount > 0 && r.Amount != it.Amount {
				n += 3
			}
			return n
		}
		slices.SortStableFunc(c.own, func(a, b *Refund) int { return rank(a) - rank(b) })
	}
	return c
}

// finishRank orders live refunds by how done they are: succeeded first.
func finishRank(r *Refund) int {
	switch {
	case r.Status == RefundSucceeded:
		return 0
	case r.Status == RefundPending:
		return 1
	}
	return 2 // requires_action: the customer may never act
}

// lookup lists the refunds of the item's charge and settles the item when
// one of them decides it: its own refund is adopted, a dead one or a
// refund made elsewhere holds it. done is false when nothing stands in the
// way of a call. unsent says no intent was ever journaled for the item;
// st is what the checkpoint holds of it (KeyBurned: an indeterminate
// answer, Stripe's 500, is saved under its current key).
//
// burnedInRun says the key was burned during this run, by another run
// sharing the checkpoint: no new key for it in this run, even with
// ResendAfter500, which speaks of incidents before the run.
//
// pay is the item's payment (payment()): a sibling planned by another of
// its names is a sibling too, and an adopted refund must fit it. listed
// is the payment's refunds when they were listed (nil otherwise): what a
// dry run says would be left to refund.
func (e *engine) lookup(ctx context.Context, it *Item, attempt int, unsent bool, st journal.ItemState, burnedInRun bool, pay *payment) (res Result, done bool, listed *[]Refund) {
	refunds, looked, res, ok := e.list(ctx, it, attempt, unsent)
	if !ok {
		return res, true, nil
	}
	if !looked {
		if res, done := e.otherItems(it, attempt, unsent, pay, true); done {
			return res, true, nil
		}
		res, done := e.unlooked(it, attempt, unsent, st)
		return res, done, nil
	}
	res, done = e.decide(ctx, it, attempt, unsent, st, burnedInRun, refunds, pay)
	return res, done, &refunds
}

// decide settles the item by refunds, its payment's as listed: see lookup.
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
		// Whether the plan owns them is known once it is read to the end.
		return Result{Status: statusDeferred}, true
	case len(c.otherItem) > 0 && !allowed:
		return e.hold(it, attempt, unsent, CodeRefundedByOtherItem, c.otherItem), true
	case len(c.unknown) > 0 && !allowed:
		return e.hold(it, attempt, unsent, CodeRefundedUnattributed, c.unknown), true
	case len(c.outside) > 0 && e.cfg.AllRefunds && !allowed:
		return e.hold(it, attempt, unsent, CodeRefundedOutside, c.outside), true
	case burned && burnedInRun && e.facts.LateOutcomes:
		return e.inDoubt(it, attempt, "api_error", fmt.Sprintf("%s answered 500 to a call of another worker during this run and has no refund for it yet: its result is indeterminate (%[1]s may still complete it). No new key in this run; a later run looks it up again", e.name)), true
	case burned && !e.cfg.ResendAfter500 && e.facts.LateOutcomes:
		return e.inDoubt(it, attempt, "api_error", fmt.Sprintf("%s answered 500 to an earlier call and still has no refund for it: its result is indeterminate (%[1]s may still complete it while it repairs an incident). Check the charge; to send it under a new key, run again with --resend-after-500", e.name)), true
	}
	// What the listing cannot show yet, the checkpoint may: another item's
	// refund the provider has not told of (PartialLookup), or one an
	// indeterminate answer may still make (LateOutcomes).
	if res, done := e.otherItems(it, attempt, unsent, pay, e.facts.PartialLookup); done {
		return res, true
	}
	if e.facts.PartialLookup {
		// Nothing found is not nothing made: as without a look-up.
		if res, done := e.unlooked(it, attempt, unsent, st); done {
			return res, true
		}
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

// unlooked decides for an item whose refunds the provider cannot look up
// (ErrNoLookup, or a PartialLookup that found nothing), by the checkpoint
// alone. One never sent is sent. One in doubt is sent again under its key
// only while the provider surely still keeps it (keyKept), so that it
// answers for the earlier call instead of making a second refund; so is
// one whose key holds an indeterminate answer (the provider's 500): the
// provider replays that answer, or, if it kept none, makes the refund
// once. Never a new key (process gives one only after a full look-up).
// Past the key's time it stays in doubt for a person.
func (e *engine) unlooked(it *Item, attempt int, unsent bool, st journal.ItemState) (Result, bool) {
	switch {
	case unsent:
		return Result{}, false
	case !keyKept(st.SentAt, e.facts.KeyTTL, e.cfg.Now()) && !st.KeyBurned && !e.facts.PartialLookup:
		return e.inDoubt(it, attempt, CodeNoLookup, fmt.Sprintf("an earlier call was sent (%s), %s cannot look its refunds up and keeps keys only %v: check the payment there before planning it again", sentWhen(st.SentAt), e.name, e.facts.KeyTTL)), true
	case !keyKept(st.SentAt, e.facts.KeyTTL, e.cfg.Now()):
		what := "an earlier call was sent"
		if st.KeyBurned {
			what = e.name + " answered 500 to an earlier call"
		}
		return e.inDoubt(it, attempt, CodeNoLookup, fmt.Sprintf("%s (%s); %s cannot list refunds and is counted on to keep keys only %s, half of which may have passed by the journal's clock, so nothing is sent: %s", what, sentWhen(st.SentAt), e.name, keyLife(e.facts.KeyTTL), e.personChecks())), true
	case st.KeyBurned:
		e.logItem(slog.LevelInfo, fmt.Sprintf("in doubt after %[1]s's 500, and %[1]s cannot list refunds: the same key again while %[1]s surely keeps it (it answers for the first call, or makes the refund once)", e.name), it, attempt)
		return Result{}, false
	}
	e.logItem(slog.LevelDebug, "in doubt, no look-up, the key is still kept: the same key again", it, attempt)
	return Result{}, false
}

// personChecks says what a person does for an item in doubt that refund
// leaves alone (no_lookup) on a PartialLookup provider's payment.
func (e *engine) personChecks() string {
	return fmt.Sprintf("check the payment %s: if %[2]s has the refund, the next run adopts it once %[2]s has told of it; if it has none, plan the refund again under a new item id (docs/providers.md)", e.facts.checkWhere(), e.name)
}

// otherItems holds the item when the checkpoint holds another item on its
// payment (of any batch, by any of the payment's names) whose refund may
// stand there although the provider's look-up does not show it: an item
// renamed, moved or planned again under another batch or item id would
// otherwise be sent a second refund. A provider's full listing is
// authoritative for the refunds it has made, so unlisted (no look-up, or
// a PartialLookup that tells only what its notifications said) counts every
// other item in doubt, pending or refunded; listed counts only those
// whose key holds an indeterminate answer that may still complete
// (LateOutcomes), which the listing cannot show yet. Items the plan puts
// on this payment are the plan's own (two partial refunds); one of this
// batch the plan read so far does not list defers the item, as the look-up
// does. --allow-refunded-charges lifts the hold as it lifts the look-up's.
func (e *engine) otherItems(it *Item, attempt int, unsent bool, pay *payment, unlisted bool) (Result, bool) {
	if !unlisted && !e.facts.LateOutcomes {
		return Result{}, false // the listing is the whole truth: no other item can count
	}
	items, err := e.cfg.Checkpoint.OnPayment(pay.keys)
	if err != nil {
		e.halt(&HaltError{Journal: true, Err: err})
		return e.notCalled(it, unsent, "halted", "run halted before the look-up"), true
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
		// Whether the plan owns them is known once it is read to the end.
		return Result{Status: statusDeferred}, true
	case len(otherItem) > 0:
		return e.holdFor(it, attempt, unsent, CodeRefundedByOtherItem, "the journal holds an item of this batch on this payment that the plan does not put there (an item renamed, dropped or moved to another payment?)", e.unseen(otherItem, unlisted)), true
	}
	return Result{}, false
}

// unseen names items for a hold, and says why the provider's look-up did
// not show their refunds.
func (e *engine) unseen(items []journal.PaymentItem, unlisted bool) string {
	why := fmt.Sprintf("%s cannot list this payment's refunds, or not all of them yet: finding none there proves nothing", e.name)
	if !unlisted {
		why = fmt.Sprintf("%s lists no refund for it yet, but it answered its call with its own 500 and may still complete it", e.name)
	}
	return describeItems(items) + "; " + why
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

// hasRefundStatus reports the statuses of an item with a live refund.
func hasRefundStatus(s journal.Status) bool {
	return s == journal.StatusRefunded || s == journal.StatusPending
}

// keyKept reports whether a provider that keeps keys for ttl (0: for
// ever) surely still keeps one first sent at sentAt (Unix seconds). Only
// within half its time: clocks step, a journal restored from a backup
// carries another host's clock, and a key sent again after the provider
// forgot it makes a second refund. A time ahead of now means the clock
// went back: how old the key is cannot be known.
func keyKept(sentAt int64, ttl time.Duration, now time.Time) bool {
	if ttl == 0 {
		return true
	}
	age := now.Sub(time.Unix(sentAt, 0))
	return sentAt > 0 && age > -time.Minute && age < ttl/2
}

func sentWhen(sentAt int64) string {
	if sentAt == 0 {
		return "when is not journaled"
	}
	return "at " + time.Unix(sentAt, 0).UTC().Format(time.RFC3339)
}

// owner says whose refund r, of another item of it's batch, is: the
// plan's when the plan lists that item on the payment r was made on (r
// names its charge and payment intent; keys are it's payment's names).
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

// list returns the refunds of the item's charge or payment intent, newest
// first. looked is false when the provider cannot look this payment's
// refunds up (ErrNoLookup): that is said per payment, never for the run,
// since a provider may list by charge and not by payment intent. ok is
// false when the listing failed; res then says what became of the item.
func (e *engine) list(ctx context.Context, it *Item, attempt int, unsent bool) (refunds []Refund, looked bool, res Result, ok bool) {
	looked = true
	res, ok = e.read(ctx, it, attempt, unsent, EndpointList, "list the charge's refunds", func(ctx context.Context) error {
		var err error
		refunds, err = e.cfg.Provider.Find(ctx, paymentOf(it))
		if errors.Is(err, ErrNoLookup) {
			looked = false
			return nil
		}
		e.lists.Add(1)
		return err
	})
	return refunds, looked, res, ok
}

// read makes one read call for the item at endpoint ep, repeating it while
// it may succeed. ok is false when it failed; res then says what became of
// the item: failed for good when the provider cannot read the charge and
// nothing was ever sent, lookup_failed (not journaled) when it could not be
// read now, in doubt when an earlier call was sent.
func (e *engine) read(ctx context.Context, it *Item, attempt int, unsent bool, ep Endpoint, what string, call func(context.Context) error) (res Result, ok bool) {
	for try := 0; ; try++ {
		if err := e.cfg.Pacer.Wait(ctx, ep); err != nil {
			return e.notCalled(it, unsent, "interrupted", "interrupted before the look-up"), false
		}
		if e.halted() {
			return e.notCalled(it, unsent, "halted", "run halted before the look-up"), false
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
			e.halt(&HaltError{Err: fmt.Errorf("%s refused the API key (%s)", strings.ToLower(e.name), code)})
		case ClassFinal:
			msg := "could not " + what + ": " + f.Message
			if unsent {
				// Nothing was ever sent, and the charge cannot be read (an
				// unknown charge, say): nothing can be refunded on it either.
				rec := e.failure(it, attempt, f.Status, code, msg, true)
				if !e.append(rec) {
					return e.unrecorded(it, attempt, msg), false
				}
				return e.failed(it, attempt, code, msg), false
			}
			return e.inDoubt(it, 0, code, msg), false
		}
		if e.halted() || ctx.Err() != nil {
			return e.notCalled(it, unsent, code, "could not "+what), false
		}
		if unsent {
			// Nothing was sent and nothing is journaled: the next run starts
			// it afresh. Said as a failure, so the run does not exit 0.
			return e.failed(it, attempt, CodeLookupFailed, fmt.Sprintf("could not %s (%s); nothing sent, nothing journaled: run again", what, code)), false
		}
		return e.inDoubt(it, 0, code, "could not "+what), false
	}
}

// notCalled is the result of an item stopped before any call of this run:
// one never sent is left for the next run without a word in the journal.
func (e *engine) notCalled(it *Item, unsent bool, code, msg string) Result {
	if unsent {
		return Result{} // not started: emit drops it
	}
	return e.inDoubt(it, 0, code, msg)
}

// hold journals an item whose charge holds refunds made elsewhere: nothing
// is sent until an operator says more refunds on the charge are intended.
// An item never sent is failed for good; one whose call an earlier run sent
// stays in doubt, since that call may still have made its refund.
func (e *engine) hold(it *Item, attempt int, unsent bool, code string, refunds []*Refund) Result {
	return e.holdFor(it, attempt, unsent, code, holdWhy(code), describe(refunds))
}

// holdWhy says why a refund made elsewhere on the charge holds an item.
func holdWhy(code string) string {
	var why string
	switch code {
	case CodeRefundedByOtherBatch:
		why = "another refundkit batch already refunded this charge"
	case CodeRefundedByOtherItem:
		why = "the charge holds a refund of this batch for an item the plan does not put on this payment (an item renamed, dropped or moved to another payment?)"
	case CodeRefundedUnattributed:
		why = "the charge holds refunds the provider cannot say whose they are (one may be refundkit's own, from a journal that was lost)"
	default:
		why = "the charge already has refunds made outside refundkit"
	}
	return why
}

// holdFor journals the item as held for what (refunds or items named for
// people) on its payment, why says whose they are; see hold.
func (e *engine) holdFor(it *Item, attempt int, unsent bool, code, why, what string) Result {
	sent := "nothing sent"
	if !unsent {
		sent = fmt.Sprintf("nothing sent now; attempt %d was sent by an earlier run and its refund is not found", attempt)
	}
	msg := fmt.Sprintf("%s: %s; %s. If another refund is intended, run again with --allow-refunded-charges", why, what, sent)
	rec := e.failure(it, attempt, 0, code, msg, unsent)
	if !e.append(rec) {
		return e.unrecorded(it, attempt, msg)
	}
	e.logItem(slog.LevelDebug, "item held: "+why, it, attempt, "refunds", what)
	if !unsent {
		return e.inDoubt(it, attempt, code, msg)
	}
	return e.failed(it, attempt, code, msg)
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
