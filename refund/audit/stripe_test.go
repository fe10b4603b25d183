package audit_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/audit"
	"github.com/refundkit/refundkit/refund/provider/stripe"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/refund/sim/stripesim/simtest"
)

const testKey = "sk_test_audit"

// sim is the Stripe simulator for a test; its calls are counted by the
// simulator's own Stats.
type sim struct{ *simtest.Sim }

func newSim(t *testing.T, charges []stripesim.Charge) *sim {
	t.Helper()
	return &sim{simtest.Start(t, stripesim.Config{Charges: charges, Seed: 3})}
}

func (s *sim) refundByID(t *testing.T, id string) stripesim.Refund {
	t.Helper()
	for _, r := range s.Refunds() {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("the simulator has no refund %s", id)
	return stripesim.Refund{}
}

// charges makes n usd charges ch_a1... of 2000 each, with seeded refunds.
func charges(n int, seeded map[int][]stripesim.SeedRefund) []stripesim.Charge {
	out := make([]stripesim.Charge, n)
	for i := range out {
		out[i] = stripesim.Charge{ID: fmt.Sprintf("ch_a%d", i+1), PaymentIntent: fmt.Sprintf("pi_a%d", i+1), Currency: "usd", Amount: 2000, Refunds: seeded[i+1]}
	}
	return out
}

// plan is n items i1... of batch b1, 500 each, on charges ch_a1...
func plan(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, `{"batch":"b1","item":"i%d","charge":"ch_a%d","amount":500,"currency":"usd"}`+"\n", i, i)
	}
	return b.String()
}

// refundRun runs refund over plan with the journal at path.
func refundRun(t *testing.T, s *sim, path, plan string) map[string]refund.Result {
	t.Helper()
	w, state, _, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var mu sync.Mutex
	results := map[string]refund.Result{}
	_, err = refund.Run(context.Background(), refund.Config{
		Provider: stripe.New(s.URL, testKey, 4), Checkpoint: refund.Journal(w, state), Workers: 4,
		Backoff:  refund.Backoff{Base: time.Millisecond, Max: 5 * time.Millisecond},
		OnResult: func(r refund.Result) { mu.Lock(); results[r.Item] = r; mu.Unlock() },
	}, strings.NewReader(plan), "plan.jsonl")
	if err != nil {
		t.Fatalf("refund run: %v", err)
	}
	return results
}

type stripeAudit struct {
	plan       string
	journal    string // path; created if absent when it is written to
	allRefunds bool
	backfill   bool // into the journal
	cancel     bool // cancels journaled in the journal
	key        string
	workers    int                                   // lists in flight (default 3)
	provider   func(refund.Provider) refund.Provider // wraps the simulator's provider
	told       []refund.Refund                       // what the provider's kept events tell (Options.Told)
}

