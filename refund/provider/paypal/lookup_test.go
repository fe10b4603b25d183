package paypal

// The look-up through the engine: what the operator may do that the
// journal cannot see (a new batch name, a lost journal, refunds made by
// hand, captures whose refunds PayPal cannot list) refunds no capture twice.

import (
	"path/filepath"
	"testing"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/sim/paypalsim"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
)

// heldUnattributed is the code of an item held for a refund whose maker
// PayPal cannot show.
const heldUnattributed = refund.CodeRefundedUnattributed

// twoOnOne are captures refunded in full, the first in two parts.
func twoOnOne() ([]paypalsim.Capture, []planItem) {
	cs, items := usdCaptures(4)
	items[0] = planItem{"i1", "CAPE2E1", 1050, "usd"}
	return cs, append(items, planItem{"i1-part2", "CAPE2E1", 0, ""})
}

// TestEngineNewBatchNameRefundsNothingMore: the same captures planned
// again under a new batch name are held (refunded_by_other_batch): the
// look-up finds the first batch's refunds, and nothing is sent.
func TestEngineNewBatchNameRefundsNothingMore(t *testing.T) {
	cs, items := twoOnOne()
	e := newE2E(t, stripesim.Faults{}, cs...)
	e.mustRun(planOf(items...))
	before := len(e.sim.PayPal().Refunds())
	e.sim.Reset()
	res, err := e.run(planIn("pp-e2e-again", items...), runOpts{})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		if r := res[it.item]; r.Status != refund.StatusFailed || r.Code != refund.CodeRefundedByOtherBatch {
			t.Errorf("%s under a new batch name: %+v, want held, %s", it.item, r, refund.CodeRefundedByOtherBatch)
		}
	}
	if n, after := e.sim.PayPalCreates(), len(e.sim.PayPal().Refunds()); n != 0 || after != before {
		t.Errorf("%d refund requests, %d refunds (was %d): want none sent", n, after, before)
	}
}

// TestEngineLostJournalAdopts: a rerun with a new journal (the first one
// lost) finds each item's refund through the capture's order and adopts
// it (found), two parts of one capture included; nothing is sent.
func TestEngineLostJournalAdopts(t *testing.T) {
	cs, items := twoOnOne()
	e := newE2E(t, stripesim.Faults{}, cs...)
	first := e.mustRun(planOf(items...))
	e.journal = filepath.Join(t.TempDir(), "restored.jsonl")
	e.sim.Reset()
	res := e.mustRun(planOf(items...))
	for _, it := range items {
		was, r := first[it.item], res[it.item]
		if r.Status != refund.StatusRefunded || !r.Found || r.Refund != was.Refund || r.Amount != was.Amount || r.Attempt != 1 {
			t.Errorf("%s with a new journal: %+v, want %s adopted (found)", it.item, r, was.Refund)
		}
	}
	e.exactlyOnce(items, res, map[string]int64{"i1-part2": 5000 - 1050})
	if n := e.sim.PayPalCreates(); n != 0 {
		t.Errorf("%d refund requests, want none", n)
	}
}

// TestEngineRefundedByHand: a refund made by hand (no custom_id) is
// outside refundkit: --all-refunds holds the item
// (refunded_outside_refundkit); without it the rest of the capture is
// refunded, as the plan says.
func TestEngineRefundedByHand(t *testing.T) {
	hand := paypalsim.Capture{ID: "CAPHAND", Currency: "USD", Amount: 5000, Refunds: []paypalsim.SeedRefund{{Amount: 1000}}}
	e := newE2E(t, stripesim.Faults{}, hand)
	items := []planItem{{"h", "CAPHAND", 1000, "usd"}}
	res, err := e.run(planOf(items...), runOpts{allRefunds: true})
	if err != nil {
		t.Fatal(err)
	}
	if r := res["h"]; r.Status != refund.StatusFailed || r.Code != refund.CodeRefundedOutside {
		t.Errorf("with --all-refunds: %+v, want held, %s", r, refund.CodeRefundedOutside)
	}
	if n := e.sim.PayPalCreates(); n != 0 {
		t.Fatalf("%d refund requests, want none", n)
	}
	items[0].item = "h2"
	if r := e.mustRun(planOf(items...))["h2"]; r.Status != refund.StatusRefunded || r.Found {
		t.Errorf("without: %+v, want refunded now", r)
	}
	if c, _ := e.sim.PayPal().Capture("CAPHAND"); c.Refunded != 2000 {
		t.Errorf("capture %+v, want 2000 refunded", c)
	}
}

// TestEngineNoOrderCapture: a capture not made through an order cannot
// have its refunds listed. Partially refunded (here by this very item, as
// a lost journal would leave it), its item is held; never refunded, its
// item is refunded.
func TestEngineNoOrderCapture(t *testing.T) {
	e := newE2E(t, stripesim.Faults{},
		paypalsim.Capture{ID: "CAPPART", Currency: "USD", Amount: 5000, NoOrder: true,
			Refunds: []paypalsim.SeedRefund{{Amount: 2000, CustomID: customID(e2eBatch, "p", 1)}}},
		paypalsim.Capture{ID: "CAPFRESH", Currency: "USD", Amount: 5000, NoOrder: true})
	res := e.mustRun(planOf(planItem{"p", "CAPPART", 2000, "usd"}, planItem{"f", "CAPFRESH", 0, ""}))
	if r := res["p"]; r.Status != refund.StatusFailed || r.Code != heldUnattributed {
		t.Errorf("partially refunded, no order: %+v, want held, %s", r, heldUnattributed)
	}
	if r := res["f"]; r.Status != refund.StatusRefunded || r.Amount != 5000 {
		t.Errorf("never refunded, no order: %+v, want refunded", r)
	}
	if n := e.sim.PayPalCreates(); n != 1 {
		t.Errorf("%d refund requests, want 1 (CAPFRESH's)", n)
	}
	if c, _ := e.sim.PayPal().Capture("CAPPART"); c.Refunded != 2000 {
		t.Errorf("CAPPART %+v: refunded again", c)
	}
}
