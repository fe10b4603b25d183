package audit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/audit"
	"github.com/refundkit/refundkit/refund/money"
	"github.com/refundkit/refundkit/refund/provider/stripe"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
)

// The signals audit gives a person must be true: amounts as money, counts
// of one in the singular, and no verdict from an audit that did not end.

func TestReportLines(t *testing.T) {
	for _, c := range []struct {
		name string
		rep  *audit.Report
		want []string
	}{
		{"one of each, clean", &audit.Report{Complete: true, Planned: true, Journals: 1, Records: 1, Items: 1,
			ByStatus: map[string]int{"refunded": 1}, Amounts: map[string]money.Totals{"refunded": {"usd": 100}}},
			[]string{"1 journal, 1 record, 1 item: 1 refunded, 0 failed, 0 in doubt", "refunded: 1.00 USD",
				"no findings: every audited item has exactly one refund"}},
		// Without a plan, a clean verdict is of the items the journals
		// name: a half-done batch reads clean.
		{"clean without a plan", &audit.Report{Complete: true, Journals: 1, Records: 1, Items: 1,
			ByStatus: map[string]int{"refunded": 1}, Amounts: map[string]money.Totals{"refunded": {"usd": 100}}},
			[]string{"1 journal, 1 record, 1 item: 1 refunded, 0 failed, 0 in doubt", "refunded: 1.00 USD",
				"no findings: every audited item has exactly one refund (without --plan, only the items the journals name: audit --plan PLAN to know the batch is done)"}},
		{"money in every currency's decimals", &audit.Report{Complete: true, Journals: 2, Records: 9, Items: 5,
			ByStatus: map[string]int{"refunded": 3, "failed": 2},
			Amounts:  map[string]money.Totals{"refunded": {"usd": 1007392, "jpy": 500, "kwd": 1500}, "failed": {"": 42}},
			Full:     map[string]int{"failed": 1}, Findings: map[string]int{audit.KindFailed: 2}},
			[]string{"2 journals, 9 records, 5 items: 3 refunded, 2 failed, 0 in doubt",
				"refunded: 500 JPY, 1.500 KWD, 10,073.92 USD",
				"failed (requested): 42 (minor units, currency unknown) + 1 full refund",
				"findings: 2 failed"}},
		{"extra refunds, one and many", &audit.Report{Complete: true, Provider: "Stripe",
			Findings: map[string]int{audit.KindDuplicate: 3}, Backfilled: 1,
			ExtraJournal: 1, ExtraJournalAmount: map[string]int64{"bhd": 10},
			Canceled: 1, CanceledAmount: map[string]int64{"jpy": 1000},
			Cancelable: 1, Irreversible: 2, IrreversibleAmount: map[string]int64{"usd": 200000}},
			[]string{"0 journals, 0 records, 0 items: 0 refunded, 0 failed, 0 in doubt",
				"stripe: 0 list calls, 0 cancel calls, 1 refund backfilled",
				"findings: 3 duplicate",
				"1 extra refund in the journals, 0.010 BHD: audit --stripe tells which can still be canceled",
				"canceled 1 extra refund (1,000 JPY) and journaled the cancels",
				"1 extra refund still requires action and can be canceled: see the findings' remedies",
				"2 extra refunds succeeded and cannot be reversed through the API: 2,000.00 USD was refunded twice, and to recover it the customers must be charged again"}},
		{"stopped without findings: no verdict", &audit.Report{Provider: "Stripe", Journals: 1, Records: 2, Items: 1,
			ByStatus: map[string]int{"refunded": 1}, Amounts: map[string]money.Totals{"refunded": {"usd": 500}}},
			[]string{"1 journal, 2 records, 1 item: 1 refunded, 0 failed, 0 in doubt", "refunded: 5.00 USD",
				"stripe: 0 list calls, 0 cancel calls, 0 refunds backfilled"}},
		{"stopped with findings: the findings so far", &audit.Report{Journals: 1, Findings: map[string]int{audit.KindTornTail: 1}},
			[]string{"1 journal, 0 records, 0 items: 0 refunded, 0 failed, 0 in doubt", "findings so far: 1 torn_tail"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.rep.Lines(); strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
			if clean := c.rep.Complete && c.rep.FindingCount() == 0; c.rep.Clean() != clean {
				t.Errorf("Clean() = %v, want %v", c.rep.Clean(), clean)
			}
		})
	}
}

// TestRemediesSayMoney: the remedies and messages people read give amounts
// as money; the findings' amount fields stay in minor units.
func TestRemediesSayMoney(t *testing.T) {
	kwd := func(r journal.Record) journal.Record { r.Currency = "kwd"; return r }
	second := kwd(refunded("i1", "ch_1", "re_9", 1500))
	second.Attempt = 2
	got, _ := runOffline(t, "", jl(t, kwd(refunded("i1", "ch_1", "re_1", 1500)), second))
	wantFindings(t, "audit", got, "duplicate i1")
	if f := got[0]; f.Amount != 1500 || f.Currency != "kwd" || !strings.Contains(f.Remedy, "the journal holds 2 refunds here, 1.500 KWD more than planned") {
		t.Errorf("duplicate %+v: want amount 1500 kwd and a remedy saying 1.500 KWD", f)
	}
}