// auditStripe audits the journal at o.journal against the simulator, as
// audit --stripe does.
func auditStripe(t *testing.T, s *sim, o stripeAudit) ([]*audit.Finding, *audit.Report, error) {
	t.Helper()
	a := audit.New()
	if o.plan != "" {
		if err := a.AddPlan(strings.NewReader(o.plan), "plan.jsonl"); err != nil {
			t.Fatal(err)
		}
	}
	opts := audit.Options{AllRefunds: o.allRefunds, CancelExtras: o.cancel, Workers: cmp.Or(o.workers, 3),
		Retry: refund.Backoff{Base: time.Millisecond, Max: 5 * time.Millisecond}, Told: o.told}
	if o.backfill || o.cancel {
		w, _, _, err := journal.Open(o.journal, journal.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		opts.Actions = w
		if o.backfill {
			opts.Backfill = w
		}
	}
	if f, err := os.Open(o.journal); err == nil {
		_, err := a.AddJournal(f, o.journal)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if o.key == "" {
		o.key = testKey
	}
	opts.Provider = stripe.New(s.URL, o.key, 3)
	if o.provider != nil {
		opts.Provider = o.provider(opts.Provider)
	}
	var got []*audit.Finding
	rep, err := a.Run(context.Background(), opts, func(f *audit.Finding) { got = append(got, f) })
	return got, rep, err
}

func mustAudit(t *testing.T, s *sim, o stripeAudit) ([]*audit.Finding, *audit.Report) {
	t.Helper()
	got, rep, err := auditStripe(t, s, o)
	if err != nil {
		t.Fatalf("audit: %v", err)
	}
	return got, rep
}

func wantFindings(t *testing.T, step string, got []*audit.Finding, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if s := summary(got); !slices.Equal(s, want) {
		t.Fatalf("%s: findings %q, want %q", step, s, want)
	}
}

func find(fs []*audit.Finding, kind, item string) *audit.Finding {
	for _, f := range fs {
		if f.Finding == kind && f.Item == item {
			return f
		}
	}
	return nil
}

func actions(f *audit.Finding) string {
	var out []string
	for _, r := range f.Refunds {
		out = append(out, r.Status+":"+r.Action)
	}
	return strings.Join(out, " ")
}

func TestStripeAuditOfACleanRunMakesOnlyListCalls(t *testing.T) {
	s := newSim(t, charges(5, nil))
	path := filepath.Join(t.TempDir(), "j.jsonl")
	refundRun(t, s, path, plan(5))
	s.Reset()
	got, rep := mustAudit(t, s, stripeAudit{plan: plan(5), journal: path, allRefunds: true})
	wantFindings(t, "audit", got)
	if s.Lists() != 5 || s.Creates() != 0 || s.Calls(simtest.Cancel) != 0 || rep.ListCalls() != 5 {
		t.Errorf("calls: %d lists (report %d), %d creates, %d cancels; want 5 lists only", s.Lists(), rep.ListCalls(), s.Creates(), s.Calls(simtest.Cancel))
	}
	if !rep.Clean() || rep.ByStatus["refunded"] != 5 || rep.Amounts["refunded"]["usd"] != 2500 {
		t.Errorf("report %+v", rep)
	}
}

// TestAuditFinishesAnUncheckpointedOldRun is the recovery of a batch an old
// script half did without a journal or metadata: audit backfills the
// refunds that are exactly what an item asked for, leaves the others to a
// person, and refund does only the rest.
func TestAuditFinishesAnUncheckpointedOldRun(t *testing.T) {
	old := func(status string) stripesim.SeedRefund { return stripesim.SeedRefund{Amount: 500, Status: status} }
	s := newSim(t, charges(6, map[int][]stripesim.SeedRefund{
		1: {old("succeeded")},
		2: {old("succeeded")},
		3: {old("succeeded"), old("requires_action")}, // the script refunded i3 twice
		4: {old("succeeded"), old("succeeded")},       // and i4 twice, for good
	}))
	ids := map[string][]string{} // charge -> seeded refund ids, oldest first
	for _, r := range s.Refunds() {
		ids[r.Charge] = append(ids[r.Charge], r.ID)
	}
	path := filepath.Join(t.TempDir(), "j.jsonl")

	// Without --all-refunds the old refunds carry nothing of the batch.
	got, _ := mustAudit(t, s, stripeAudit{plan: plan(6), journal: path})
	wantFindings(t, "audit without --all-refunds", got, "missing i1", "missing i2", "missing i3", "missing i4", "missing i5", "missing i6")

	// Two refunds match i3, and two i4: which one is the item's is not
	// known, so neither is backfilled, and the missing items say so.
	got, rep := mustAudit(t, s, stripeAudit{plan: plan(6), journal: path, allRefunds: true, backfill: true})
	wantFindings(t, "audit --all-refunds --backfill", got,
		"stripe_only i1", "stripe_only i2", "missing i3", "stripe_only @ch_a3", "stripe_only @ch_a3",
		"missing i4", "stripe_only @ch_a4", "stripe_only @ch_a4", "missing i5", "missing i6")
	if rep.Backfilled != 2 || s.Creates() != 0 || s.Calls(simtest.Cancel) != 0 {
		t.Fatalf("backfilled %d, %d creates, %d cancels; want 2 backfilled and no call but lists", rep.Backfilled, s.Creates(), s.Calls(simtest.Cancel))
	}
	if f := find(got, audit.KindStripeOnly, "i1"); f.Refunds[0].ID != ids["ch_a1"][0] || f.Refunds[0].Action != audit.ActionBackfilled {
		t.Errorf("i1 stripe_only %+v", f)
	}
	if f := find(got, audit.KindMissing, "i3"); !strings.Contains(f.Remedy, "but careful") || !strings.Contains(f.Remedy, ids["ch_a3"][1]+" (no metadata)") {
		t.Errorf("i3 missing remedy %q does not warn of the refunds on its charge", f.Remedy)
	}
	for _, f := range got {
		if f.Finding == audit.KindStripeOnly && f.Item == "" && !strings.Contains(f.Remedy, "matches it and also") {
			t.Errorf("unattributed %s: remedy %q", f.Refunds[0].ID, f.Remedy)
		}
	}

	// A person cancels i3's second refund in the dashboard: the one left
	// is i3's.
	if _, err := stripe.New(s.URL, testKey, 1).Cancel(context.Background(), ids["ch_a3"][1]); err != nil {
		t.Fatal(err)
	}
	got, rep = mustAudit(t, s, stripeAudit{plan: plan(6), journal: path, allRefunds: true, backfill: true})
	wantFindings(t, "audit after the cancel", got,
		"stripe_only i3", "missing i4", "stripe_only @ch_a4", "stripe_only @ch_a4", "missing i5", "missing i6")
	if f := find(got, audit.KindStripeOnly, "i3"); rep.Backfilled != 1 || f.Refunds[0].ID != ids["ch_a3"][0] {
		t.Errorf("i3 stripe_only %+v, %d backfilled", f, rep.Backfilled)
	}

	// And decides that i4, refunded twice, is done: the plan drops it.
	// refund does only i5 and i6.
	var rest []string
	for _, l := range strings.SplitAfter(plan(6), "\n") {
		if !strings.Contains(l, `"i4"`) {
			rest = append(rest, l)
		}
	}
	plan5 := strings.Join(rest, "")
	s.Reset()
	results := refundRun(t, s, path, plan5)
	if s.Creates() != 2 {
		t.Fatalf("refund after backfill: %d creates; want 2 (i5, i6)", s.Creates())
	}
	for item, want := range map[string]string{"i1": refund.StatusSkipped, "i3": refund.StatusSkipped, "i5": refund.StatusRefunded, "i6": refund.StatusRefunded} {
		if results[item].Status != want {
			t.Errorf("%s: %s, want %s", item, results[item].Status, want)
		}
	}
	got, _ = mustAudit(t, s, stripeAudit{plan: plan5, journal: path, allRefunds: true})
	wantFindings(t, "audit after refund", got)
	wantFindings(t, "offline audit after refund", offlineFile(t, plan5, path))
}

func TestAuditCancelsARequiresActionExtraAndJournalsIt(t *testing.T) {
	s := newSim(t, charges(3, nil))
	path := filepath.Join(t.TempDir(), "j.jsonl")
	refundRun(t, s, path, plan(3))
	// A second run with a lost journal refunded i2 again, under a new key;
	// that refund still requires action.
	if err := s.SetFaults(stripesim.Faults{RequiresActionShare: 1}); err != nil {
		t.Fatal(err)
	}
	it := &refund.Item{Batch: "b1", Item: "i2", Charge: "ch_a2", Amount: 500}
	extra, err := stripe.New(s.URL, testKey, 1).Create(context.Background(), it, 2)
	if err != nil || extra.Status != "requires_action" {
		t.Fatalf("extra refund: %v %v", extra, err)
	}

	got, rep := mustAudit(t, s, stripeAudit{plan: plan(3), journal: path})
	wantFindings(t, "audit", got, "duplicate i2", "stripe_only i2")
	if f := find(got, audit.KindDuplicate, "i2"); actions(f) != "succeeded:keep requires_action:cancelable" || !strings.Contains(f.Remedy, "--cancel-extras") {
		t.Errorf("duplicate %s, remedy %q", actions(f), f.Remedy)
	}
	if rep.Cancelable != 1 || rep.Irreversible != 0 {
		t.Errorf("report: %d cancelable, %d irreversible", rep.Cancelable, rep.Irreversible)
	}

	got, rep = mustAudit(t, s, stripeAudit{plan: plan(3), journal: path, cancel: true})
	wantFindings(t, "audit --cancel-extras", got, "duplicate i2")
	if rep.Canceled != 1 || s.refundByID(t, extra.ID).Status != "canceled" {
		t.Fatalf("canceled %d; extra is %s", rep.Canceled, s.refundByID(t, extra.ID).Status)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`"type":"canceled",`)
	var line string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, want) {
			line = l
		}
	}
	for _, field := range []string{`"batch":"b1"`, `"item":"i2"`, `"charge":"ch_a2"`, `"attempt":2`, `"key":"refundkit:b1:i2:2"`, `"amount":500`, `"refund":"` + extra.ID + `"`, `"status":"canceled"`} {
		if !strings.Contains(line, field) {
			t.Errorf("canceled record %q lacks %s", line, field)
		}
	}
	got, _ = mustAudit(t, s, stripeAudit{plan: plan(3), journal: path})
	wantFindings(t, "audit after cancel", got)
}

