package stripe_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/provider/stripe"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/refund/sim/stripesim/simtest"
)

// The look-up of a charge is one read, the charge with its refunds, and
// answers the payment check that follows with no request of its own.
func TestFindOfAChargeIsOneReadThatAnswersPayment(t *testing.T) {
	s := simtest.Serve(stripesim.Config{Charges: []stripesim.Charge{{ID: "ch_a", Currency: "eur", Amount: 900,
		Refunds: []stripesim.SeedRefund{{Amount: 100}, {Amount: 200, Metadata: map[string]string{refund.MetaBatch: "b", refund.MetaItem: "i"}}}}}})
	t.Cleanup(s.Close)
	c := stripe.New(s.URL, "sk_test_123", 2)
	got, err := c.Find(context.Background(), refund.Payment{Charge: "ch_a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Amount != 200 || !refund.Matches(&got[0], "b", "i") || got[1].Amount != 100 || got[0].Charge != "ch_a" {
		t.Fatalf("refunds %+v, want the 200 (b/i) then the 100", got)
	}
	info, err := c.Payment(context.Background(), refund.Payment{Charge: "ch_a"})
	if err != nil || info.Amount != 900 || info.Currency != "eur" || !info.Kept {
		t.Fatalf("payment %+v, %v; want 900 eur, kept", info, err)
	}
	if n, l := s.Calls(simtest.GetCharge), s.Calls(simtest.List); n != 1 || l != 0 {
		t.Fatalf("%d charge reads and %d refund lists, want 1 and 0", n, l)
	}
}

// A charge with more refunds than its expanded sublist holds is listed
// again whole: the look-up still sees every refund, newest first.
func TestFindOfAChargeWithManyRefundsListsThemAll(t *testing.T) {
	var seeds []stripesim.SeedRefund
	for i := range 23 {
		seeds = append(seeds, stripesim.SeedRefund{Amount: 1, Metadata: map[string]string{refund.MetaBatch: "b", refund.MetaItem: strconv.Itoa(i)}})
	}
	s := simtest.Serve(stripesim.Config{Charges: []stripesim.Charge{{ID: "ch_m", Currency: "usd", Amount: 100, Refunds: seeds}}})
	t.Cleanup(s.Close)
	c := stripe.New(s.URL, "sk_test_123", 2)
	got, err := c.Find(context.Background(), refund.Payment{Charge: "ch_m"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(seeds) {
		t.Fatalf("%d refunds, want %d", len(got), len(seeds))
	}
	for i, r := range got {
		if want := strconv.Itoa(len(seeds) - 1 - i); r.Metadata[refund.MetaItem] != want {
			t.Fatalf("refund %d is item %s, want %s (newest first)", i, r.Metadata[refund.MetaItem], want)
		}
	}
	if n, l := s.Calls(simtest.GetCharge), s.Calls(simtest.List); n != 1 || l != 1 {
		t.Fatalf("%d charge reads and %d refund lists, want 1 and 1", n, l)
	}
}
