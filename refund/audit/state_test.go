package audit_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund/audit"
)

// TestCurrenciesPast16Bits: audit keeps every currency exactly however
// many distinct ones the journals hold. A 16-bit currency id once gave the
// 65,536th currency's refunds to "" and the next one's to the first.
func TestCurrenciesPast16Bits(t *testing.T) {
	const n = 1<<16 + 1
	cur := func(i int) string { return fmt.Sprintf("c%05x", i) }
	recs := make([]journal.Record, 0, n+2)
	for i := range n {
		r := refunded(fmt.Sprintf("i%d", i), fmt.Sprintf("ch_%d", i), fmt.Sprintf("re_%d", i), 100)
		r.Currency = cur(i)
		recs = append(recs, r)
	}
	last := recs[n-1]
	dup := refunded(last.Item, last.Charge, "re_again", 100)
	dup.Currency, dup.Attempt = last.Currency, 2
	asked := intent("asked", "ch_asked", 1)
	asked.Amount, asked.Currency = 7, last.Currency
	recs = append(recs, dup, asked)

	a := audit.New()
	if _, err := a.AddJournal(strings.NewReader(jl(t, recs...)), "j.jsonl"); err != nil {
		t.Fatal(err)
	}
	var dups []*audit.Finding
	rep, err := a.Run(context.Background(), audit.Options{}, func(f *audit.Finding) {
		if f.Finding == audit.KindDuplicate {
			dups = append(dups, f)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dups) != 1 {
		t.Fatalf("%d duplicate findings, want 1", len(dups))
	}
	if rs := dups[0].Refunds; len(rs) != 2 || rs[0].Currency != last.Currency || rs[1].Currency != last.Currency {
		t.Fatalf("duplicate of %s: refunds %+v, want two in %s", dups[0].Item, rs, last.Currency)
	}
	refundedBy := rep.Amounts["refunded"]
	for i := range n - 1 {
		if got := refundedBy[cur(i)]; got != 100 {
			t.Fatalf("refunded in %s: %d, want 100", cur(i), got)
		}
	}
	if got := refundedBy[last.Currency]; got != 200 || len(refundedBy) != n {
		t.Errorf("refunded in %s: %d, want 200; %d currencies, want %d (\"\": %d)", last.Currency, got, len(refundedBy), n, refundedBy[""])
	}
	if got := rep.Amounts["in_doubt"]; len(got) != 1 || got[last.Currency] != 7 {
		t.Errorf("in doubt: %v, want 7 in %s", got, last.Currency)
	}
}