func TestAuditOfInDoubtItemsAtStripe(t *testing.T) {
	s := newSim(t, charges(2, nil))
	path := filepath.Join(t.TempDir(), "j.jsonl")
	// Both items were in flight when the run died: i1's refund was made,
	// i2's was not.
	in1, in2 := intent("i1", "ch_a1", 1), intent("i2", "ch_a2", 1)
	in1.Amount, in2.Amount = 500, 500
	if err := os.WriteFile(path, []byte(jl(t, in1, in2)), 0o600); err != nil {
		t.Fatal(err)
	}
	made, err := stripe.New(s.URL, testKey, 1).Create(context.Background(), &refund.Item{Batch: "b1", Item: "i1", Charge: "ch_a1", Amount: 500}, 1)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := mustAudit(t, s, stripeAudit{plan: plan(2), journal: path, backfill: true})
	wantFindings(t, "audit --backfill", got, "stripe_only i1", "in_doubt i2")
	if f := find(got, audit.KindInDoubt, "i2"); !strings.Contains(f.Remedy, "Stripe has no refund for this item") {
		t.Errorf("in_doubt remedy %q", f.Remedy)
	}
	state, _, err := journal.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := state.Lookup("b1", "i1"); st.Status != journal.StatusRefunded || st.Refund != made.ID || st.Attempt != 1 {
		t.Errorf("i1 after backfill: %+v", st)
	}
	s.Reset()
	refundRun(t, s, path, plan(2))
	if s.Creates() != 1 || len(s.Refunds()) != 2 {
		t.Errorf("%d creates, %d refunds; want i2 refunded once and i1 left alone", s.Creates(), len(s.Refunds()))
	}
	got, _ = mustAudit(t, s, stripeAudit{plan: plan(2), journal: path})
	wantFindings(t, "audit after refund", got)
}

