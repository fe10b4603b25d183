package audit

import (
	"fmt"
	"sort"
	"strings"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/money"
)

// Kinds of finding. Every finding makes the audit fail (exit 1): each one
// is an item that is not refunded exactly once, or a record that cannot be
// trusted to say so.
const (
	// KindDuplicate: an item with more than one refund, or a charge with
	// more refunds of the batch than items planned on it.
	KindDuplicate = "duplicate"
	// KindOtherBatch: a charge (or payment intent) holding live refunds of
	// two or more refundkit batches: refunded again by a later batch.
	KindOtherBatch = "other_batch"
	// KindInDoubt: an intent with no outcome; a refund may exist at Stripe.
	KindInDoubt = "in_doubt"
	// KindConflict: records that cannot all be true: failed for good after
	// a refund, one item naming two charges, one refund id with two amounts,
	// every refund of a refunded item canceled, a journaled refund that
	// Stripe has for another item or that does not match the item.
	KindConflict = "conflict"
	// KindFailed: Stripe refused the item's refund for good, or refund held
	// the item before any call because its charge already holds a refund
	// made elsewhere (codes refunded_by_other_batch,
	// refunded_outside_refundkit).
	KindFailed = "failed"
	// KindPending: a refund the provider accepted, journaled pending longer
	// ago than Options.PendingAfter, and not settled since.
	KindPending = "pending"
	// KindTornTail: a journal's last line was cut by a crash.
	KindTornTail = "torn_tail"
	// KindMissing: a planned item the journal has nothing for (and, with
	// Stripe, that Stripe has no refund for).
	KindMissing = "missing"
	// KindNotInPlan: a journal item the plan does not list.
	KindNotInPlan = "not_in_plan"
	// KindStripeOnly: a live refund at Stripe that the journal lacks.
	KindStripeOnly = "stripe_only"
	// KindJournalOnly: a journaled refund that Stripe does not have as a
	// live refund (unknown, canceled or failed there).
	KindJournalOnly = "journal_only"
	// KindUnchecked: Stripe would not list a charge's refunds, so its items
	// could not be checked; or the amount of a full-refund item's charge
	// could not be fetched.
	KindUnchecked = "unchecked"
	// KindSharedRefund: an item credited with a refund id that another item
	// is credited with: one refund refunds one item at most.
	KindSharedRefund = "shared_refund"
	// KindUnowned: with a plan, refunds of the batch on a planned payment
	// for items the plan does not put on that payment (renamed, dropped,
	// moved), whatever the journals say of those items.
	KindUnowned = "unowned"
	// KindAmountMismatch: an item credited with a refund of another amount
	// than it asked for, or, asking for a full refund, whose charge is not
	// refunded whole (as the provider reports the charge's amount).
	KindAmountMismatch = "amount_mismatch"
	// KindCurrencyMismatch: an item credited with a refund in another
	// currency than it asked for (the plan's, or what its intent sent).
	KindCurrencyMismatch = "currency_mismatch"
)

// Kinds lists every kind of finding in the order summaries show them.
var Kinds = []string{KindDuplicate, KindSharedRefund, KindOtherBatch, KindUnowned, KindInDoubt, KindConflict,
	KindAmountMismatch, KindCurrencyMismatch, KindFailed, KindPending, KindTornTail,
	KindMissing, KindNotInPlan, KindStripeOnly, KindJournalOnly, KindUnchecked}

// Actions on a refund listed in a finding: what audit did with it or what
// can be done.
const (
	ActionKeep         = "keep"         // the item's one refund; the others are extras
	ActionCancelable   = "cancelable"   // an extra that still requires action: --cancel-extras cancels it
	ActionCanceled     = "canceled"     // an extra canceled by this audit, and journaled
	ActionIrreversible = "irreversible" // an extra that succeeded (or is pending): the API cannot reverse it
	ActionBackfilled   = "backfilled"   // journaled by this audit (--backfill)
	ActionUnattributed = "unattributed" // no item can be named for it: a person must match it
)

