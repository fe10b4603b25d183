package audit_test

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/audit"
	"github.com/refundkit/refundkit/refund/provider/events"
)

// The provider's signed events (Options.Told) are read against the
// journals: an event that tells of an item's refund otherwise than the
// journals bind it (amount, currency, payment, or another live refund
// for the item) is a finding, even where Stripe's own list agrees with
// the journals; events that agree are none.
func TestToldRefundsThatContradictTheJournalAreFindings(t *testing.T) {
	s := newSim(t, charges(6, nil))
	path := filepath.Join(t.TempDir(), "j.jsonl")
	res := refundRun(t, s, path, plan(6))
	told := func(item string, edit func(*refund.Refund)) refund.Refund {
		r := refund.Refund{ID: res[item].Refund, Charge: res[item].Charge, Amount: 500, Currency: "usd", Status: refund.RefundSucceeded,
			Metadata: map[string]string{refund.MetaBatch: "b1", refund.MetaItem: item, refund.MetaAttempt: "1"}}
		r.Metadata = maps.Clone(r.Metadata)
		edit(&r)
		return r
	}
	events := []refund.Refund{
		told("i1", func(*refund.Refund) {}),                                                           // agrees
		told("i2", func(r *refund.Refund) { r.Amount = 5000 }),                                        // another amount
		told("i3", func(r *refund.Refund) { r.Currency = "eur" }),                                     // another currency
		told("i4", func(r *refund.Refund) { r.Charge = "ch_a1" }),                                     // another payment
		told("i5", func(r *refund.Refund) { r.ID = "re_not_journaled" }),                              // a second live refund of i5
		told("i6", func(r *refund.Refund) { r.ID = "re_failed_one"; r.Status = refund.RefundFailed }), // moved no money
		told("i6", func(r *refund.Refund) { r.Status = refund.RefundFailed }),                         // i6's credited refund, failed since
		told("i1", func(r *refund.Refund) { r.ID = "re_x"; r.Metadata[refund.MetaItem] = "nobody" }),  // an item nobody knows
	}
	got, rep := mustAudit(t, s, stripeAudit{plan: plan(6), journal: path, told: events})
	wantFindings(t, "audit", got, "events_contradict i2", "events_contradict i3", "events_contradict i4", "events_contradict i5", "events_contradict i6", "stripe_only nobody")
	if rep.Clean() {
		t.Error("the report is clean with contradicting events")
	}
	if f := find(got, audit.KindEventsContradict, "i2"); f == nil || f.Refunds[0].ID != res["i2"].Refund || f.Remedy == "" {
		t.Errorf("i2's finding: %+v", f)
	}
	// The same events, agreeing: no finding.
	var agree []refund.Refund
	for _, item := range []string{"i1", "i2", "i3", "i4", "i5", "i6"} {
		agree = append(agree, told(item, func(*refund.Refund) {}))
	}
	got, _ = mustAudit(t, s, stripeAudit{plan: plan(6), journal: path, told: agree})
	wantFindings(t, "agreeing events", got)
}

// Two signed events of the refund the journal credits item i1 with, one
// agreeing with the journal (succeeded, 500), one saying it failed, of
// 5000: events.Outcomes tells them pending, events_contradict, with the
// oldest event's fields. Either order is a finding.
func TestEventsThatDisagreeAreAFindingWhateverTheirOrder(t *testing.T) {
	s := newSim(t, charges(1, nil))
	path := filepath.Join(t.TempDir(), "j.jsonl")
	res := refundRun(t, s, path, plan(1))
	meta := map[string]string{refund.MetaBatch: "b1", refund.MetaItem: "i1", refund.MetaAttempt: "1"}
	ok := &refund.Refund{ID: res["i1"].Refund, Charge: res["i1"].Charge, Amount: 500, Currency: "usd", Status: refund.RefundSucceeded, Metadata: meta}
	odd := &refund.Refund{ID: res["i1"].Refund, Charge: res["i1"].Charge, Amount: 5000, Currency: "usd", Status: refund.RefundFailed, Metadata: meta}
	t0 := time.Unix(1_700_000_000, 0)
	for _, c := range []struct {
		name          string
		first, second *refund.Refund
	}{{"agreeing event first", ok, odd}, {"contradicting event first", odd, ok}} {
		told := events.Outcomes([]events.Told{{At: t0, ID: "evt_a", Refund: c.first}, {At: t0.Add(time.Second), ID: "evt_b", Refund: c.second}})
		got, rep := mustAudit(t, s, stripeAudit{plan: plan(1), journal: path, told: told})
		if !slices.Contains(summary(got), "events_contradict i1") || rep.Clean() {
			t.Errorf("%s: findings %q, clean %v: want events_contradict i1, as a signed event says i1's credited refund %s failed", c.name, summary(got), rep.Clean(), ok.ID)
		}
	}
}

// A Stripe (or PayPal) refund the signed events tell of for an unknown
// item of an audited batch is a stripe_only finding that names its
// payment, as an Adyen one does.
func TestToldRefundOfUnknownItemNamesItsPayment(t *testing.T) {
	s := newSim(t, charges(1, nil))
	path := filepath.Join(t.TempDir(), "j.jsonl")
	refundRun(t, s, path, plan(1))
	x := refund.Refund{ID: "re_x", Charge: "ch_a1", PaymentIntent: "pi_a1", Amount: 500, Currency: "usd", Status: refund.RefundSucceeded,
		Metadata: map[string]string{refund.MetaBatch: "b1", refund.MetaItem: "nobody", refund.MetaAttempt: "1"}}
	got, _ := mustAudit(t, s, stripeAudit{plan: plan(1), journal: path, told: []refund.Refund{x}})
	for _, f := range got {
		if f.Item == "nobody" {
			if f.Charge != "ch_a1" || f.PaymentIntent != "pi_a1" || !strings.Contains(f.Message, "on payment ch_a1,") {
				t.Errorf("finding: charge %q payment_intent %q; message %q: want the refund's payment ch_a1", f.Charge, f.PaymentIntent, f.Message)
			}
			return
		}
	}
	t.Fatalf("no finding for item nobody: %q", summary(got))
}
