package events

import (
	"cmp"
	"slices"
	"time"

	"github.com/refundkit/refundkit/refund"
)

// Told is one event's word on a refund: when the provider made the event,
// its id, and the refund as the event shows it.
type Told struct {
	At     time.Time
	ID     string
	Refund *refund.Refund
}

// ReasonContradicts is the FailureReason of a refund whose events disagree.
const ReasonContradicts = refund.ReasonEventsContradict

// Outcome is refund id as its events tell it, the same whatever order
// they came in. A refund moves one way: pending, then succeeded, failed or
// canceled; a succeeded one may still fail (some payment methods), never
// be canceled. So the most final status stands, the latest event's among
// equals; a status refundkit does not know stands over every known one
// (the engine then asks the provider, as a read of it would leave the item
// in doubt). Events that disagree on the refund's payment, amount,
// currency or metadata, or that say succeeded and canceled, contradict:
// the refund is told pending, with ReasonContradicts, and settles nothing.
// ok is false when no event names it.
func Outcome(id string, told []Told) (r refund.Refund, ok bool) {
	var mine []Told
	for _, t := range told {
		if t.Refund != nil && t.Refund.ID == id {
			mine = append(mine, t)
		}
	}
	if len(mine) == 0 {
		return refund.Refund{}, false
	}
	// Oldest first, the event id breaking ties: later wins among equals.
	slices.SortFunc(mine, func(a, b Told) int { return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.ID, b.ID)) })
	r = *mine[0].Refund
	best := mine[0].Refund
	var succeeded, canceled bool
	for _, t := range mine {
		got := t.Refund
		if !sameRefund(&r, got) {
			r.Status, r.FailureReason = refund.RefundPending, ReasonContradicts
			return r, true
		}
		succeeded = succeeded || got.Status == refund.RefundSucceeded
		canceled = canceled || got.Status == refund.RefundCanceled
		if rank(got.Status) >= rank(best.Status) {
			best = got
		}
	}
	if succeeded && canceled {
		r.Status, r.FailureReason = refund.RefundPending, ReasonContradicts
		return r, true
	}
	r.Status, r.FailureReason = best.Status, best.FailureReason
	return r, true
}

// rank orders statuses by how much they tell: a refund moves up only, and
// a status refundkit does not know tells most (it must be asked about).
func rank(status string) int {
	switch status {
	case refund.RefundPending, refund.RefundRequiresAction:
		return 1
	case refund.RefundSucceeded:
		return 2
	case refund.RefundFailed, refund.RefundCanceled:
		return 3
	}
	return 4
}

// sameRefund reports whether two readings of one refund agree on what
// binds it to an item.
func sameRefund(a, b *refund.Refund) bool {
	if a.Charge != b.Charge || a.PaymentIntent != b.PaymentIntent || a.Capture != b.Capture || a.PSPReference != b.PSPReference ||
		a.Amount != b.Amount || a.Currency != b.Currency {
		return false
	}
	for _, k := range []string{refund.MetaBatch, refund.MetaItem, refund.MetaAttempt} {
		if a.Metadata[k] != b.Metadata[k] {
			return false
		}
	}
	return true
}

// Outcomes is every refund told of, in the order first told, each as
// Outcome gives it (audit reads them against the journals).
func Outcomes(told []Told) []refund.Refund {
	byID := map[string][]Told{}
	var ids []string
	for _, t := range told {
		if t.Refund == nil {
			continue
		}
		if _, seen := byID[t.Refund.ID]; !seen {
			ids = append(ids, t.Refund.ID)
		}
		byID[t.Refund.ID] = append(byID[t.Refund.ID], t)
	}
	out := make([]refund.Refund, 0, len(ids))
	for _, id := range ids {
		if r, ok := Outcome(id, byID[id]); ok {
			out = append(out, r)
		}
	}
	return out
}