// Finding is one line audit writes on stdout.
type Finding struct {
	Finding string `json:"finding"`
	// File, Line, Offset and Bytes locate a torn tail.
	File          string `json:"file,omitempty"`
	Line          int    `json:"line,omitempty"`
	Offset        int64  `json:"offset,omitempty"`
	Bytes         int    `json:"bytes,omitempty"`
	Batch         string `json:"batch,omitempty"`
	Item          string `json:"item,omitempty"`
	Charge        string `json:"charge,omitempty"`
	PaymentIntent string `json:"payment_intent,omitempty"`
	Capture       string `json:"capture,omitempty"`
	PSPReference  string `json:"psp_reference,omitempty"`
	// Status is what the journal says of the item: refunded, failed,
	// in_doubt, or none.
	Status string `json:"status,omitempty"`
	// Refunds are the refunds the finding is about, oldest first.
	Refunds []Refund `json:"refunds,omitempty"`
	// Amount is the sum of the extra refunds (duplicate), of the refunds
	// listed (stripe_only, journal_only, not_in_plan), or the requested
	// amount (failed, in_doubt, missing; 0: the full remaining amount).
	Amount   int64  `json:"amount,omitempty"`
	Currency string `json:"currency,omitempty"`
	// Planned is the number of items planned on the charge (duplicate of a
	// charge).
	Planned int    `json:"planned,omitempty"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	Remedy  string `json:"remedy,omitempty"`
}

// Refund is one refund named by a finding.
type Refund struct {
	ID string `json:"id"`
	// Batch and Item are what the refund is for, when known and different
	// from the finding's (the refunds of a charge).
	Batch    string `json:"batch,omitempty"`
	Item     string `json:"item,omitempty"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency,omitempty"`
	// Status is Stripe's status of the refund (with --stripe).
	Status  string `json:"status,omitempty"`
	Created int64  `json:"created,omitempty"`
	Action  string `json:"action,omitempty"`
	// Note says why an action could not be taken.
	Note string `json:"note,omitempty"`
}

// amounts formats sums per currency as money, currencies in code order:
// "3.000 KWD, 10,073.92 USD".
func amounts(sums money.Totals) string {
	cur := make([]string, 0, len(sums))
	for c := range sums {
		cur = append(cur, c)
	}
	sort.Strings(cur)
	parts := make([]string, 0, len(cur))
	for _, c := range cur {
		parts = append(parts, money.Format(sums[c], c))
	}
	return strings.Join(parts, ", ")
}

func refundIDs(rs []Refund) string {
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.ID
	}
	return strings.Join(ids, ", ")
}

// duplicateRemedy says what can be done about the extra refunds listed in
// f, after any cancel was tried. journalOnly is true when Stripe was not
// asked, so the state of the extras is not known.
func (rn *run) duplicateRemedy(f *Finding, journalOnly bool) string {
	var keep, cancelable, canceled, irreversible, unattributed []Refund
	for _, r := range f.Refunds {
		switch r.Action {
		case ActionKeep:
			keep = append(keep, r)
		case ActionCancelable:
			cancelable = append(cancelable, r)
		case ActionCanceled:
			canceled = append(canceled, r)
		case ActionIrreversible:
			irreversible = append(irreversible, r)
		case ActionUnattributed:
			unattributed = append(unattributed, r)
		}
	}
	lost := rn.totals(f, irreversible)
	if journalOnly {
		extra := rn.totals(f, f.Refunds[1:])
		return fmt.Sprintf("the journal holds %d refunds here, %s more than planned; run audit --stripe to see their state: an extra Stripe can still cancel (requires_action) is canceled by --cancel-extras; a succeeded refund cannot be reversed through the API: the customer must be charged again to recover it",
			len(f.Refunds), amounts(extra))
	}
	var parts []string
	if len(keep) > 0 {
		parts = append(parts, "keep "+refundIDs(keep))
	}
	if len(canceled) > 0 {
		parts = append(parts, "canceled "+refundIDs(canceled)+" (journaled)")
	}
	if len(cancelable) > 0 {
		var noted []string
		for _, r := range cancelable {
			if r.Note != "" {
				noted = append(noted, r.ID+": "+r.Note)
			}
		}
		s := refundIDs(cancelable) + " still " + verb(len(cancelable), "requires", "require") + " action and can be canceled: run audit --stripe --cancel-extras"
		if len(noted) > 0 {
			s += " (" + strings.Join(noted, "; ") + ")"
		}
		parts = append(parts, s)
	}
	if len(irreversible) > 0 {
		parts = append(parts, fmt.Sprintf("%s succeeded and cannot be reversed through the API: the customer got %s more than planned, and to recover it the customer must be charged again",
			refundIDs(irreversible), amounts(lost)))
	}
	if len(unattributed) > 0 {
		parts = append(parts, refundIDs(unattributed)+" cannot be matched to an item: check them in the dashboard before running refund for this charge again")
	}
	return strings.Join(parts, "; ")
}

// on names the payment p the finding is about.
func (f *Finding) on(p refund.Payment) {
	f.Charge, f.PaymentIntent, f.Capture, f.PSPReference = p.Charge, p.PaymentIntent, p.Capture, p.PSPReference
}
