package audit_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/audit"
)

// Adyen payments, named by psp_reference, are audited as captures are:
// bound to their items, listed and read through the provider by their
// psp_reference, and named so in findings.

const (
	pspA = "8815658961765250"
	pspB = "QFQTPCQ8HXSKGK82"
)

// pspPayments is a provider of payments named by psp_reference: each of
// 10.00 EUR, with the refunds in list.
type pspPayments struct {
	list  []refund.Refund
	asked *[]refund.Payment // the payments Find and Payment were asked for
}

func (pspPayments) Facts() refund.Facts {
	return refund.Facts{Name: "Adyen", Payments: []string{"psp_reference"}}
}
func (pspPayments) Create(context.Context, *refund.Item, int) (refund.Answer, error) {
	panic("audit creates nothing")
}
func (p pspPayments) Find(_ context.Context, pay refund.Payment) ([]refund.Refund, error) {
	*p.asked = append(*p.asked, pay)
	var out []refund.Refund
	for _, r := range p.list {
		if r.PSPReference == pay.PSPReference {
			out = append(out, r)
		}
	}
	return out, nil
}
func (p pspPayments) Payment(_ context.Context, pay refund.Payment) (refund.PaymentInfo, error) {
	*p.asked = append(*p.asked, pay)
	return refund.PaymentInfo{Amount: 1000, Currency: "eur"}, nil
}
func (pspPayments) Cancel(context.Context, string) (refund.Refund, error) { panic("no cancel") }
func (pspPayments) Get(context.Context, string) (refund.Refund, error)    { panic("no get") }

// pspDone is item refunded once on psp_reference psp, in euros.
func pspDone(item, psp, id string, amount int64) []journal.Record {
	in := intent(item, "", 1)
	in.PSPReference, in.Currency = psp, "eur"
	out := refunded(item, "", id, amount)
	out.PSPReference, out.Currency = psp, "eur"
	return []journal.Record{in, out}
}

func pspRefund(id, psp, item string, amount int64) refund.Refund {
	return refund.Refund{ID: id, PSPReference: psp, Amount: amount, Currency: "eur", Status: refund.RefundSucceeded, Metadata: meta("b1", item)}
}

func pspAudit(t *testing.T, plan string, p pspPayments, recs ...journal.Record) ([]*audit.Finding, *audit.Report) {
	t.Helper()
	a := audit.New()
	if err := a.AddPlan(strings.NewReader(plan), "plan.jsonl"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AddJournal(strings.NewReader(jl(t, recs...)), "j.jsonl"); err != nil {
		t.Fatal(err)
	}
	var got []*audit.Finding
	rep, err := a.Run(context.Background(), audit.Options{Provider: p}, func(f *audit.Finding) { got = append(got, f) })
	if err != nil {
		t.Fatal(err)
	}
	return got, rep
}

// A full refund of a payment is refunded whole only when the payment's
// live refunds add up to what the provider says it holds; the payment is
// read and listed by its psp_reference.
func TestPSPReferenceFullRefundBinding(t *testing.T) {
	const plan = `{"batch":"b1","item":"x1","psp_reference":"` + pspA + `","currency":"eur"}` + "\n"
	var asked []refund.Payment
	p := pspPayments{list: []refund.Refund{pspRefund("re_1", pspA, "x1", 300)}, asked: &asked}
	got, rep := pspAudit(t, plan, p, pspDone("x1", pspA, "re_1", 300)...)
	wantFindings(t, "audit --provider adyen", got, "amount_mismatch x1")
	f := got[0]
	if want := "asked for a full refund, but the 10.00 EUR payment holds only 3.00 EUR of live refunds: 7.00 EUR of it is not refunded"; f.Message != want {
		t.Errorf("message %q, want %q", f.Message, want)
	}
	if f.PSPReference != pspA || f.Charge != "" || f.Capture != "" {
		t.Errorf("finding names charge %q capture %q psp_reference %q, want psp_reference %s", f.Charge, f.Capture, f.PSPReference, pspA)
	}
	if b, _ := json.Marshal(f); !strings.Contains(string(b), `"psp_reference":"`+pspA+`"`) {
		t.Errorf("finding %s does not name its psp_reference", b)
	}
	for _, pay := range asked {
		if pay != (refund.Payment{PSPReference: pspA}) {
			t.Errorf("provider asked for %+v, want psp_reference %s only", pay, pspA)
		}
	}
	if len(asked) == 0 || rep.Clean() {
		t.Errorf("%d provider calls, clean %v: want the payment read and a finding", len(asked), rep.Clean())
	}

	// Refunded whole: nothing to find.
	asked = nil
	p.list = []refund.Refund{pspRefund("re_1", pspA, "x1", 1000)}
	got, rep = pspAudit(t, plan, p, pspDone("x1", pspA, "re_1", 1000)...)
	wantFindings(t, "audit --provider adyen, refunded whole", got)
	if !rep.Clean() {
		t.Error("not clean")
	}
}

// A second refund at the provider on a planned payment, which no journal
// holds, is found and named by its payment's psp_reference.
func TestPSPReferenceRefundOnlyAtTheProvider(t *testing.T) {
	const plan = `{"batch":"b1","item":"x1","psp_reference":"` + pspA + `","amount":300,"currency":"eur"}` + "\n"
	var asked []refund.Payment
	p := pspPayments{list: []refund.Refund{pspRefund("re_1", pspA, "x1", 300), pspRefund("re_2", pspA, "x1", 300)}, asked: &asked}
	got, _ := pspAudit(t, plan, p, pspDone("x1", pspA, "re_1", 300)...)
	wantFindings(t, "audit --provider adyen", got, "duplicate x1", "stripe_only x1")
	for _, f := range got {
		if f.PSPReference != pspA {
			t.Errorf("finding %+v, want it to name psp_reference %s", f, pspA)
		}
	}
}

// An item the plan puts on one psp_reference and the journal on another
// is a conflict, offline, as for a charge.
func TestPSPReferencePlanAndJournalDisagree(t *testing.T) {
	const plan = `{"batch":"b1","item":"x1","psp_reference":"` + pspA + `","amount":300,"currency":"eur"}` + "\n"
	got, _ := runOffline(t, plan, jl(t, pspDone("x1", pspB, "re_1", 300)...))
	wantFindings(t, "audit", got, "conflict x1")
	if !strings.Contains(got[0].Message, "names "+pspB+", earlier lines name "+pspA) {
		t.Errorf("message %q, want the two psp_references", got[0].Message)
	}
}
