package audit_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/audit"
)

var t0 = time.Date(2024, 5, 1, 9, 0, 0, 0, time.UTC)

// jl builds journal text from records; batch b1 and ts are filled in.
func jl(t testing.TB, recs ...journal.Record) string {
	t.Helper()
	var b []byte
	for k, r := range recs {
		r.V = journal.Version
		if r.Batch == "" {
			r.Batch = "b1"
		}
		if r.Time.IsZero() {
			r.Time = t0.Add(time.Duration(k) * time.Second)
		}
		var err error
		if b, err = journal.MarshalLine(b, &r); err != nil {
			t.Fatal(err)
		}
	}
	return string(b)
}

func intent(item, charge string, attempt int) journal.Record {
	return journal.Record{Type: journal.TypeIntent, Item: item, Charge: charge, Attempt: attempt,
		Key: fmt.Sprintf("refundkit:b1:%s:%d", item, attempt), Amount: 0}
}

func refunded(item, charge, id string, amount int64) journal.Record {
	return journal.Record{Type: journal.TypeRefunded, Item: item, Charge: charge, Attempt: 1, Refund: id,
		Amount: amount, Currency: "usd", Status: "succeeded", Source: journal.SourceAPI}
}

func failed(item, charge, code string, final bool) journal.Record {
	return journal.Record{Type: journal.TypeFailed, Item: item, Charge: charge, Attempt: 1, Code: code,
		Message: "because", HTTPStatus: 400, Final: final}
}

func canceled(item, charge, id string, amount int64) journal.Record {
	return journal.Record{Type: journal.TypeCanceled, Item: item, Charge: charge, Refund: id, Amount: amount, Currency: "usd", Status: "canceled"}
}

// done is an item refunded once, as refund journals it.
func done(item, charge, id string, amount int64) []journal.Record {
	return []journal.Record{intent(item, charge, 1), refunded(item, charge, id, amount)}
}

func cat(parts ...[]journal.Record) []journal.Record { return slices.Concat(parts...) }

func one(r journal.Record) []journal.Record { return []journal.Record{r} }

// runOffline audits journals (and a plan, if not empty) without Stripe.
func runOffline(t *testing.T, plan string, journals ...string) ([]*audit.Finding, *audit.Report) {
	t.Helper()
	a := audit.New()
	if plan != "" {
		if err := a.AddPlan(strings.NewReader(plan), "plan.jsonl"); err != nil {
			t.Fatal(err)
		}
	}
	for k, j := range journals {
		if _, err := a.AddJournal(strings.NewReader(j), fmt.Sprintf("j%d.jsonl", k+1)); err != nil {
			t.Fatal(err)
		}
	}
	var got []*audit.Finding
	rep, err := a.Run(context.Background(), audit.Options{}, func(f *audit.Finding) { got = append(got, f) })
	if err != nil {
		t.Fatal(err)
	}
	return got, rep
}

// summary names each finding as "kind item" (or "kind @charge" for a
// finding about a charge, "kind file:line" for a torn tail).
func summary(fs []*audit.Finding) []string {
	out := []string{}
	for _, f := range fs {
		switch {
		case f.Finding == audit.KindTornTail:
			out = append(out, fmt.Sprintf("%s %s:%d", f.Finding, f.File, f.Line))
		case f.Item == "":
			out = append(out, fmt.Sprintf("%s @%s", f.Finding, f.Charge+f.PaymentIntent))
		default:
			out = append(out, f.Finding+" "+f.Item)
		}
	}
	return out
}

const plan3 = `{"batch":"b1","item":"i1","charge":"ch_1","amount":100}
{"batch":"b1","item":"i2","charge":"ch_2"}
{"batch":"b1","item":"i3","charge":"ch_3","amount":300,"currency":"usd"}
`

