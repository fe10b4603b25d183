package audit_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/audit"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
)

// writeJournal writes recs as a journal file and returns its path.
func writeJournal(t *testing.T, recs ...journal.Record) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "j.jsonl")
	if err := os.WriteFile(path, []byte(jl(t, recs...)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The provider's record of a refund is checked against what the item
// asked for even where the journal agrees with the plan: a journal that
// says usd for a refund Stripe made in jpy is a currency_mismatch with
// Stripe, and nothing offline.
func TestStripeCurrencyOfACreditedRefund(t *testing.T) {
	s := newSim(t, []stripesim.Charge{{ID: "ch_j", Currency: "jpy", Amount: 100000,
		Refunds: []stripesim.SeedRefund{{Amount: 50000, Metadata: meta("b1", "c1")}}}})
	id := s.Refunds()[0].ID
	const plan = `{"batch":"b1","item":"c1","charge":"ch_j","amount":50000,"currency":"usd"}` + "\n"
	path := writeJournal(t, done("c1", "ch_j", id, 50000)...) // journaled usd
	got, _ := mustAudit(t, s, stripeAudit{plan: plan, journal: path})
	wantFindings(t, "audit --stripe", got, "currency_mismatch c1")
	f := got[0]
	if want := "asked for 500.00 USD, credited with " + id + " of 50,000 JPY"; f.Message != want || f.Currency != "jpy" || len(f.Refunds) != 1 {
		t.Errorf("finding %+v, want message %q", f, want)
	}
	if !strings.HasPrefix(f.Remedy, "Stripe credits this item") {
		t.Errorf("remedy %q", f.Remedy)
	}
	off, _ := runOffline(t, plan, jl(t, done("c1", "ch_j", id, 50000)...))
	wantFindings(t, "audit", off)
}

// A full refund named by its payment intent is refunded whole only when the
// intent's charges are: the provider reads the payment (Provider.Payment).
func TestFullRefundOfAPaymentIntentAdoptedAPartialOne(t *testing.T) {
	s := newSim(t, charges(2, map[int][]stripesim.SeedRefund{
		1: {{Amount: 300, Metadata: meta("b1", "p1")}},
		2: {{Amount: 2000, Metadata: meta("b1", "p2")}},
	}))
	ids := map[string]string{}
	for _, r := range s.Refunds() {
		ids[r.Metadata[refund.MetaItem]] = r.ID
	}
	const plan = `{"batch":"b1","item":"p1","payment_intent":"pi_a1"}
{"batch":"b1","item":"p2","payment_intent":"pi_a2"}
`
	var recs []journal.Record
	for _, it := range []struct {
		item, pi string
		amount   int64
	}{{"p1", "pi_a1", 300}, {"p2", "pi_a2", 2000}} {
		in := intent(it.item, "", 1)
		in.PaymentIntent = it.pi
		out := refunded(it.item, "", ids[it.item], it.amount)
		out.PaymentIntent, out.Source = it.pi, journal.SourceReconciled
		recs = append(recs, in, out)
	}
	path := writeJournal(t, recs...)
	got, rep := mustAudit(t, s, stripeAudit{plan: plan, journal: path})
	wantFindings(t, "audit --stripe", got, "amount_mismatch p1")
	if want := "asked for a full refund, but the 20.00 USD payment holds only 3.00 USD of live refunds: 17.00 USD of it is not refunded"; got[0].Message != want {
		t.Errorf("message %q, want %q", got[0].Message, want)
	}
	if rep.ChargeCalls() != 2 {
		t.Errorf("%d payment reads, want 2 (one a payment)", rep.ChargeCalls())
	}
}

// noPayments is a provider that lists refunds and cannot read payments,
// as the exec provider: full refunds are then not checked, and nothing
// is a finding for it.
type noPayments struct{ list []refund.Refund }

func (noPayments) Facts() refund.Facts { return refund.Facts{Name: "Exec"} }
func (noPayments) Create(context.Context, *refund.Item, int) (refund.Answer, error) {
	panic("audit creates nothing")
}
func (p noPayments) Find(context.Context, refund.Payment) ([]refund.Refund, error) {
	return p.list, nil
}
func (noPayments) Payment(context.Context, refund.Payment) (refund.PaymentInfo, error) {
	return refund.PaymentInfo{}, refund.ErrNoLookup
}
func (noPayments) Cancel(context.Context, string) (refund.Refund, error) { panic("no cancel") }
func (noPayments) Get(context.Context, string) (refund.Refund, error)    { panic("no get") }

func TestFullRefundUncheckedWhereTheProviderCannotReadPayments(t *testing.T) {
	p := noPayments{list: []refund.Refund{{ID: "re_1", Capture: "pay_1", Amount: 300, Currency: "usd", Status: refund.RefundSucceeded,
		Metadata: meta("b1", "x1")}}}
	a := audit.New()
	if err := a.AddPlan(strings.NewReader(`{"batch":"b1","item":"x1","capture":"pay_1"}`+"\n"), "plan.jsonl"); err != nil {
		t.Fatal(err)
	}
	in := intent("x1", "", 1)
	in.Capture = "pay_1"
	out := refunded("x1", "", "re_1", 300)
	out.Capture = "pay_1"
	if _, err := a.AddJournal(strings.NewReader(jl(t, in, out)), "j.jsonl"); err != nil {
		t.Fatal(err)
	}
	var got []*audit.Finding
	rep, err := a.Run(context.Background(), audit.Options{Provider: p}, func(f *audit.Finding) { got = append(got, f) })
	if err != nil {
		t.Fatal(err)
	}
	wantFindings(t, "audit --provider exec", got)
	if rep.ChargeCalls() != 1 || !rep.Clean() {
		t.Errorf("%d payment reads, clean %v", rep.ChargeCalls(), rep.Clean())
	}
}

// A refund of the batch that no planned item owns is unowned, unless refund
// was told to refund on top of it (--allow-refunded-charges, after it held
// the planned item for it): a person decided, as for another batch.
func TestUnownedRefundAllowedOnTop(t *testing.T) {
	const plan = `{"batch":"b1","item":"b1","charge":"ch_1","amount":100,"currency":"usd"}` + "\n"
	held := failed("b1", "ch_1", refund.CodeRefundedByOtherItem, true)
	for _, tt := range []struct {
		name string
		recs []journal.Record
		want []string
	}{
		{"held", cat(done("a1", "ch_1", "re_1", 100), one(held)),
			[]string{"failed b1", "not_in_plan a1", "unowned @ch_1"}},
		{"allowed", cat(done("a1", "ch_1", "re_1", 100), one(held), done("b1", "ch_1", "re_2", 100)),
			[]string{"not_in_plan a1", "duplicate @ch_1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := runOffline(t, plan, jl(t, tt.recs...))
			wantFindings(t, "audit --plan", got, tt.want...)
			if f := find(got, audit.KindFailed, "b1"); f != nil && !strings.HasPrefix(f.Remedy, "refund held this item before any call: its charge already holds a refund of this batch for an item the plan does not put on this payment") {
				t.Errorf("held item's remedy %q", f.Remedy)
			}
		})
	}
}
