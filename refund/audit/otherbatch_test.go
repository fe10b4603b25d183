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
	"github.com/refundkit/refundkit/refund/provider/stripe"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
)

// inBatch sets the batch (and the key) of records.
func inBatch(batch string, recs ...journal.Record) []journal.Record {
	out := make([]journal.Record, len(recs))
	for k, r := range recs {
		r.Batch = batch
		if r.Key != "" {
			r.Key = refund.IdempotencyKey(batch, r.Item, r.Attempt)
		}
		out[k] = r
	}
	return out
}

// A plan run again under a new batch id refunds its charges again; no
// item of either batch is refunded twice, so only a look across batches
// finds it.
func TestAuditFindsAChargeRefundedByTwoBatches(t *testing.T) {
	day1 := jl(t, inBatch("day-1", cat(done("i1", "ch_1", "re_1", 500), done("i2", "ch_2", "re_2", 300))...)...)
	day2 := jl(t, inBatch("day-2", cat(done("i1", "ch_1", "re_5", 500), done("i2", "ch_2", "re_6", 300))...)...)
	for _, c := range []struct {
		name     string
		journals []string
	}{
		{"into one journal", []string{day1 + day2}},
		{"into two journals", []string{day1, day2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, rep := runOffline(t, "", c.journals...)
			wantFindings(t, "audit", got, "other_batch @ch_1", "other_batch @ch_2")
			f := got[0]
			if len(f.Refunds) != 2 || f.Refunds[0].ID != "re_1" || f.Refunds[0].Batch != "day-1" || f.Refunds[0].Item != "i1" ||
				f.Refunds[1].ID != "re_5" || f.Refunds[1].Batch != "day-2" || f.Amount != 500 || f.Currency != "usd" {
				t.Fatalf("finding %+v", f)
			}
			for _, want := range []string{"re_1 (batch day-1, item i1, 5.00 USD)", "re_5 (batch day-2, item i1, 5.00 USD)"} {
				if !strings.Contains(f.Message, want) {
					t.Errorf("message %q lacks %q", f.Message, want)
				}
			}
			for _, want := range []string{"a succeeded refund cannot be reversed through the API", "a person decides", "--allow-refunded-charges"} {
				if !strings.Contains(f.Remedy, want) {
					t.Errorf("remedy %q lacks %q", f.Remedy, want)
				}
			}
			if rep.Findings[audit.KindOtherBatch] != 2 || !strings.Contains(strings.Join(rep.Lines(), "\n"), "findings: 2 other_batch") {
				t.Errorf("report %v: %q", rep.Findings, rep.Lines())
			}
		})
	}
}

func TestAuditAcrossBatchesIsQuietWhenNothingIsRefundedTwice(t *testing.T) {
	for _, c := range []struct {
		name     string
		journals []string
		want     []string
	}{
		{"two batches, other charges", []string{jl(t, cat(inBatch("day-1", done("i1", "ch_1", "re_1", 500)...), inBatch("day-2", done("i1", "ch_2", "re_2", 500)...))...)}, nil},
		{"one batch, two items on one charge", []string{jl(t, cat(done("a", "ch_1", "re_1", 100), done("b", "ch_1", "re_2", 200))...)}, nil},
		{"the other batch's refund canceled", []string{jl(t, cat(inBatch("day-1", done("i1", "ch_1", "re_1", 500)...),
			inBatch("day-2", cat(done("i1", "ch_1", "re_2", 500), one(canceled("i1", "ch_1", "re_2", 500)))...))...)},
			[]string{"conflict i1"}}, // day-2's only refund canceled, as ever
		{"held, then allowed (--allow-refunded-charges)", []string{jl(t, cat(inBatch("day-1", done("i1", "ch_1", "re_1", 500)...),
			inBatch("day-2", intent("i1", "ch_1", 1), failed("i1", "ch_1", refund.CodeRefundedByOtherBatch, true), refunded("i1", "ch_1", "re_2", 500)))...)}, nil},
		{"one batch of three allowed", []string{jl(t, cat(inBatch("day-1", done("i1", "ch_1", "re_1", 500)...),
			inBatch("day-2", intent("i1", "ch_1", 1), failed("i1", "ch_1", refund.CodeRefundedByOtherBatch, true), refunded("i1", "ch_1", "re_2", 500)),
			inBatch("day-3", done("i1", "ch_1", "re_3", 500)...))...)}, []string{"other_batch @ch_1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, _ := runOffline(t, "", c.journals...)
			wantFindings(t, "audit", got, c.want...)
		})
	}
}

// With Stripe: the refunds of another refundkit batch on a charge of the
// audited batch, whether or not that batch's journal is audited.
func TestStripeAuditFindsAChargeRefundedByTwoBatches(t *testing.T) {
	s := newSim(t, charges(2, map[int][]stripesim.SeedRefund{1: {{Amount: 500, Metadata: meta("day-1", "i1")}}}))
	day1 := s.Refunds()[0].ID
	dir := t.TempDir()
	path := filepath.Join(dir, "day2.jsonl")
	p2 := strings.ReplaceAll(plan(2), `"b1"`, `"day-2"`)
	var recs []journal.Record
	for _, item := range []string{"i1", "i2"} {
		charge := "ch_a" + item[1:]
		made, err := stripe.New(s.URL, testKey, 1).Create(context.Background(), &refund.Item{Batch: "day-2", Item: item, Charge: charge, Amount: 500}, 1)
		if err != nil {
			t.Fatal(err)
		}
		in := intent(item, charge, 1)
		in.Amount = 500
		recs = append(recs, inBatch("day-2", in, refunded(item, charge, made.ID, 500))...)
	}
	if err := os.WriteFile(path, []byte(jl(t, recs...)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, all := range []bool{false, true} {
		got, _ := mustAudit(t, s, stripeAudit{plan: p2, journal: path, allRefunds: all})
		wantFindings(t, "audit --stripe", got, "other_batch @ch_a1")
		if f := got[0]; len(f.Refunds) != 2 || f.Refunds[0].ID != day1 || f.Refunds[0].Batch != "day-1" || f.Refunds[1].Batch != "day-2" ||
			f.Amount != 500 || !strings.Contains(f.Remedy, "cannot be reversed through the API") {
			t.Errorf("finding %+v", f)
		}
	}
}
