package refund_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
)

// With a full look-up (Stripe) the listing is authoritative for the
// refunds made: an item of another batch in doubt on the charge, whose
// call made nothing, does not hold a new one; one whose key holds Stripe's
// 500, which Stripe may still complete (LateOutcomes), does. With
// --no-lookup the journal alone is trusted, its other items too.
func TestOtherItemsOnTheChargeWithAFullLookup(t *testing.T) {
	s := newSim(t, 3, stripesim.Faults{})
	path := filepath.Join(t.TempDir(), "j.jsonl")
	now := time.Now()
	appendIntent(t, path, "old", "i1", "ch_sim0000001", 1, now) // no refund made: a crash before the call
	appendIntent(t, path, "old", "i2", "ch_sim0000002", 1, now)
	w, _, _, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Stripe's own 500 saved under i2's key.
	if err := w.Append(&journal.Record{V: journal.Version, Type: journal.TypeFailed, Time: now, Batch: "old", Item: "i2", Charge: "ch_sim0000002",
		Attempt: 1, HTTPStatus: journal.HTTPStatusSaved, Code: "api_error"}); err != nil {
		t.Fatal(err)
	}
	// And a refunded item of batch old on charge 3.
	if err := w.Append(&journal.Record{V: journal.Version, Type: journal.TypeRefunded, Time: now, Batch: "old", Item: "i3", Charge: "ch_sim0000003",
		Attempt: 1, Refund: "re_gone", Amount: 100, Currency: "usd", Status: "succeeded"}); err != nil {
		t.Fatal(err)
	}
	w.Close()

	o := run(t, s, path, planLines("new", 3, 100), runOpts{cfg: func(c *refund.Config) { c.NoLookup = true }})
	// --no-lookup: all three held by the journal's items of batch old.
	for _, item := range []string{"i1", "i2", "i3"} {
		if r := o.results[item]; r.Status != refund.StatusFailed || r.Code != refund.CodeRefundedByOtherBatch || !strings.Contains(r.Message, `of batch "old"`) {
			t.Errorf("--no-lookup: %s: %+v, want held by batch old", item, r)
		}
	}
	if n := s.Creates(); n != 0 {
		t.Fatalf("%d creates with --no-lookup, want 0", n)
	}

	path2 := filepath.Join(t.TempDir(), "j2.jsonl")
	appendIntent(t, path2, "old", "i1", "ch_sim0000001", 1, now)
	appendIntent(t, path2, "old", "i2", "ch_sim0000002", 1, now)
	w, _, _, err = journal.Open(path2, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Append(&journal.Record{V: journal.Version, Type: journal.TypeFailed, Time: now, Batch: "old", Item: "i2", Charge: "ch_sim0000002",
		Attempt: 1, HTTPStatus: journal.HTTPStatusSaved, Code: "api_error"}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	o = run(t, s, path2, planLines("new", 2, 100), runOpts{})
	if r := o.results["i1"]; r.Status != refund.StatusRefunded {
		t.Errorf("i1 beside an item in doubt whose call made nothing: %+v, want refunded", r)
	}
	if r := o.results["i2"]; r.Status != refund.StatusFailed || r.Code != refund.CodeRefundedByOtherBatch || !strings.Contains(r.Message, "may still complete it") {
		t.Errorf("i2 beside a 500 Stripe may still complete: %+v, want held", r)
	}
	if n := s.Creates(); n != 1 {
		t.Fatalf("%d creates, want 1 (i1)", n)
	}
}