func TestAuditFindingsOverHandWrittenJournals(t *testing.T) {
	for _, c := range []struct {
		name     string
		plan     string
		journals []string
		want     []string
	}{
		{"clean", "", []string{jl(t, cat(done("i1", "ch_1", "re_1", 100), done("i2", "ch_2", "re_2", 200))...)},
			[]string{}},
		{"clean with plan, records interleaved as concurrent workers write them", plan3, []string{jl(t,
			intent("i1", "ch_1", 1), intent("i2", "ch_2", 1), intent("i3", "ch_3", 1),
			refunded("i2", "ch_2", "re_2", 200), refunded("i3", "ch_3", "re_3", 300), refunded("i1", "ch_1", "re_1", 100))},
			[]string{}},
		{"a refund journaled twice under one id is one refund", "", []string{jl(t, cat(done("i1", "ch_1", "re_1", 100), one(refunded("i1", "ch_1", "re_1", 100)))...)},
			[]string{}},
		{"two refund ids for one item", "", []string{jl(t, cat(done("i1", "ch_1", "re_1", 100), done("i2", "ch_2", "re_2", 200), one(refunded("i1", "ch_1", "re_9", 100)))...)},
			[]string{"duplicate i1"}},
		{"an extra journaled as canceled is no longer counted", "", []string{jl(t, cat(done("i1", "ch_1", "re_1", 100), one(refunded("i1", "ch_1", "re_9", 100)), one(canceled("i1", "ch_1", "re_9", 100)))...)},
			[]string{}},
		{"intent without outcome", "", []string{jl(t, cat(done("i1", "ch_1", "re_1", 100), one(intent("i2", "ch_2", 1)))...)},
			[]string{"in_doubt i2"}},
		{"a non-final failure leaves the item in doubt", "", []string{jl(t, intent("i1", "ch_1", 1), failed("i1", "ch_1", "api_error", false))},
			[]string{"in_doubt i1"}},
		{"final failure", "", []string{jl(t, intent("i1", "ch_1", 1), failed("i1", "ch_1", "charge_already_refunded", true))},
			[]string{"failed i1"}},
		{"refunded and failed for good", "", []string{jl(t, cat(done("i1", "ch_1", "re_1", 100), one(failed("i1", "ch_1", "charge_already_refunded", true)))...)},
			[]string{"conflict i1"}},
		{"one item on two charges", "", []string{jl(t, intent("i1", "ch_1", 1), refunded("i1", "ch_2", "re_1", 100))},
			[]string{"conflict i1"}},
		{"the only refund canceled", "", []string{jl(t, cat(done("i1", "ch_1", "re_1", 100), one(canceled("i1", "ch_1", "re_1", 100)))...)},
			[]string{"conflict i1"}},
		{"torn tail", "", []string{jl(t, cat(done("i1", "ch_1", "re_1", 100), one(intent("i2", "ch_2", 1)))...) + `{"v":1,"type":"refun`},
			[]string{"torn_tail j1.jsonl:4", "in_doubt i2"}},
		{"planned item never journaled", plan3, []string{jl(t, cat(done("i1", "ch_1", "re_1", 100), done("i2", "ch_2", "re_2", 200))...)},
			[]string{"missing i3"}},
		{"journal item not in the plan", plan3, []string{jl(t, cat(done("i1", "ch_1", "re_1", 100), done("i2", "ch_2", "re_2", 200), done("i3", "ch_3", "re_3", 300), done("i4", "ch_4", "re_4", 400))...)},
			[]string{"not_in_plan i4"}},
		{"unplanned item refunded on a planned charge", plan3, []string{jl(t, cat(done("i1", "ch_1", "re_1", 100), done("i2", "ch_2", "re_2", 200), done("i3", "ch_3", "re_3", 300), done("old-i1", "ch_1", "re_7", 100))...)},
			[]string{"not_in_plan old-i1", "duplicate @ch_1", "unowned @ch_1"}},
		{"partial refunds of two planned items on one charge", `{"batch":"b1","item":"a","charge":"ch_1","amount":100}
{"batch":"b1","item":"b","charge":"ch_1","amount":200}
`, []string{jl(t, cat(done("a", "ch_1", "re_1", 100), done("b", "ch_1", "re_2", 200))...)},
			[]string{}},
		{"two journals (shards) refunding one item twice", "", []string{
			jl(t, done("i1", "ch_1", "re_1", 100)...),
			jl(t, cat(done("i1", "ch_1", "re_5", 100), done("i2", "ch_2", "re_2", 200))...)},
			[]string{"duplicate i1"}},
		{"every kind at once", plan3, []string{jl(t, cat(
			done("i1", "ch_1", "re_1", 100), one(refunded("i1", "ch_1", "re_8", 100)),
			one(intent("i2", "ch_2", 1)), one(failed("i2", "ch_2", "charge_disputed", true)),
			done("i9", "ch_9", "re_9", 900))...) + "{\"v\":1,"},
			[]string{"torn_tail j1.jsonl:8", "failed i2", "not_in_plan i9", "duplicate i1", "missing i3"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, rep := runOffline(t, c.plan, c.journals...)
			if s := summary(got); !slices.Equal(s, c.want) {
				t.Errorf("findings %q, want %q", s, c.want)
			}
			if rep.Clean() != (len(c.want) == 0) || rep.FindingCount() != len(c.want) {
				t.Errorf("report counts %d findings (clean %v), want %d", rep.FindingCount(), rep.Clean(), len(c.want))
			}
		})
	}
}

