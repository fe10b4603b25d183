package stripe

import (
	"testing"

	stripego "github.com/stripe/stripe-go/v76"

	"github.com/refundkit/refundkit/journal"
)

// TestStripeStatusesAreTheAllowList holds refundkit's allow-list to the
// refund statuses stripe-go documents: refundkit's words are Stripe's, so
// a Stripe status passes through as it came (toRefund) and is judged by
// journal.Statuses; each documented one must be on it with its meaning,
// and any other is neither done nor failed.
func TestStripeStatusesAreTheAllowList(t *testing.T) {
	want := map[stripego.RefundStatus]journal.Outcome{
		stripego.RefundStatusSucceeded:      journal.OutcomeDone,
		stripego.RefundStatusPending:        journal.OutcomeMoving,
		stripego.RefundStatusRequiresAction: journal.OutcomeMoving,
		stripego.RefundStatusFailed:         journal.OutcomeDead,
		stripego.RefundStatusCanceled:       journal.OutcomeDead,
	}
	for status, outcome := range want {
		r := toRefund(&stripego.Refund{ID: "re_1", Status: status})
		if got := journal.OutcomeOf(r.Status); got != outcome {
			t.Errorf("stripe status %q: outcome %d, want %d", status, got, outcome)
		}
	}
	if len(journal.Statuses) != len(want) {
		t.Errorf("journal.Statuses has %d statuses, Stripe documents %d: a status on the list Stripe does not have", len(journal.Statuses), len(want))
	}
	for _, s := range []stripego.RefundStatus{"", "SUCCEEDED", "refunded", "weird"} {
		if got := journal.OutcomeOf(toRefund(&stripego.Refund{Status: s}).Status); got != journal.OutcomeUnknown {
			t.Errorf("stripe status %q: outcome %d, want unknown", s, got)
		}
	}
}
