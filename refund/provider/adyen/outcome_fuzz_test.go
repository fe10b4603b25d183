package adyen

import (
	"testing"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
)

// FuzzOutcome feeds a refund's notifications arbitrary event codes and
// success values: the refund is done only when a REFUND notification says
// success "true" and none says otherwise, fails, or reverses it.
func FuzzOutcome(f *testing.F) {
	f.Add("REFUND", "true", "REFUND", "true")
	f.Add("REFUND", "yes", "", "")
	f.Add("REFUND", "TRUE", "REFUND_FAILED", "true")
	f.Add("REFUND", "true", "REFUNDED_REVERSED", "true")
	f.Add("REFUND", "false", "REFUND", "true")
	f.Fuzz(func(t *testing.T, code1, success1, code2, success2 string) {
		notes := []wire.Notification{{Item: wire.Item{PSPReference: "R1", EventCode: code1, Success: success1, Amount: wire.Amount{Value: 500, Currency: "EUR"}}}}
		if code2 != "" {
			notes = append(notes, wire.Notification{Item: wire.Item{PSPReference: "R1", EventCode: code2, Success: success2, Amount: wire.Amount{Value: 500, Currency: "EUR"}}})
		}
		r, ok := Outcome("R1", notes)
		if !ok || !journal.Done(r.Status) {
			return
		}
		yes := false
		for _, n := range notes {
			switch {
			case n.Item.EventCode == wire.EventRefund && n.Item.Success == "true":
				yes = true
			case wire.RefundEvent(n.Item.EventCode):
				t.Fatalf("done with %v", notes)
			}
		}
		if !yes {
			t.Fatalf("done with no REFUND success true: %v", notes)
		}
	})
}

func TestOutcomeOfASuccessNeitherTrueNorFalse(t *testing.T) {
	for _, success := range []string{"TRUE", "", "yes", "False"} {
		r, ok := Outcome("R1", []wire.Notification{{Item: wire.Item{PSPReference: "R1", EventCode: wire.EventRefund, Success: success}}})
		if !ok || journal.OutcomeOf(r.Status) != journal.OutcomeUnknown || r.FailureReason != ReasonSuccessUnknown {
			t.Errorf("success %q: %q (%s), want a status not on the allow-list (%s)", success, r.Status, r.FailureReason, ReasonSuccessUnknown)
		}
	}
}
