package audit_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/audit"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/refund/sim/stripesim/simtest"
)

// Which refund is an item's: the one whose metadata names it, always; one
// without metadata only when it is exactly what the item asked for and
// nothing else could be.

func meta(batch, item string) map[string]string {
	return map[string]string{refund.MetaBatch: batch, refund.MetaItem: item, refund.MetaAttempt: "1"}
}

// fullPlan is item i1 of batch b1: a full refund of ch_a1.
const fullPlan = `{"batch":"b1","item":"i1","charge":"ch_a1","currency":"usd"}` + "\n"

func offlineFile(t *testing.T, plan, path string) []*audit.Finding {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := runOffline(t, plan, string(data))
	return got
}

// A goodwill refund of 100 on a 500 charge is not the full refund the
// batch plans: backfilling it would make refund skip the item for good.
func TestAuditDoesNotCreditAnUnrelatedRefundToAFullRefundItem(t *testing.T) {
	s := newSim(t, []stripesim.Charge{{ID: "ch_a1", Currency: "usd", Amount: 500, Refunds: []stripesim.SeedRefund{{Amount: 100}}}})
	goodwill := s.Refunds()[0].ID
	path := filepath.Join(t.TempDir(), "j.jsonl")

	got, rep := mustAudit(t, s, stripeAudit{plan: fullPlan, journal: path, allRefunds: true, backfill: true})
	wantFindings(t, "audit --all-refunds --backfill", got, "missing i1", "stripe_only @ch_a1")
	un := find(got, audit.KindStripeOnly, "")
	if rep.Backfilled != 0 || un.Refunds[0].ID != goodwill || un.Refunds[0].Action != audit.ActionUnattributed ||
		!strings.Contains(un.Remedy, "a person decides whether it refunded an item of the batch") {
		t.Fatalf("backfilled %d; unattributed finding %+v", rep.Backfilled, un)
	}

	// refund then refunds the item: the rest of the charge.
	s.Reset()
	if res := refundRun(t, s, path, fullPlan); res["i1"].Status != refund.StatusRefunded || s.Creates() != 1 {
		t.Fatalf("refund after audit: %+v, %d creates; want i1 refunded by one call", res["i1"], s.Creates())
	}
	got, _ = mustAudit(t, s, stripeAudit{plan: fullPlan, journal: path, allRefunds: true, backfill: true})
	wantFindings(t, "audit --all-refunds after refund", got, "stripe_only @ch_a1")
	if un := got[0]; !strings.Contains(un.Remedy, "every item planned on this charge already has its refund") {
		t.Errorf("unattributed remedy %q", un.Remedy)
	}
	got, _ = mustAudit(t, s, stripeAudit{plan: fullPlan, journal: path})
	wantFindings(t, "audit after refund", got)
	wantFindings(t, "offline audit after refund", offlineFile(t, fullPlan, path))
}

// A refund without metadata that is exactly the full refund planned (the
// charge's whole amount) is the item's, and is backfilled as its.
func TestAuditCreditsAnExactFullRefundWithoutMetadata(t *testing.T) {
	s := newSim(t, []stripesim.Charge{{ID: "ch_a1", Currency: "usd", Amount: 500, Refunds: []stripesim.SeedRefund{{Amount: 500}}}})
	path := filepath.Join(t.TempDir(), "j.jsonl")
	got, rep := mustAudit(t, s, stripeAudit{plan: fullPlan, journal: path, allRefunds: true, backfill: true})
	wantFindings(t, "audit --all-refunds --backfill", got, "stripe_only i1")
	// One read: the charge with its refunds, its amount kept for the check.
	if rep.Backfilled != 1 || s.Calls(simtest.GetCharge) != 1 || s.Calls(simtest.List) != 0 || rep.ListCalls() != 1 || rep.ChargeCalls() != 0 {
		t.Fatalf("backfilled %d, %d charge reads, %d refund lists (report %d lists, %d charge calls); want 1, 1, 0, 1 and 0", rep.Backfilled, s.Calls(simtest.GetCharge), s.Calls(simtest.List), rep.ListCalls(), rep.ChargeCalls())
	}
	got, _ = mustAudit(t, s, stripeAudit{plan: fullPlan, journal: path, allRefunds: true})
	wantFindings(t, "audit after backfill", got)
	wantFindings(t, "offline audit after backfill", offlineFile(t, fullPlan, path))
}

