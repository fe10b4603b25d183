package audit_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/audit"
	"github.com/refundkit/refundkit/refund/money"
)

// threeHuge is a provider that lists three succeeded refunds of 2^62 usd
// for item i1 of batch b1 on every payment.
type threeHuge struct{ refund.Provider }

func (threeHuge) Facts() refund.Facts { return refund.Facts{Name: "Huge"} }

func (threeHuge) Find(_ context.Context, p refund.Payment) ([]refund.Refund, error) {
	var out []refund.Refund
	for _, id := range []string{"re_1", "re_2", "re_3"} {
		out = append(out, refund.Refund{ID: id, Charge: p.Charge, Amount: 1 << 62, Currency: "usd", Status: refund.RefundSucceeded,
			Metadata: map[string]string{refund.MetaBatch: "b1", refund.MetaItem: "i1", refund.MetaAttempt: "1"}})
	}
	return out, nil
}

func (threeHuge) Payment(context.Context, refund.Payment) (refund.PaymentInfo, error) {
	return refund.PaymentInfo{}, refund.ErrNoLookup
}

// The two extra refunds the provider lists for an item sum to 2^63 (the
// report's total of irreversible extras is the first sum to overflow):
// the audit stops with a *money.TotalError naming the total and the item,
// no report, and the duplicate finding that would hold the wrapped sum is
// never emitted. The journal's own total (one refund of 2^62) fits.
func TestAuditOverflowInAFinding(t *testing.T) {
	a := audit.New()
	in := intent("i1", "ch_1", 1)
	if _, err := a.AddJournal(strings.NewReader(jl(t, in, refunded("i1", "ch_1", "re_1", 1<<62))), "j.jsonl"); err != nil {
		t.Fatal(err)
	}
	var got []*audit.Finding
	rep, err := a.Run(context.Background(), audit.Options{Provider: threeHuge{}}, func(f *audit.Finding) { got = append(got, f) })
	var oe *money.TotalError
	if !errors.As(err, &oe) || !errors.Is(err, money.ErrOverflow) || rep != nil {
		t.Fatalf("Run = %v, %v; want a *money.TotalError and no report", rep, err)
	}
	if want := "the total of irreversible extra refunds overflows at item i1 of batch b1: the USD amounts sum beyond 92,233,720,368,547,758.07 USD"; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error %q, want it to start %q", err, want)
	}
	for _, f := range got {
		if f.Amount < 0 || f.Finding == audit.KindDuplicate {
			t.Errorf("finding emitted after the overflow: %+v", f)
		}
	}
}

// Two items of 2^62 each: the refunded total overflows at the second, no
// finding is emitted and no report says clean.
func TestAuditOverflowInTheTotal(t *testing.T) {
	a := audit.New()
	j := jl(t, intent("i1", "ch_1", 1), refunded("i1", "ch_1", "re_1", 1<<62), intent("i2", "ch_2", 1), refunded("i2", "ch_2", "re_2", 1<<62))
	if _, err := a.AddJournal(strings.NewReader(j), "j.jsonl"); err != nil {
		t.Fatal(err)
	}
	rep, err := a.Run(context.Background(), audit.Options{}, func(f *audit.Finding) { t.Errorf("finding %+v", f) })
	if want := "the refunded total overflows at item i2 of batch b1: "; err == nil || !strings.HasPrefix(err.Error(), want) || rep != nil {
		t.Fatalf("Run = %v, %v; want %q... and no report", rep, err, want)
	}
}