func TestAuditOfJournalRefundsStripeDoesNotHave(t *testing.T) {
	s := newSim(t, charges(2, map[int][]stripesim.SeedRefund{
		2: {{Amount: 500, Status: "canceled", Metadata: map[string]string{refund.MetaBatch: "b1", refund.MetaItem: "i2", refund.MetaAttempt: "1"}}},
	}))
	gone := s.Refunds()[0].ID
	path := filepath.Join(t.TempDir(), "j.jsonl")
	if err := os.WriteFile(path, []byte(jl(t, cat(done("i1", "ch_a1", "re_nosuch", 500), done("i2", "ch_a2", gone, 500))...)), 0o600); err != nil {
		t.Fatal(err)
	}
	got, _ := mustAudit(t, s, stripeAudit{journal: path})
	wantFindings(t, "audit", got, "journal_only i1", "journal_only i2")
	if f := find(got, audit.KindJournalOnly, "i2"); f.Refunds[0].Status != "canceled" || !strings.Contains(f.Remedy, "refund skips the item") {
		t.Errorf("journal_only %+v", f)
	}
}

func TestAuditOfRefundsOfOtherItemsOnACharge(t *testing.T) {
	meta := func(item string) map[string]string {
		return map[string]string{refund.MetaBatch: "b1", refund.MetaItem: item, refund.MetaAttempt: "1"}
	}
	s := newSim(t, []stripesim.Charge{
		// i1's charge also holds a refund of the batch for an item renamed
		// since (old-i1), and a refund of another batch: refunded twice.
		{ID: "ch_a1", Amount: 5000, Refunds: []stripesim.SeedRefund{{Amount: 500, Metadata: meta("i1")}, {Amount: 500, Metadata: meta("old-i1")},
			{Amount: 700, Metadata: map[string]string{refund.MetaBatch: "b0", refund.MetaItem: "x"}}}},
		// Two planned items share a charge; a refund without metadata
		// cannot be matched to either.
		{ID: "ch_a2", Amount: 5000, Refunds: []stripesim.SeedRefund{{Amount: 100}}},
	})
	p := `{"batch":"b1","item":"i1","charge":"ch_a1","amount":500}
{"batch":"b1","item":"a","charge":"ch_a2","amount":100}
{"batch":"b1","item":"b","charge":"ch_a2","amount":100}
`
	path := filepath.Join(t.TempDir(), "j.jsonl")
	got, rep := mustAudit(t, s, stripeAudit{plan: p, journal: path, allRefunds: true, backfill: true})
	wantFindings(t, "audit", got, "stripe_only i1", "stripe_only old-i1", "duplicate @ch_a1", "unowned @ch_a1", "other_batch @ch_a1", "missing a", "missing b", "stripe_only @ch_a2")
	if f := find(got, audit.KindDuplicate, ""); f.Planned != 1 || actions(f) != "succeeded: succeeded:irreversible" || f.Refunds[1].Item != "old-i1" {
		t.Errorf("charge duplicate %+v (%s)", f, actions(f))
	}
	un := got[len(got)-1]
	if un.Refunds[0].Action != audit.ActionUnattributed || !strings.Contains(un.Remedy, "2 items planned on this charge match it") {
		t.Errorf("unattributed refund finding %+v", un)
	}
	if rep.Backfilled != 2 {
		t.Errorf("backfilled %d, want i1's and old-i1's (not the unattributed one)", rep.Backfilled)
	}
}