// The batch's own refund is kept, whatever a refund without metadata on
// the charge is: never canceled for it, never called the extra.
func TestCancelExtrasKeepsTheRefundWhoseMetadataNamesTheItem(t *testing.T) {
	for _, status := range []string{"requires_action", "succeeded"} {
		t.Run(status, func(t *testing.T) {
			s := newSim(t, []stripesim.Charge{{ID: "ch_a1", Currency: "usd", Amount: 500, Refunds: []stripesim.SeedRefund{
				{Amount: 100}, // goodwill, by hand
				{Amount: 400, Status: status, Metadata: meta("b1", "i1")},
			}}})
			own := s.Refunds()[1].ID
			path := filepath.Join(t.TempDir(), "j.jsonl")
			got, rep := mustAudit(t, s, stripeAudit{plan: fullPlan, journal: path, allRefunds: true, backfill: true, cancel: true})
			wantFindings(t, "audit --all-refunds --backfill --cancel-extras", got, "stripe_only i1", "stripe_only @ch_a1")
			if f := find(got, audit.KindStripeOnly, "i1"); f.Refunds[0].ID != own || f.Refunds[0].Action != audit.ActionBackfilled {
				t.Errorf("i1: %+v, want its own refund %s backfilled", f, own)
			}
			if s.Calls(simtest.Cancel) != 0 || s.refundByID(t, own).Status != status || rep.Irreversible != 0 || rep.Canceled != 0 {
				t.Fatalf("%d cancels, own refund %s, %d irreversible: want the own refund kept as it was", s.Calls(simtest.Cancel), s.refundByID(t, own).Status, rep.Irreversible)
			}
			state, _, err := journal.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if st, _ := state.Lookup("b1", "i1"); st.Refund != own {
				t.Errorf("journal: %+v, want i1 refunded by %s", st, own)
			}
		})
	}
}

// Two refunds without metadata that both match the item: neither is
// known to be its, and neither is backfilled.
func TestAuditLeavesTwoMatchingRefundsWithoutMetadataToAPerson(t *testing.T) {
	s := newSim(t, charges(1, map[int][]stripesim.SeedRefund{1: {{Amount: 500}, {Amount: 500, Status: "requires_action"}}}))
	path := filepath.Join(t.TempDir(), "j.jsonl")
	got, rep := mustAudit(t, s, stripeAudit{plan: plan(1), journal: path, allRefunds: true, backfill: true, cancel: true})
	wantFindings(t, "audit", got, "missing i1", "stripe_only @ch_a1", "stripe_only @ch_a1")
	if rep.Backfilled != 0 || s.Calls(simtest.Cancel) != 0 || !strings.Contains(got[1].Remedy, "item i1 matches it and also") ||
		!strings.Contains(got[0].Remedy, "but careful") {
		t.Fatalf("backfilled %d, %d cancels; findings %+v %+v", rep.Backfilled, s.Calls(simtest.Cancel), got[0], got[1])
	}
}