func TestAuditFindingDetails(t *testing.T) {
	got, rep := runOffline(t, plan3, jl(t, cat(
		done("i1", "ch_1", "re_1", 100), one(refunded("i1", "ch_1", "re_8", 100)),
		one(intent("i2", "ch_2", 1)), one(failed("i2", "ch_2", "charge_disputed", true)),
		one(intent("i3", "ch_3", 1)))...))
	byKind := map[string]*audit.Finding{}
	for _, f := range got {
		byKind[f.Finding] = f
	}
	dup := byKind[audit.KindDuplicate]
	if dup == nil || dup.Batch != "b1" || dup.Charge != "ch_1" || dup.Amount != 100 || dup.Currency != "usd" ||
		len(dup.Refunds) != 2 || dup.Refunds[0].ID != "re_1" || dup.Refunds[1].ID != "re_8" {
		t.Fatalf("duplicate finding %+v", dup)
	}
	if !strings.Contains(dup.Remedy, "cannot be reversed through the API") || !strings.Contains(dup.Remedy, "charged again") {
		t.Errorf("duplicate remedy %q does not say a succeeded refund cannot be undone", dup.Remedy)
	}
	fail := byKind[audit.KindFailed]
	if fail == nil || fail.Code != "charge_disputed" || fail.Message != "because" || fail.Status != "failed" {
		t.Errorf("failed finding %+v", fail)
	}
	doubt := byKind[audit.KindInDoubt]
	if doubt == nil || doubt.Item != "i3" || doubt.Amount != 300 || doubt.Currency != "usd" || doubt.Remedy == "" {
		t.Errorf("in_doubt finding %+v: want the planned amount", doubt)
	}
	if rep.ByStatus["refunded"] != 1 || rep.ByStatus["failed"] != 1 || rep.ByStatus["in_doubt"] != 1 {
		t.Errorf("by status %v", rep.ByStatus)
	}
	if rep.Amounts["refunded"]["usd"] != 200 || rep.ExtraJournal != 1 || rep.ExtraJournalAmount["usd"] != 100 {
		t.Errorf("amounts %v, extra %d %v", rep.Amounts, rep.ExtraJournal, rep.ExtraJournalAmount)
	}
	lines := strings.Join(rep.Lines(), "\n")
	for _, want := range []string{"1 journal, 6 records, 3 items: 1 refunded, 1 failed, 1 in doubt", "refunded: 2.00 USD", "in doubt (requested): 3.00 USD",
		"failed (requested): 1 full refund\n", "findings: 1 duplicate, 1 in_doubt, 1 failed", "1 extra refund in the journals, 1.00 USD"} {
		if !strings.Contains(lines, want) {
			t.Errorf("summary lacks %q:\n%s", want, lines)
		}
	}
}

func TestAuditOfACorruptJournalIsAnErrorWithFileAndLine(t *testing.T) {
	good := jl(t, done("i1", "ch_1", "re_1", 100)...)
	for _, c := range []struct {
		name, journal, want string
	}{
		{"garbage in the middle", good + "not json\n" + good, "j.jsonl:3: corrupt record"},
		{"unknown field", good + `{"v":1,"type":"intent","ts":"2024-05-01T09:00:00Z","batch":"b","item":"i","bogus":1}` + "\n" + good, "j.jsonl:3: corrupt record"},
		{"unknown version", `{"v":2,"type":"intent"}` + "\n", "j.jsonl:1: record version 2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := audit.New()
			_, err := a.AddJournal(strings.NewReader(c.journal), "j.jsonl")
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Fatalf("error %v, want it to start %q", err, c.want)
			}
		})
	}
	var corrupt *journal.CorruptError
	_, err := audit.New().AddJournal(strings.NewReader(good+"x\n"+good), "j.jsonl")
	if !errors.As(err, &corrupt) || corrupt.Line != 3 || corrupt.Offset != int64(len(good)) {
		t.Fatalf("error %#v, want a *journal.CorruptError at line 3, offset %d", err, len(good))
	}
}

