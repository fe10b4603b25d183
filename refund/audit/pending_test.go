package audit_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund/audit"
)

// A refund journaled pending is counted apart, reported once it has been
// pending longer than PendingAfter, and no more once a later run settled it;
// one that ended failed makes its item failed, not refunded.
func TestAuditPendingRefunds(t *testing.T) {
	pending := func(item, charge, id string) journal.Record {
		r := refunded(item, charge, id, 100)
		r.Status = journal.PendingStatus
		return r
	}
	settled := func(item, charge, id string) journal.Record {
		r := refunded(item, charge, id, 100)
		r.Source = journal.SourceSettled
		return r
	}
	endedFailed := func(item, charge, id string) journal.Record {
		r := failed(item, charge, "refund_failed", true)
		r.Refund = id
		return r
	}
	j := jl(t,
		intent("old", "ch_1", 1), pending("old", "ch_1", "re_1"), // pending at t0
		intent("ok", "ch_2", 1), pending("ok", "ch_2", "re_2"), settled("ok", "ch_2", "re_2"),
		intent("bad", "ch_3", 1), pending("bad", "ch_3", "re_3"), endedFailed("bad", "ch_3", "re_3"),
	)
	for _, tc := range []struct {
		now  time.Time
		want []string
	}{
		{t0.Add(time.Hour), []string{"failed bad"}},
		{t0.Add(audit.DefaultPendingAfter + time.Hour), []string{"pending old", "failed bad"}},
	} {
		a := audit.New()
		if _, err := a.AddJournal(strings.NewReader(j), "j.jsonl"); err != nil {
			t.Fatal(err)
		}
		var got []*audit.Finding
		rep, err := a.Run(context.Background(), audit.Options{Now: func() time.Time { return tc.now }}, func(f *audit.Finding) { got = append(got, f) })
		if err != nil {
			t.Fatal(err)
		}
		if s := summary(got); !slices.Equal(s, tc.want) {
			t.Errorf("at %v: findings %q, want %q", tc.now.Sub(t0), s, tc.want)
		}
		if rep.ByStatus["pending"] != 1 || rep.ByStatus["refunded"] != 1 || rep.ByStatus["failed"] != 1 {
			t.Errorf("by status %v, want 1 pending, 1 refunded, 1 failed", rep.ByStatus)
		}
		if line := rep.Lines()[0]; !strings.Contains(line, "1 pending") {
			t.Errorf("summary %q does not count the pending item", line)
		}
	}
}