// A journal whose earlier backfill credited the item with an unrelated
// refund: refund skips the item, so audit says it plainly.
func TestAuditReportsAJournalCreditingAnUnrelatedRefund(t *testing.T) {
	s := newSim(t, []stripesim.Charge{{ID: "ch_a1", Currency: "usd", Amount: 500, Refunds: []stripesim.SeedRefund{{Amount: 100}}}})
	goodwill := s.Refunds()[0].ID
	path := filepath.Join(t.TempDir(), "j.jsonl")
	rec := refunded("i1", "ch_a1", goodwill, 100)
	rec.Source = journal.SourceBackfill
	if err := os.WriteFile(path, []byte(jl(t, rec)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, all := range []bool{false, true} {
		got, _ := mustAudit(t, s, stripeAudit{plan: fullPlan, journal: path, allRefunds: all})
		wantFindings(t, "audit", got, "conflict i1")
		if f := got[0]; f.Refunds[0].ID != goodwill || !strings.Contains(f.Message, "not what the item asked for (a full refund of the 5.00 USD charge)") ||
			!strings.Contains(f.Remedy, "a person decides whether "+goodwill+" refunded this item") {
			t.Errorf("conflict %+v", f)
		}
	}
}

// Following audit's advice ends: a journal lost, the rerun refused by
// Stripe for good (the charge was refunded), audit backfills the refund,
// and every audit after that is clean.
func TestAuditAdviceAfterALostJournalEndsClean(t *testing.T) {
	s := newSim(t, []stripesim.Charge{{ID: "ch_a1", Currency: "usd", Amount: 500, Refunds: []stripesim.SeedRefund{{Amount: 500, Metadata: meta("b1", "i1")}}}})
	own := s.Refunds()[0].ID
	path := filepath.Join(t.TempDir(), "j.jsonl")
	in := intent("i1", "ch_a1", 2)
	fail := failed("i1", "ch_a1", "charge_already_refunded", true)
	fail.Attempt = 2
	if err := os.WriteFile(path, []byte(jl(t, in, fail)), 0o600); err != nil {
		t.Fatal(err)
	}
	got, _ := mustAudit(t, s, stripeAudit{plan: fullPlan, journal: path})
	wantFindings(t, "audit", got, "stripe_only i1")
	if !strings.Contains(got[0].Remedy, "--backfill") {
		t.Fatalf("remedy %q does not say --backfill", got[0].Remedy)
	}
	got, rep := mustAudit(t, s, stripeAudit{plan: fullPlan, journal: path, backfill: true})
	wantFindings(t, "audit --backfill", got, "stripe_only i1")
	if rep.Backfilled != 1 || got[0].Refunds[0].ID != own {
		t.Fatalf("backfilled %d: %+v", rep.Backfilled, got[0])
	}
	got, _ = mustAudit(t, s, stripeAudit{plan: fullPlan, journal: path})
	wantFindings(t, "audit after backfill", got)
	wantFindings(t, "offline audit after backfill", offlineFile(t, fullPlan, path))
}

// A refunded item whose later call failed for good (a second run without
// the journal): offline it is a conflict whose advice is audit --stripe;
// that audit finds the refund live and says nothing of it, and with
// --backfill journals it again so the offline audit agrees.
func TestAuditOfAFailureAfterARefundEndsClean(t *testing.T) {
	s := newSim(t, []stripesim.Charge{{ID: "ch_a1", Currency: "usd", Amount: 500, Refunds: []stripesim.SeedRefund{{Amount: 500, Metadata: meta("b1", "i1")}}}})
	own := s.Refunds()[0].ID
	dir := t.TempDir()
	path, copied := filepath.Join(dir, "j.jsonl"), filepath.Join(dir, "copy.jsonl")
	text := []byte(jl(t, cat(done("i1", "ch_a1", own, 500), one(failed("i1", "ch_a1", "charge_already_refunded", true)))...))
	for _, p := range []string{path, copied} {
		if err := os.WriteFile(p, text, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got := offlineFile(t, fullPlan, path)
	wantFindings(t, "offline audit", got, "conflict i1")
	if !strings.Contains(got[0].Remedy, "run audit --stripe") {
		t.Fatalf("remedy %q", got[0].Remedy)
	}
	got, _ = mustAudit(t, s, stripeAudit{plan: fullPlan, journal: path})
	wantFindings(t, "audit --stripe", got)
	got, rep := mustAudit(t, s, stripeAudit{plan: fullPlan, journal: path, backfill: true})
	wantFindings(t, "audit --stripe --backfill", got)
	if rep.Backfilled != 1 {
		t.Errorf("backfilled %d, want the refund journaled again after the failure", rep.Backfilled)
	}
	wantFindings(t, "offline audit after backfill", offlineFile(t, fullPlan, path))

	// Stripe has no live refund: the conflict stands, and says so.
	s2 := newSim(t, charges(1, nil))
	got, _ = mustAudit(t, s2, stripeAudit{plan: fullPlan, journal: copied, backfill: true})
	wantFindings(t, "audit --stripe, refund unknown to Stripe", got, "journal_only i1", "conflict i1")
	if !strings.Contains(got[1].Remedy, "Stripe has no live refund for this item") {
		t.Errorf("conflict remedy %q", got[1].Remedy)
	}
}