func TestRefusedKeyStopsTheAudit(t *testing.T) {
	s := newSim(t, charges(3, nil))
	path := filepath.Join(t.TempDir(), "j.jsonl")
	refundRun(t, s, path, plan(3))
	got, _, err := auditStripe(t, s, stripeAudit{journal: path, key: "sk_live_unknownSECRET"})
	var se *audit.StripeError
	if !errors.As(err, &se) || strings.Contains(err.Error(), "SECRET") {
		t.Fatalf("error %v, want a *StripeError that does not name the key", err)
	}
	wantFindings(t, "audit", got)
}

func TestAuditRetriesStripeFaults(t *testing.T) {
	s := newSim(t, charges(4, nil))
	path := filepath.Join(t.TempDir(), "j.jsonl")
	refundRun(t, s, path, plan(4))
	if err := s.SetFaults(stripesim.Faults{RateLimitShare: 0.5}); err != nil {
		t.Fatal(err)
	}
	s.Reset()
	got, rep := mustAudit(t, s, stripeAudit{plan: plan(4), journal: path})
	wantFindings(t, "audit through 429s", got)
	if s.Lists() <= 4 || rep.ListCalls() != s.Lists() {
		t.Errorf("%d list calls (report %d): want retries past the 429s", s.Lists(), rep.ListCalls())
	}
}

// TestNoListBeginsAfterARefusedKey: with one worker, a halted audit counted
// a second list (audit_basic.txtar, flaky under load) when the worker went
// on to its next charge before the refusal was seen. Once the key is
// refused no call begins, whatever the timing.
func TestNoListBeginsAfterARefusedKey(t *testing.T) {
	s := newSim(t, charges(3, nil))
	path := filepath.Join(t.TempDir(), "j.jsonl")
	refundRun(t, s, path, plan(3))
	for range 20 {
		a := audit.New()
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.AddJournal(f, path)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		rep, err := a.Run(context.Background(), audit.Options{Provider: stripe.New(s.URL, "sk_live_unknown", 1), Workers: 1}, func(*audit.Finding) {})
		if !errors.As(err, new(*audit.StripeError)) || rep.ListCalls() != 1 {
			t.Fatalf("error %v after %d list calls, want a *StripeError after 1", err, rep.ListCalls())
		}
	}
}
