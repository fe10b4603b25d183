package refund

import (
	"encoding/json"
	"testing"
)

func TestResultAppendJSONMatchesEncodingJSON(t *testing.T) {
	for _, r := range []Result{
		{Batch: "b", Item: "i", Status: StatusSkipped},
		{Batch: "b", Item: "i:1", Charge: "ch_1", Status: StatusRefunded, Refund: "re_1", Amount: 500, Currency: "usd", Attempt: 2},
		{Batch: "b", Item: "i", PaymentIntent: "pi_1", Status: StatusFailed, Code: "amount_too_large", Message: "Refund amount (€5.00) is greater than \"charge\" <amount>\n\t&"},
		{Batch: "b", Item: "i", Status: StatusInDoubt, Message: "\x00\x1f\u2028 bad \xff utf8"},
	} {
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(r.AppendJSON(nil)); got != string(want)+"\n" {
			t.Errorf("AppendJSON\n got %s\nwant %s", got, want)
		}
	}
}