// TestAuditPlanReadsNullAsAbsent: audit reads a plan as refund does, an
// optional field given as null included.
func TestAuditPlanReadsNullAsAbsent(t *testing.T) {
	got, _ := runOffline(t, `{"batch":"b1","item":"i1","charge":"ch_1","reason":null,"amount":null,"currency":null}`+"\n")
	if s := summary(got); len(s) != 1 || s[0] != "missing i1" || got[0].Amount != 0 || got[0].Currency != "" {
		t.Fatalf("findings %v, want one missing i1 of the full amount", s)
	}
}

func TestAuditPlanErrors(t *testing.T) {
	for _, c := range []struct{ plan, want string }{
		{`{"batch":"b1","item":"i1","charge":"ch_1"}` + "\n" + `{"batch":"b1","item":"i1","charge":"ch_2"}`, `plan.jsonl:2: item "i1" of batch "b1" is listed twice`},
		{"\n" + `{"batch":"b1","item":"i1","charge":"ch_1","amount":-5}`, "plan.jsonl:2: amount: -5: want a positive whole number of minor units"},
		{`{"batch":null,"item":"i1","charge":"ch_1"}`, "plan.jsonl:1: batch: null: want 1-64 characters"},
		{`{"batch":"b1","item":"i1","charge":"ch_1"}` + "\n" + strings.Repeat(" ", refund.MaxLineBytes+1), "plan.jsonl:2: line longer than 1048576 bytes"},
	} {
		err := audit.New().AddPlan(strings.NewReader(c.plan), "plan.jsonl")
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("error %v, want it to start %q", err, c.want)
		}
	}
}

// What refund journals when its look-up holds an item, when an answer is
// not the item's refund, and when Stripe holds two refunds for one item.
func TestAuditOfHeldMismatchedAndDoublyRefundedItems(t *testing.T) {
	held := func(code, msg string) journal.Record {
		r := failed("i1", "ch_1", code, true)
		r.HTTPStatus, r.Message = 0, msg
		return r
	}
	mismatch := failed("i1", "ch_1", refund.CodeAnswerMismatch, false)
	mismatch.HTTPStatus, mismatch.Message = 200, "the answer re_7 names charge ch_9, not ch_1"
	second := refunded("i1", "ch_1", "re_9", 250)
	second.Attempt, second.Source = 2, journal.SourceReconciled
	for _, c := range []struct {
		name   string
		recs   []journal.Record
		kind   string
		code   string
		msg    string
		remedy []string
		amount int64
	}{
		{"held for another batch's refund", []journal.Record{held(refund.CodeRefundedByOtherBatch, "re_1 (batch day-1, item i1, 500 usd)")},
			audit.KindFailed, refund.CodeRefundedByOtherBatch, "re_1 (batch day-1, item i1, 500 usd)",
			[]string{"refund held this item before any call", "another refundkit batch", "a person decides", "run refund again with --allow-refunded-charges"}, 0},
		{"held for a refund outside refundkit", []journal.Record{held(refund.CodeRefundedOutside, "re_2 (100 usd, no refundkit metadata)")},
			audit.KindFailed, refund.CodeRefundedOutside, "re_2 (100 usd, no refundkit metadata)",
			[]string{"made outside refundkit", "a person decides", "run refund again with --allow-refunded-charges"}, 0},
		{"an answer that is not the item's refund", []journal.Record{intent("i1", "ch_1", 1), mismatch},
			audit.KindInDoubt, refund.CodeAnswerMismatch, mismatch.Message,
			[]string{"answered this item's refund call with a refund for another charge, amount or item", "check that refund at Stripe", "before running refund again"}, 0},
		{"two live refunds found for one item", cat(done("i1", "ch_1", "re_1", 250), one(second)),
			audit.KindDuplicate, "", "", []string{"cannot be reversed through the API"}, 250},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, _ := runOffline(t, "", jl(t, c.recs...))
			wantFindings(t, "audit", got, c.kind+" i1")
			f := got[0]
			if f.Code != c.code || f.Message != c.msg || f.Amount != c.amount {
				t.Errorf("finding %+v: want code %q, message %q, amount %d", f, c.code, c.msg, c.amount)
			}
			for _, want := range c.remedy {
				if !strings.Contains(f.Remedy, want) {
					t.Errorf("remedy %q lacks %q", f.Remedy, want)
				}
			}
			if c.kind == audit.KindDuplicate && (len(f.Refunds) != 2 || f.Refunds[1].ID != "re_9" || f.Refunds[1].Amount != 250) {
				t.Errorf("duplicate refunds %+v", f.Refunds)
			}
		})
	}
}
