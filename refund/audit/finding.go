package audit

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/money"
)

// Kinds of finding. Each is an item not refunded exactly once, or a record
// that cannot be trusted to say so: the audit fails (exit 1).
const (
	KindDuplicate        = "duplicate"         // an item, or a charge, with more refunds than planned
	KindOtherBatch       = "other_batch"       // a charge with live refunds of two or more batches
	KindInDoubt          = "in_doubt"          // an intent with no outcome: a refund may exist
	KindConflict         = "conflict"          // records that cannot all be true
	KindFailed           = "failed"            // refused for good, or held before any call (a refund made elsewhere)
	KindPending          = "pending"           // journaled pending longer than Options.PendingAfter
	KindTornTail         = "torn_tail"         // a journal's last line cut by a crash
	KindMissing          = "missing"           // a planned item nothing has (journal or provider)
	KindNotInPlan        = "not_in_plan"       // a journal item the plan does not list
	KindStripeOnly       = "stripe_only"       // a live refund at the provider the journal lacks
	KindJournalOnly      = "journal_only"      // a journaled refund the provider does not have live
	KindUnchecked        = "unchecked"         // a payment whose refunds or amount could not be read
	KindSharedRefund     = "shared_refund"     // a refund id credited to two items
	KindUnowned          = "unowned"           // refunds of the batch on a planned payment for items the plan puts elsewhere
	KindAmountMismatch   = "amount_mismatch"   // credited with another amount, or a full refund not whole
	KindCurrencyMismatch = "currency_mismatch" // credited with a refund in another currency
	KindEventsContradict = "events_contradict" // the provider's signed events tell of an item's refund otherwise than the journals
)

// Kinds lists every kind of finding in the order summaries show them.
var Kinds = []string{KindDuplicate, KindSharedRefund, KindOtherBatch, KindUnowned, KindInDoubt, KindConflict,
	KindAmountMismatch, KindCurrencyMismatch, KindEventsContradict, KindFailed, KindPending, KindTornTail,
	KindMissing, KindNotInPlan, KindStripeOnly, KindJournalOnly, KindUnchecked}

// Actions on a refund listed in a finding: what audit did or can do.
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
	Status        string `json:"status,omitempty"` // the journal's: refunded, failed, in_doubt
	// Refunds are the refunds the finding is about, oldest first.
	Refunds []Refund `json:"refunds,omitempty"`
	// Amount is the sum of the extra refunds (duplicate), of the refunds
	// listed, or the requested amount (failed, in_doubt, missing; 0: full).
	Amount   int64  `json:"amount,omitempty"`
	Currency string `json:"currency,omitempty"`
	Planned  int    `json:"planned,omitempty"` // items planned on the charge
	Code     string `json:"code,omitempty"`
	Message  string `json:"message,omitempty"`
	Remedy   string `json:"remedy,omitempty"`
}

// Refund is one refund named by a finding.
type Refund struct {
	ID string `json:"id"`
	// Batch and Item are what the refund is for, when not the finding's.
	Batch    string `json:"batch,omitempty"`
	Item     string `json:"item,omitempty"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency,omitempty"`
	Status   string `json:"status,omitempty"` // the provider's
	Created  int64  `json:"created,omitempty"`
	Action   string `json:"action,omitempty"`
	Note     string `json:"note,omitempty"` // why an action could not be taken
}

// amounts formats sums per currency as money, currencies in code order:
// "3.000 KWD, 10,073.92 USD".
func amounts(sums money.Totals) string {
	parts := make([]string, 0, len(sums))
	for _, c := range slices.Sorted(maps.Keys(sums)) {
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
// f, after any cancel was tried. journalOnly: the provider was not asked,
// so the state of the extras is not known.
func (rn *run) duplicateRemedy(f *Finding, journalOnly bool) string {
	if journalOnly {
		return fmt.Sprintf("the journal holds %d refunds here, %s more than planned; run audit --stripe to see their state: an extra Stripe can still cancel (requires_action) is canceled by --cancel-extras; a succeeded refund cannot be reversed through the API: the customer must be charged again to recover it",
			len(f.Refunds), amounts(rn.totals(f, f.Refunds[1:])))
	}
	by := map[string][]Refund{}
	for _, r := range f.Refunds {
		by[r.Action] = append(by[r.Action], r)
	}
	var parts []string
	if keep := by[ActionKeep]; len(keep) > 0 {
		parts = append(parts, "keep "+refundIDs(keep))
	}
	if canceled := by[ActionCanceled]; len(canceled) > 0 {
		parts = append(parts, "canceled "+refundIDs(canceled)+" (journaled)")
	}
	if cancelable := by[ActionCancelable]; len(cancelable) > 0 {
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
	if irreversible := by[ActionIrreversible]; len(irreversible) > 0 {
		parts = append(parts, fmt.Sprintf("%s succeeded and cannot be reversed through the API: the customer got %s more than planned, and to recover it the customer must be charged again",
			refundIDs(irreversible), amounts(rn.totals(f, irreversible))))
	}
	if unattributed := by[ActionUnattributed]; len(unattributed) > 0 {
		parts = append(parts, refundIDs(unattributed)+" cannot be matched to an item: check them in the dashboard before running refund for this charge again")
	}
	return strings.Join(parts, "; ")
}

// on names the payment p the finding is about.
func (f *Finding) on(p refund.Payment) {
	f.Charge, f.PaymentIntent, f.Capture, f.PSPReference = p.Charge, p.PaymentIntent, p.Capture, p.PSPReference
}

// about makes x the one refund f is about, and its amount f's.
func (f *Finding) about(x Refund) *Finding {
	f.Refunds = []Refund{x}
	f.Amount, f.Currency = x.Amount, x.Currency
	return f
}

// refundOf is a provider's refund as a finding names it.
func refundOf(x *refund.Refund) Refund {
	return Refund{ID: x.ID, Amount: x.Amount, Currency: x.Currency, Status: x.Status, Created: x.Created}
}

// distinct is the keys of rs, each once, in the order first seen.
func distinct(rs []Refund, key func(Refund) string) []string {
	var out []string
	seen := map[string]bool{}
	for _, x := range rs {
		if k := key(x); !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}
