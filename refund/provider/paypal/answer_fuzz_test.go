package paypal

import (
	"encoding/json"
	"testing"

	"github.com/refundkit/refundkit/journal"
)

// FuzzRefundAnswer feeds PayPal's refund object arbitrary statuses and
// amounts: a refund taken is in a status on the allow-list, mapped from
// the PayPal status that means it (COMPLETED alone is done), of a
// positive amount; any other status is an answer not understood.
func FuzzRefundAnswer(f *testing.F) {
	f.Add([]byte(`{"id":"R1","status":"COMPLETED","amount":{"value":"10.00","currency_code":"USD"}}`))
	f.Add([]byte(`{"id":"R1","status":"PENDING","amount":{"value":"10.00","currency_code":"USD"}}`))
	f.Add([]byte(`{"id":"R1","status":"completed","amount":{"value":"10.00","currency_code":"USD"}}`))
	f.Add([]byte(`{"id":"R1","status":"succeeded","amount":{"value":"-1","currency_code":"USD"}}`))
	f.Add([]byte(`{"id":"R1","status":"FAILED","amount":{"value":"0.00","currency_code":"JPY"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var r paypalRefund
		if json.Unmarshal(data, &r) != nil {
			return
		}
		out, err := r.refund(func(string) map[string]string { return nil })
		if err != nil {
			return
		}
		if out.Amount <= 0 {
			t.Fatalf("%q taken with amount %d", data, out.Amount)
		}
		want, ok := map[string]journal.Outcome{"COMPLETED": journal.OutcomeDone, "PENDING": journal.OutcomeMoving,
			"FAILED": journal.OutcomeDead, "CANCELLED": journal.OutcomeDead}[r.Status]
		if got := journal.OutcomeOf(out.Status); !ok || got != want {
			t.Fatalf("PayPal status %q taken as %q (outcome %d)", r.Status, out.Status, got)
		}
	})
}
