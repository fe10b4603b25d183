package refund_test

// The one property of issue 31, fuzzed over the real reader and merge:
// nothing counts as done that the allow-list of statuses and the plan do
// not prove.

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
)

// donePlan is the plan item every fuzzed journal is read against.
var donePlan = refund.Item{Batch: "B", Item: "i1", Charge: "ch_1", Amount: 1000, Currency: "usd"}

// fuzzRecord is a refunded record of the plan's item with the fuzzed
// fields; the writer's own encoding makes it a line the reader takes.
func fuzzRecord(status string, amount int64, currency, id string) []byte {
	line, err := journal.MarshalLine(nil, &journal.Record{V: journal.Version, Type: journal.TypeRefunded, Time: time.Unix(1764417600, 0).UTC(),
		Batch: "B", Item: "i1", Charge: "ch_1", Attempt: 1, Key: refund.IdempotencyKey("B", "i1", 1),
		Amount: amount, Currency: currency, Refund: id, Status: status, Source: journal.SourceAPI})
	if err != nil {
		return nil
	}
	return line
}

// proven reports whether the records read say the plan item is done: one
// of them is on the allow-list as done, with the plan's amount and
// currency (or none said), under the refund id the state credits.
func proven(recs [][4]any, st journal.ItemState) bool {
	for _, r := range recs {
		status, amount, currency, id := r[0].(string), r[1].(int64), r[2].(string), r[3].(string)
		if journal.Done(status) && amount == donePlan.Amount && (currency == donePlan.Currency || currency == "") && id == st.Refund {
			return true
		}
	}
	return false
}

// doneAfter reads path as refund does and reports whether the plan item
// would be skipped as done: refunded in the state, and its records
// consistent with themselves and with the plan.
func doneAfter(t *testing.T, path string) (journal.ItemState, bool) {
	state, _, err := journal.Load(path)
	if err != nil {
		return journal.ItemState{}, false // refused whole: nothing is done
	}
	st, ok := state.Lookup("B", "i1")
	if !ok || st.Status != journal.StatusRefunded {
		return st, false
	}
	if _, _, shared := state.SharedRefund(st.Refund, "B", "i1"); shared {
		return st, false
	}
	return st, refund.CheckBinding(&donePlan, st) == nil
}

func FuzzNothingDoneUnproven(f *testing.F) {
	f.Add("succeeded", int64(1000), "usd", "re_1", "succeeded", int64(1000), "usd", "re_1", false)
	f.Add("weird", int64(1000), "usd", "re_1", "", int64(0), "", "", false)
	f.Add("", int64(1000), "usd", "re_1", "SUCCEEDED", int64(1000), "usd", "re_1", true)
	f.Add("succeeded", int64(-1000), "usd", "re_1", "succeeded", int64(10), "usd", "re_2", true)
	f.Add("pending", int64(1000), "usd", "re_1", "succeeded", int64(500), "usd", "re_1", true)
	f.Add("succeeded", int64(1000), "usd", "re_1", "succeeded", int64(1000), "eur", "re_1", true)
	f.Add("requires_action", int64(1000), "usd", "re_1", "canceled", int64(1000), "usd", "re_1", true)
	f.Fuzz(func(t *testing.T, s1 string, a1 int64, c1, id1, s2 string, a2 int64, c2, id2 string, two bool) {
		recs := [][4]any{{s1, a1, c1, id1}}
		if two {
			recs = append(recs, [4]any{s2, a2, c2, id2})
		}
		dir := t.TempDir()
		var lines [][]byte
		for _, r := range recs {
			line := fuzzRecord(r[0].(string), r[1].(int64), r[2].(string), r[3].(string))
			if line == nil {
				return
			}
			lines = append(lines, line)
		}
		// One journal holding every record, as a run or a hand edit leaves it.
		one := filepath.Join(dir, "one.jsonl")
		if err := os.WriteFile(one, bytes.Join(lines, nil), 0o600); err != nil {
			t.Fatal(err)
		}
		if st, done := doneAfter(t, one); done && !proven(recs, st) {
			t.Fatalf("read as done, unproven: records %v, state %+v", recs, st)
		}
		if !two {
			return
		}
		// The records in two journals, merged as journal-merge merges them:
		// the output is read the same way, and a contradiction is reported.
		paths := []string{filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl")}
		for k, p := range paths {
			if err := os.WriteFile(p, lines[k], 0o600); err != nil {
				t.Fatal(err)
			}
		}
		var out bytes.Buffer
		rep, err := journal.Merge(paths, &out)
		if err != nil {
			return
		}
		merged := filepath.Join(dir, "merged.jsonl")
		if err := os.WriteFile(merged, out.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		st, done := doneAfter(t, merged)
		if done && !proven(recs, st) {
			t.Fatalf("merged, read as done, unproven: records %v, state %+v", recs, st)
		}
		sameID := id1 == id2 && id1 != ""
		if sameID && a1 != 0 && a2 != 0 && a1 != a2 && journal.OutcomeOf(s1) != journal.OutcomeDead && journal.OutcomeOf(s2) != journal.OutcomeDead && len(rep.Conflicts) == 0 {
			t.Fatalf("refund %s merged with amounts %d and %d and no conflict", id1, a1, a2)
		}
	})
}
