package audit_test

import (
	"context"
	"strings"
	"testing"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/audit"
)

// unlisted is a provider that cannot say whose a payment's refunds are
// (PayPal, for a capture not made through an order): it shows one
// Unattributed refund standing for them.
type unlisted struct{ refund.Provider }

func (unlisted) Facts() refund.Facts { return refund.Facts{Name: "Unlisted"} }

func (unlisted) Find(_ context.Context, p refund.Payment) ([]refund.Refund, error) {
	return []refund.Refund{{ID: "unlisted:" + p.ID(), Capture: p.Capture, Amount: 100, Currency: "usd",
		Status: refund.RefundSucceeded, Unattributed: true, FailureReason: "the capture is REFUNDED and its order lists no refunds"}}, nil
}

func (unlisted) Payment(context.Context, refund.Payment) (refund.PaymentInfo, error) {
	return refund.PaymentInfo{}, refund.ErrNoLookup
}

// A payment whose refunds the provider cannot attribute is unchecked, its
// items checked by the journal alone: never a stand-in matched to an item,
// never a journal_only finding for the refund the journal holds.
func TestAuditOfUnattributedRefundsIsUnchecked(t *testing.T) {
	r := refunded("i1", "", "re_1", 100)
	r.Capture = "CAP1"
	in := intent("i1", "", 1)
	in.Capture = "CAP1"
	a := audit.New()
	if _, err := a.AddJournal(strings.NewReader(jl(t, in, r)), "j.jsonl"); err != nil {
		t.Fatal(err)
	}
	var got []*audit.Finding
	if _, err := a.Run(context.Background(), audit.Options{Provider: unlisted{}, AllRefunds: true}, func(f *audit.Finding) { got = append(got, f) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Finding != audit.KindUnchecked || got[0].Capture != "CAP1" || got[0].Code != refund.CodeRefundedUnattributed {
		t.Fatalf("findings %+v, want one unchecked for capture CAP1", got)
	}
}
