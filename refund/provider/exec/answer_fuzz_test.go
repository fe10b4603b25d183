package exec

import (
	"testing"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
)

// FuzzAnswers feeds a command's create answer and one line of its find
// answer arbitrary statuses and amounts: whatever is taken is in a status
// on the allow-list (journal.Statuses), of a positive amount unless it
// ended without moving money, and a create
// answer taken as a refund is done or under way, never ended.
func FuzzAnswers(f *testing.F) {
	f.Add([]byte(`{"status":"succeeded","id":"re_1","amount":500,"currency":"usd"}`))
	f.Add([]byte(`{"status":"pending","id":"re_1","amount":"5.00","currency":"usd"}`))
	f.Add([]byte(`{"status":"weird","id":"re_1","amount":500,"currency":"usd"}`))
	f.Add([]byte(`{"status":"SUCCEEDED","id":"re_1","amount":-5,"currency":"usd"}`))
	f.Add([]byte(`{"status":"failed","code":"x"}`))
	f.Add([]byte(`{"id":"re_1","status":"canceled","amount":0,"currency":"usd","metadata":{"refundkit_batch":"B","refundkit_item":"i1"}}`))
	it := &refund.Item{Batch: "B", Item: "i1", Charge: "ch_1", Amount: 500, Currency: "usd"}
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := createAnswer(it, 1, outcome{what: "exec-create", stdout: data, exit: exitAnswered})
		if err == nil {
			if o := journal.OutcomeOf(a.Status); o != journal.OutcomeDone && o != journal.OutcomeMoving {
				t.Fatalf("create answer %q taken in status %q", data, a.Status)
			}
			if a.Amount <= 0 {
				t.Fatalf("create answer %q taken with amount %d", data, a.Amount)
			}
		}
		r, err := parseListed(refund.Payment{Charge: "ch_1"}, data)
		if err == nil {
			if journal.OutcomeOf(r.Status) == journal.OutcomeUnknown {
				t.Fatalf("find line %q taken in status %q", data, r.Status)
			}
			if r.Amount <= 0 && !journal.DeadStatus(r.Status) {
				t.Fatalf("find line %q taken standing with amount %d", data, r.Amount)
			}
		}
	})
}
