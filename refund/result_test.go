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
		{Batch: "b", Item: "i", Capture: "2GG279541U471931P", Status: StatusPending, Refund: "r1", Found: true},
		{Batch: "b", Item: "i", PSPReference: "8815658961765250", Status: StatusRefunded, Refund: "r2", Amount: 100, Currency: "eur", Attempt: 1},
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

func TestSummaryString(t *testing.T) {
	s := Summary{Provider: "Stripe", Items: 1, ByStatus: map[string]int{StatusRefunded: 1},
		Refunded: map[string]int64{"usd": 1007392, "jpy": 500}, Found: map[string]int64{"kwd": 1500},
		CreateCalls: 1, ListCalls: 1, Records: 2, Fsyncs: 2}
	want := "1 item: 1 refunded, 0 skipped, 0 failed, 0 in_doubt; refunded 500 JPY; refunded 10,073.92 USD; found at Stripe (refunded earlier) 1.500 KWD; " +
		"1 create and 1 list calls, 0 retried, 0 rate-limited, 0 reconciled, 0 new keys; 2 journal records in 2 fsyncs"
	if got := s.String(); got != want {
		t.Errorf("String() =\n%s\nwant\n%s", got, want)
	}
}