func TestEmpty(t *testing.T) {
	a := audit.New()
	if !a.Empty() {
		t.Error("a new Auditor is not empty")
	}
	if _, err := a.AddJournal(strings.NewReader(""), "empty.jsonl"); err != nil || !a.Empty() {
		t.Errorf("after an empty journal: Empty() = %v, %v", a.Empty(), err)
	}
	if err := a.AddPlan(strings.NewReader(""), "plan.jsonl"); err != nil || !a.Empty() {
		t.Errorf("after an empty plan: Empty() = %v, %v", a.Empty(), err)
	}
	for name, add := range map[string]func(*audit.Auditor) error{
		"a plan item": func(a *audit.Auditor) error { return a.AddPlan(strings.NewReader(plan(1)), "plan.jsonl") },
		"a record": func(a *audit.Auditor) error {
			_, err := a.AddJournal(strings.NewReader(jl(t, intent("i1", "ch_1", 1))), "j.jsonl")
			return err
		},
		"a torn tail": func(a *audit.Auditor) error {
			_, err := a.AddJournal(strings.NewReader(`{"v":1,"type":"int`), "j.jsonl")
			return err
		},
	} {
		a := audit.New()
		if err := add(a); err != nil || a.Empty() {
			t.Errorf("after %s: Empty() = %v, %v", name, a.Empty(), err)
		}
	}
}

// TestHeldJournalsItemsInDoubtMayBeInFlight: the items in doubt of a journal
// a running refund holds are said to be perhaps in flight, offline and
// with Stripe, and so is a refund Stripe has for one of them that the
// journal lacks (the answer to a call in flight); the items of another
// journal are not.
func TestHeldJournalsItemsInDoubtMayBeInFlight(t *testing.T) {
	// i3 asks for a full refund: its charge's whole 2000.
	s := newSim(t, charges(3, map[int][]stripesim.SeedRefund{3: {{Amount: 2000, Metadata: meta("b1", "i3")}}}))
	const (
		msg      = "journal live.jsonl is held by a running refund: this item may be in flight now"
		foundMsg = "journal live.jsonl is held by a running refund: this refund may be the answer to a call in flight, not yet journaled"
		remedy   = "audit again when the run has finished"
	)
	for _, withStripe := range []bool{false, true} {
		a := audit.New()
		if _, err := a.AddHeldJournal(strings.NewReader(jl(t, intent("i1", "ch_a1", 1), intent("i3", "ch_a3", 1))), "live.jsonl"); err != nil {
			t.Fatal(err)
		}
		if _, err := a.AddJournal(strings.NewReader(jl(t, intent("i2", "ch_a2", 1))), "old.jsonl"); err != nil {
			t.Fatal(err)
		}
		opts := audit.Options{}
		if withStripe {
			opts.Provider = stripe.New(s.URL, testKey, 2)
		}
		var got []*audit.Finding
		rep, err := a.Run(context.Background(), opts, func(f *audit.Finding) { got = append(got, f) })
		if err != nil || !rep.Complete {
			t.Fatalf("stripe %v: %v, complete %v", withStripe, err, rep.Complete)
		}
		if withStripe {
			wantFindings(t, "audit --stripe", got, "in_doubt i1", "stripe_only i3", "in_doubt i2")
		} else {
			wantFindings(t, "audit", got, "in_doubt i1", "in_doubt i3", "in_doubt i2")
		}
		for _, f := range got {
			want := msg
			switch {
			case f.Item == "i2":
				if f.Message != "" || strings.Contains(f.Remedy, remedy) {
					t.Errorf("stripe %v: %s of a journal no run holds: message %q, remedy %q", withStripe, f.Finding, f.Message, f.Remedy)
				}
				continue
			case f.Finding == audit.KindStripeOnly:
				want = foundMsg
			}
			if f.Message != want || !strings.HasPrefix(f.Remedy, remedy) {
				t.Errorf("stripe %v: %s %s of the held journal: message %q, remedy %q; want %q and a remedy starting %q", withStripe, f.Finding, f.Item, f.Message, f.Remedy, want, remedy)
			}
		}
	}
}

// TestStoppedAuditHasNoVerdict: an audit stopped before Stripe listed every
// charge, by a refused key or by a signal, is not complete, is not clean
// and its summary says nothing of every item having one refund, even when
// it had found nothing yet.
func TestStoppedAuditHasNoVerdict(t *testing.T) {
	s := newSim(t, charges(40, nil))
	var journalText strings.Builder
	for i := 1; i <= 40; i++ {
		item := fmt.Sprintf("i%d", i)
		journalText.WriteString(jl(t, done(item, fmt.Sprintf("ch_a%d", i), "re_x"+item, 500)...))
	}
	run := func(ctx context.Context, key string) (*audit.Report, error) {
		a := audit.New()
		if _, err := a.AddJournal(strings.NewReader(journalText.String()), "j.jsonl"); err != nil {
			t.Fatal(err)
		}
		opts := audit.Options{Provider: stripe.New(s.URL, key, 4), Workers: 4, MaxTries: 1,
			Retry: refund.Backoff{Base: time.Millisecond, Max: time.Millisecond}}
		return a.Run(ctx, opts, func(*audit.Finding) {})
	}
	check := func(how string, rep *audit.Report) {
		t.Helper()
		if rep.Complete || rep.Clean() {
			t.Fatalf("%s: complete %v, clean %v", how, rep.Complete, rep.Clean())
		}
		if lines := strings.Join(rep.Lines(), "\n"); strings.Contains(lines, "no findings") || strings.Contains(lines, "exactly one refund") {
			t.Fatalf("%s: the summary gives a verdict:\n%s", how, lines)
		}
	}

	rep, err := run(context.Background(), "sk_live_unknown")
	var stripeErr *audit.StripeError
	if !errors.As(err, &stripeErr) {
		t.Fatalf("refused key: error %v, want a *audit.StripeError", err)
	}
	check("refused key", rep)

	// Stopped before or between lists, however the workers and the
	// feeder race: tried many times, each must end in ctx's error.
	for range 50 {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		rep, err := run(ctx, testKey)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("interrupted: error %v, want context.Canceled", err)
		}
		check("interrupted", rep)
	}
}
