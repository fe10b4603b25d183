package journal

import (
	"fmt"
	"strings"

	"github.com/refundkit/refundkit/journal/arena"
)

// location is a record's input and line.
type location struct{ input, line int }

func (l location) String(paths []string) string { return fmt.Sprintf("%s:%d", paths[l.input], l.line) }

// outcome is a record that settles an item: a refund, or a final failure.
type outcome struct {
	final             bool   // a final failure; else a refund
	batch, item, name string // name: the refund id, or the failure's code
	// refund is the refund a final failure names, if any: a pending
	// refund that ended failed, or one found dead or for another amount.
	refund string
	// amount and currency of a refund, as its record says them (0, "":
	// not said).
	amount   int64
	currency string
	done     bool   // a refund in a status that says the money moved
	payment  string // the payment a refund names, kind first ("c:ch_1"), "" when none
}

// paymentKey is the payment r names, its kind first so that only names of
// one kind are compared (a backfill names a charge where the item's intent
// named its payment intent).
func paymentKey(r *Record) string {
	for k, p := range r.payments() {
		if p != "" {
			return "cipa"[k:k+1] + ":" + p
		}
	}
	return ""
}

// outcomeOf is the outcome r records; false if it records none.
func outcomeOf(r *Record) (outcome, bool) {
	switch {
	case r.Type == TypeRefunded:
		return outcome{batch: r.Batch, item: r.Item, name: r.Refund, amount: r.Amount, currency: r.Currency, done: Done(r.Status), payment: paymentKey(r)}, true
	case r.Type == TypeFailed && r.Final:
		return outcome{final: true, batch: r.Batch, item: r.Item, name: r.Code, refund: r.Refund}, true
	}
	return outcome{}, false
}

// firstOutcomes is what finding conflicts keeps of an item, in the slot
// the merge's item index gives it: its first refund and its first final
// failure, in merge order.
type firstOutcomes struct {
	refund, failure firstOutcome
}

type firstOutcome struct {
	name arena.Ref // the refund id, or the failure's code, in the index's arena
	at   location  // line 0: none yet
	// amount and currency (in the arena) of the first refund, as its
	// first record with each said them: a later record of that refund id
	// that says another is a conflict.
	amount   int64
	currency arena.Ref
	done     bool      // a record of it said done
	payment  arena.Ref // the payment its first record named (paymentKey)
}

// conflicts collects the outcomes that disagree with their item's first
// refund or first final failure, in merge order: each is checked as the
// merge brings it.
type conflicts struct {
	paths   []string
	found   []Conflict
	refunds refundOwners // every refund id, with the item first credited with it
}

// check checks o, read at at, against its item's first outcomes f (their
// names in strs), and keeps o in f if it is the first of its kind. It
// reports whether o conflicts.
func (c *conflicts) check(f *firstOutcomes, strs *arena.Arena, o outcome, at location) bool {
	refunded, failed := f.refund.at.line > 0, f.failure.at.line > 0
	var (
		reason string
		first  location
	)
	switch {
	case !o.final && refunded && strs.Get(f.refund.name) != o.name:
		reason, first = fmt.Sprintf("refunded as %s and as %s", strs.Get(f.refund.name), o.name), f.refund.at
	case !o.final && failed:
		reason, first = fmt.Sprintf("refunded as %s after failing for good (%s)", o.name, strs.Get(f.failure.name)), f.failure.at
	case !o.final && refunded && o.amount != 0 && f.refund.amount != 0 && o.amount != f.refund.amount:
		reason, first = fmt.Sprintf("refund %s journaled with amount %d and with %d", o.name, f.refund.amount, o.amount), f.refund.at
	case !o.final && refunded && o.currency != "" && f.refund.currency != 0 && o.currency != strs.Get(f.refund.currency):
		reason, first = fmt.Sprintf("refund %s journaled in %s and in %s", o.name, strs.Get(f.refund.currency), o.currency), f.refund.at
	case !o.final && refunded && o.payment != "" && f.refund.payment != 0 && o.payment[:2] == strs.Get(f.refund.payment)[:2] && o.payment != strs.Get(f.refund.payment):
		reason, first = fmt.Sprintf("refund %s journaled for %s and for %s", o.name, strs.Get(f.refund.payment)[2:], o.payment[2:]), f.refund.at
	case !o.final && refunded && f.refund.done && !o.done && strs.Get(f.refund.name) == o.name:
		reason, first = fmt.Sprintf("refund %s journaled done, then in a status that is not", o.name), f.refund.at
	case o.final && refunded && f.refund.done && o.refund == strs.Get(f.refund.name):
		reason, first = fmt.Sprintf("failed for good (%s) after refund %s was journaled done", o.name, o.refund), f.refund.at
	case o.final && refunded && o.refund != strs.Get(f.refund.name):
		// A failure that names the item's refund is that refund's end (a
		// pending refund that failed at the provider), not a contradiction.
		reason, first = fmt.Sprintf("failed for good (%s) after being refunded as %s", o.name, strs.Get(f.refund.name)), f.refund.at
	}
	switch {
	case !o.final && !refunded:
		f.refund = firstOutcome{name: strs.Add(o.name), at: at, amount: o.amount, done: o.done, payment: strs.Add(o.payment)}
		if o.currency != "" {
			f.refund.currency = strs.Add(o.currency)
		}
	case o.final && !failed:
		f.failure = firstOutcome{name: strs.Add(o.name), at: at}
	case !o.final && reason == "" && strs.Get(f.refund.name) == o.name:
		// The same refund again: what the first record left unsaid, this
		// one may say.
		if f.refund.amount == 0 {
			f.refund.amount = o.amount
		}
		if f.refund.currency == 0 && o.currency != "" {
			f.refund.currency = strs.Add(o.currency)
		}
		if f.refund.payment == 0 && o.payment != "" {
			f.refund.payment = strs.Add(o.payment)
		}
		f.refund.done = f.refund.done || o.done
	}
	if reason == "" {
		return false
	}
	c.add(o, reason, first, at)
	return true
}

// add reports o, read at at, in conflict with the record read at first.
func (c *conflicts) add(o outcome, reason string, first, at location) {
	c.found = append(c.found, Conflict{
		Batch: strings.Clone(o.batch), Item: strings.Clone(o.item), Reason: reason,
		First: first.String(c.paths), Second: at.String(c.paths),
	})
}
