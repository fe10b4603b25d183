package refund_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/refund/sim/stripesim/simtest"
)

// appendCounter counts the Append calls a run makes of its checkpoint.
type appendCounter struct {
	refund.Checkpoint
	n *int
}

func (c appendCounter) Append(recs ...*journal.Record) error {
	*c.n++
	return c.Checkpoint.Append(recs...)
}

// TestDryRunLooksUpAndSaysWhatTheRunWouldDo: a dry run that is not
// offline looks up every item the journal does not settle, as the real
// run would, by reads alone, and says per item what the real run then
// does; it creates nothing and never appends to its checkpoint. The real
// run afterwards does what it said.
func TestDryRunLooksUpAndSaysWhatTheRunWouldDo(t *testing.T) {
	s := newSim(t, 6, stripesim.Faults{})
	path := filepath.Join(t.TempDir(), "j.jsonl")
	if o := run(t, s, path, planLines("b1", 1, 0), runOpts{}); o.err != nil {
		t.Fatal(o.err)
	}
	// i2: in doubt, its refund made; i3: in doubt, nothing made; i4: never
	// tried; i5: another batch refunded its charge; i6: journaled pending,
	// succeeded since.
	now := time.Now()
	refundDirect(t, s, "b1", "i2", "ch_sim0000002", 1)
	appendIntent(t, path, "b1", "i2", "ch_sim0000002", 1, now)
	appendIntent(t, path, "b1", "i3", "ch_sim0000003", 1, now)
	refundDirect(t, s, "b0", "x5", "ch_sim0000005", 1)
	pending := refundDirect(t, s, "b1", "i6", "ch_sim0000006", 1)
	appendIntent(t, path, "b1", "i6", "ch_sim0000006", 1, now)
	var charge6 int64
	for _, r := range s.Refunds() {
		if r.ID == pending {
			charge6 = r.Amount
		}
	}
	appendRecord(t, path, &journal.Record{V: journal.Version, Type: journal.TypeRefunded, Time: now, Batch: "b1", Item: "i6",
		Charge: "ch_sim0000006", Attempt: 1, Key: refund.IdempotencyKey("b1", "i6", 1), Refund: pending, Amount: charge6, Currency: "usd",
		Status: refund.RefundPending, Source: journal.SourceAPI})
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	creates := s.Creates()
	cancels := s.Calls(simtest.Cancel)
	plan := planLines("b1", 6, 0)

	appends := 0
	o := run(t, s, path, plan, runOpts{dryRun: true, cfg: func(c *refund.Config) {
		c.Checkpoint = appendCounter{c.Checkpoint, &appends}
	}})
	if o.err != nil {
		t.Fatal(o.err)
	}
	want := map[string]string{
		"i1": refund.StatusSkipped, "i2": refund.StatusWouldAdopt, "i3": refund.StatusWould,
		"i4": refund.StatusWould, "i5": refund.StatusWouldHold, "i6": refund.StatusWouldAdopt,
	}
	for item, st := range want {
		if r := o.results[item]; r.Status != st {
			t.Errorf("item %s: %s (%s: %s), want %s", item, r.Status, r.Code, r.Message, st)
		}
	}
	if r := o.results["i3"]; r.Attempt != 1 || !strings.Contains(r.Message, "same key, refundkit:b1:i3:1") {
		t.Errorf("i3, in doubt and not found: %+v; want a resend under its key", r)
	}
	if r := o.results["i4"]; r.Amount <= 0 || r.Currency != "usd" {
		t.Errorf("i4, a full refund: %+v; want the charge's amount and currency", r)
	}
	if r := o.results["i5"]; r.Code != refund.CodeRefundedByOtherBatch {
		t.Errorf("i5: code %q, want %s", r.Code, refund.CodeRefundedByOtherBatch)
	}
	if n := s.Creates() - creates; n != 0 {
		t.Errorf("dry run made %d creates", n)
	}
	if n := s.Calls(simtest.Cancel) - cancels; n != 0 {
		t.Errorf("dry run made %d cancels", n)
	}
	if appends != 0 {
		t.Errorf("dry run appended to its checkpoint %d times", appends)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
		t.Errorf("dry run changed the journal")
	}
	sum := o.summary
	if sum.Dry != refund.DryLookup || sum.ByStatus[refund.StatusWould] != 2 || sum.ByStatus[refund.StatusWouldAdopt] != 2 || sum.ByStatus[refund.StatusWouldHold] != 1 {
		t.Errorf("summary: %s", &sum)
	}
	if sum.WouldRefund["usd"] != o.results["i3"].Amount+o.results["i4"].Amount || sum.WouldAdopt["usd"] != o.results["i2"].Amount+charge6 {
		t.Errorf("summary's amounts: %s", &sum)
	}

	// The real run does what the dry run said.
	real := run(t, s, path, plan, runOpts{})
	if real.err != nil {
		t.Fatal(real.err)
	}
	wantReal := map[string]string{"i1": refund.StatusSkipped, "i2": refund.StatusRefunded, "i3": refund.StatusRefunded,
		"i4": refund.StatusRefunded, "i5": refund.StatusFailed, "i6": refund.StatusRefunded}
	for item, st := range wantReal {
		if r := real.results[item]; r.Status != st {
			t.Errorf("real run: item %s: %s (%s: %s), want %s", item, r.Status, r.Code, r.Message, st)
		}
	}
	if n := s.Creates() - creates; n != 2 {
		t.Errorf("real run made %d creates, want the 2 the dry run said (i3, i4)", n)
	}
	if got, want := real.results["i4"].Amount, o.results["i4"].Amount; got != want {
		t.Errorf("i4 refunded %d, the dry run said %d", got, want)
	}
}

// TestDryRunStatuses: a dry run's results say what the real run would do
// or what the journal holds, never that something happened now.
func TestDryRunStatuses(t *testing.T) {
	s := newSim(t, 3, stripesim.Faults{})
	path := filepath.Join(t.TempDir(), "j.jsonl")
	refundDirect(t, s, "other", "x", "ch_sim0000001", 1)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	plan := planLines("b1", 3, 0) + `{"batch":"b1","item":"i9","charge":"ch_nosuch000009","amount":5}` + "\n"
	o := run(t, s, path, plan, runOpts{dryRun: true})
	if o.err != nil {
		t.Fatal(o.err)
	}
	allowed := map[string]bool{refund.StatusSkipped: true, refund.StatusInDoubt: true, refund.StatusPending: true,
		refund.StatusWould: true, refund.StatusWouldAdopt: true, refund.StatusWouldHold: true, refund.StatusWouldFail: true}
	for _, r := range o.results {
		if !allowed[r.Status] {
			t.Errorf("item %s: status %s in a dry run", r.Item, r.Status)
		}
	}
	if r := o.results["i9"]; r.Status != refund.StatusWouldFail || r.Code != "resource_missing" {
		t.Errorf("i9, an unknown charge: %+v; want would_fail resource_missing", r)
	}
	if r := o.results["i1"]; r.Status != refund.StatusWouldHold {
		t.Errorf("i1: %+v; want would_hold", r)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 0 {
		t.Errorf("dry run wrote the journal: %v", err)
	}
}
