package refund_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/provider/stripe"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/refund/sim/stripesim/simtest"
)

const testKey = "sk_test_engine"

// sim is the Stripe simulator for a test; its calls are counted by the
// simulator's own Stats.
type sim struct{ *simtest.Sim }

func newSim(t *testing.T, charges int, faults stripesim.Faults) *sim {
	t.Helper()
	return &sim{simtest.Start(t, stripesim.Config{Charges: stripesim.GenerateCharges(charges, 1), Faults: faults, Seed: 7})}
}

// calls counts the refund creations and lists made so far.
func (s *sim) calls() int64 { return s.Calls(simtest.Create, simtest.List) }

// refundsByItem counts the live refunds at the simulator per batch/item.
func (s *sim) refundsByItem() map[string]int {
	n := map[string]int{}
	for _, r := range s.Refunds() {
		if r.Status == "canceled" || r.Status == "failed" {
			continue
		}
		n[r.Metadata[refund.MetaBatch]+"/"+r.Metadata[refund.MetaItem]]++
	}
	return n
}

func planLines(batch string, n int, amount int64) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, `{"batch":%q,"item":"i%d","charge":"ch_sim%07d"`, batch, i, i)
		if amount > 0 {
			fmt.Fprintf(&b, `,"amount":%d`, amount)
		}
		b.WriteString("}\n")
	}
	return b.String()
}

type runOpts struct {
	workers int
	now     func() time.Time
	dryRun  bool
	key     string
	url     string               // the API to call (default: the simulator)
	cfg     func(*refund.Config) // adjusts the run's configuration
}

type outcome struct {
	summary refund.Summary
	results map[string]refund.Result
	err     error
}

// run does one refund run over plan with the journal at path, as the
// refund command would.
func run(t *testing.T, s *sim, path, plan string, o runOpts) outcome {
	t.Helper()
	var (
		w     *journal.Writer
		state *journal.State
		err   error
	)
	if o.dryRun {
		state, _, err = journal.Load(path)
	} else {
		w, state, _, err = journal.Open(path, journal.Options{})
	}
	if err != nil {
		t.Fatalf("open journal: %v", err)
	}
	if w != nil {
		defer w.Close()
	}
	if o.workers == 0 {
		o.workers = 4
	}
	if o.key == "" {
		o.key = testKey
	}
	if o.url == "" {
		o.url = s.URL
	}
	var mu sync.Mutex
	out := outcome{results: map[string]refund.Result{}}
	cfg := refund.Config{
		Provider:   stripe.New(o.url, o.key, o.workers),
		Checkpoint: refund.Journal(w, state), Workers: o.workers, DryRun: o.dryRun,
		Backoff: refund.Backoff{Base: time.Millisecond, Max: 4 * time.Millisecond},
		Now:     o.now,
		OnResult: func(r refund.Result) {
			mu.Lock()
			defer mu.Unlock()
			if _, dup := out.results[r.Item]; dup {
				t.Errorf("two results for item %s", r.Item)
			}
			out.results[r.Item] = r
		},
	}
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	out.summary, out.err = refund.Run(context.Background(), cfg, strings.NewReader(plan), "plan.jsonl")
	return out
}

func wantStatus(t *testing.T, o outcome, n int, status string) {
	t.Helper()
	if len(o.results) != n {
		t.Fatalf("%d results, want %d", len(o.results), n)
	}
	for _, r := range o.results {
		if r.Status != status {
			t.Fatalf("item %s: status %s (%s %s), want %s", r.Item, r.Status, r.Code, r.Message, status)
		}
	}
}

func wantExactlyOnce(t *testing.T, s *sim, batch string, n int) {
	t.Helper()
	got := s.refundsByItem()
	for i := 1; i <= n; i++ {
		if c := got[fmt.Sprintf("%s/i%d", batch, i)]; c != 1 {
			t.Errorf("item i%d has %d refunds at Stripe, want exactly 1", i, c)
		}
	}
	if len(got) != n {
		t.Errorf("%d items refunded at Stripe, want %d", len(got), n)
	}
}

func TestRunRefundsEveryItemOnceAndRestartMakesNoCalls(t *testing.T) {
	s := newSim(t, 50, stripesim.Faults{})
	path := filepath.Join(t.TempDir(), "j.jsonl")
	plan := planLines("b1", 50, 100)

	first := run(t, s, path, plan, runOpts{workers: 8})
	if first.err != nil {
		t.Fatal(first.err)
	}
	wantStatus(t, first, 50, refund.StatusRefunded)
	wantExactlyOnce(t, s, "b1", 50)
	if got := s.Creates(); got != 50 {
		t.Errorf("%d create calls, want 50", got)
	}
	for _, r := range first.results {
		if r.Refund == "" || r.Amount != 100 {
			t.Errorf("item %s: refund %q amount %d", r.Item, r.Refund, r.Amount)
		}
	}

	before := s.calls()
	second := run(t, s, path, plan, runOpts{workers: 8})
	if second.err != nil {
		t.Fatal(second.err)
	}
	wantStatus(t, second, 50, refund.StatusSkipped)
	if got := s.calls() - before; got != 0 {
		t.Errorf("restart over a complete journal made %d API calls, want 0", got)
	}
	for item, r := range second.results {
		if r.Refund != first.results[item].Refund {
			t.Errorf("item %s: skipped with refund %s, journaled %s", item, r.Refund, first.results[item].Refund)
		}
	}
}

// appendIntent journals an intent the way a run does just before its call,
// standing for a run killed between the intent and the outcome.
func appendIntent(t *testing.T, path, batch, item, charge string, attempt int, at time.Time) {
	t.Helper()
	w, _, _, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	err = w.Append(&journal.Record{V: journal.Version, Type: journal.TypeIntent, Time: at, Batch: batch, Item: item,
		Charge: charge, Attempt: attempt, Key: refund.IdempotencyKey(batch, item, attempt)})
	if err != nil {
		t.Fatal(err)
	}
}

// refundDirect makes the refund a killed run's call made, with its key and
// metadata, straight at the simulator.
func refundDirect(t *testing.T, s *sim, batch, item, charge string, attempt int) string {
	t.Helper()
	c := stripe.New(s.URL, testKey, 1)
	r, err := c.Create(context.Background(), &refund.Item{Batch: batch, Item: item, Charge: charge}, attempt)
	if err != nil {
		t.Fatal(err)
	}
	return r.ID
}

func TestInDoubtItemIsReconciledNotRefundedAgain(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name      string
		intentAge time.Duration
		forget    bool
	}{
		{name: "fresh key", intentAge: time.Minute},
		// A day later Stripe may have forgotten the key: only the lookup by
		// metadata stands between the resume and a second refund.
		{name: "expired key", intentAge: 25 * time.Hour, forget: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t, 3, stripesim.Faults{})
			path := filepath.Join(t.TempDir(), "j.jsonl")
			appendIntent(t, path, "b1", "i1", "ch_sim0000001", 1, now.Add(-tc.intentAge))
			id := refundDirect(t, s, "b1", "i1", "ch_sim0000001", 1)
			if tc.forget {
				s.ForgetKeys()
			}
			o := run(t, s, path, planLines("b1", 1, 0), runOpts{now: func() time.Time { return now }})
			if o.err != nil {
				t.Fatal(o.err)
			}
			wantStatus(t, o, 1, refund.StatusRefunded)
			if o.results["i1"].Refund != id {
				t.Errorf("adopted refund %s, want %s", o.results["i1"].Refund, id)
			}
			if got := s.Creates(); got != 1 { // the direct one only
				t.Errorf("%d create calls, want only the killed run's 1", got)
			}
			wantExactlyOnce(t, s, "b1", 1)
			if o.summary.Reconciled != 1 {
				t.Errorf("reconciled %d, want 1", o.summary.Reconciled)
			}
		})
	}
}

func TestInDoubtItemWithoutRefundIsRetried(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name        string
		intentAge   time.Duration
		wantAttempt int
	}{
		{name: "fresh key is reused", intentAge: time.Minute, wantAttempt: 1},
		// The key's age is no reason for a new one: once the look-up found
		// nothing, the same key is never less safe (the original may still
		// be in flight; a clock may have jumped).
		{name: "old key is reused too", intentAge: 49 * time.Hour, wantAttempt: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t, 1, stripesim.Faults{})
			path := filepath.Join(t.TempDir(), "j.jsonl")
			appendIntent(t, path, "b1", "i1", "ch_sim0000001", 1, now.Add(-tc.intentAge))
			o := run(t, s, path, planLines("b1", 1, 0), runOpts{now: func() time.Time { return now }})
			if o.err != nil {
				t.Fatal(o.err)
			}
			wantStatus(t, o, 1, refund.StatusRefunded)
			if got := o.results["i1"].Attempt; got != tc.wantAttempt {
				t.Errorf("attempt %d, want %d", got, tc.wantAttempt)
			}
			if s.Lists() != 1 || s.Creates() != 1 {
				t.Errorf("%d lists and %d creates, want 1 and 1", s.Lists(), s.Creates())
			}
			wantExactlyOnce(t, s, "b1", 1)
		})
	}
}

func TestFaultsNeverRefundTwice(t *testing.T) {
	const n = 40
	for _, tc := range []struct {
		name   string
		faults stripesim.Faults
		check  func(t *testing.T, o outcome)
		resend bool // reruns send items Stripe's 500 left in doubt under a new key
	}{
		{name: "429 storm", faults: stripesim.Faults{RateLimitShare: 0.5}, check: func(t *testing.T, o outcome) {
			if o.summary.RateLimited == 0 {
				t.Error("no 429 seen: the fault was not injected")
			}
		}},
		{name: "500 after commit", faults: stripesim.Faults{ErrorAfterCommitShare: 0.5}, check: func(t *testing.T, o outcome) {
			if o.summary.Reconciled == 0 {
				t.Error("nothing reconciled: the fault was not injected")
			}
		}},
		{name: "500 before commit", faults: stripesim.Faults{ErrorBeforeCommitShare: 0.3}, check: func(t *testing.T, o outcome) {
			if o.summary.NewKeys == 0 {
				t.Error("no new key used: the fault was not injected")
			}
		}, resend: true},
		// net/http itself repeats a request with an Idempotency-Key whose
		// reused connection closed before any answer, so the run may not
		// see the drops: the simulator counts them, and every drop must end
		// in a replay of the same key.
		{name: "connection dropped after commit", faults: stripesim.Faults{DropAfterCommitShare: 0.5}},
		{name: "in-flight latency", faults: stripesim.Faults{Latency: time.Millisecond, LatencyJitter: 2 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t, n, tc.faults)
			path := filepath.Join(t.TempDir(), "j.jsonl")
			plan := planLines("b1", n, 0)
			o := run(t, s, path, plan, runOpts{workers: 8})
			// A share below 1 can still hit one item on every attempt; a
			// second run must then settle it, still exactly once.
			for i := 0; i < 10 && o.summary.ByStatus[refund.StatusInDoubt] > 0; i++ {
				o = run(t, s, path, plan, runOpts{workers: 8, cfg: func(c *refund.Config) { c.ResendAfter500 = tc.resend }})
			}
			if o.err != nil {
				t.Fatal(o.err)
			}
			wantExactlyOnce(t, s, "b1", n)
			if tc.check != nil {
				tc.check(t, o)
			}
			if st := s.Stats(); tc.faults.DropAfterCommitShare > 0 && (st.Dropped == 0 || st.Replayed < st.Dropped) {
				t.Errorf("%d answers dropped, %d replayed: want some drops, each replayed", st.Dropped, st.Replayed)
			}
			before := s.calls()
			final := run(t, s, path, plan, runOpts{workers: 8})
			wantStatus(t, final, n, refund.StatusSkipped)
			if got := s.calls() - before; got != 0 {
				t.Errorf("rerun made %d calls, want 0", got)
			}
		})
	}
}

// TestStripe500LeavesItemInDoubtUntilAskedToResend: Stripe's own 500 is
// saved under the key and its result is indeterminate (Stripe may still
// complete the call). No new key in the same run; a later run sends under a
// new key only when told to, and only if the look-up still finds nothing.
func TestStripe500LeavesItemInDoubtUntilAskedToResend(t *testing.T) {
	s := newSim(t, 1, stripesim.Faults{ErrorBeforeCommitShare: 1})
	path := filepath.Join(t.TempDir(), "j.jsonl")
	plan := planLines("b1", 1, 0)
	o := run(t, s, path, plan, runOpts{})
	if o.err != nil {
		t.Fatal(o.err)
	}
	wantStatus(t, o, 1, refund.StatusInDoubt)
	if got := s.Creates(); got != 1 {
		t.Errorf("%d creates, want 1: no new key in the run that got the 500", got)
	}
	if o.summary.Indeterminate != 1 {
		t.Errorf("summary counts %d indeterminate, want 1", o.summary.Indeterminate)
	}
	if len(s.Refunds()) != 0 {
		t.Fatalf("refund created despite 500 before commit")
	}
	if err := s.SetFaults(stripesim.Faults{}); err != nil {
		t.Fatal(err)
	}
	o = run(t, s, path, plan, runOpts{})
	wantStatus(t, o, 1, refund.StatusInDoubt)
	if got := s.Creates(); got != 1 {
		t.Errorf("%d creates, want 1: a rerun without --resend-after-500 sends nothing", got)
	}
	if msg := o.results["i1"].Message; !strings.Contains(msg, "--resend-after-500") {
		t.Errorf("message %q does not say how to go on", msg)
	}

	o = run(t, s, path, plan, runOpts{cfg: func(c *refund.Config) { c.ResendAfter500 = true }})
	wantStatus(t, o, 1, refund.StatusRefunded)
	// Key 1 replays its 500 forever: the resume uses key 2.
	if got := o.results["i1"].Attempt; got != 2 {
		t.Errorf("resumed with attempt %d, want 2", got)
	}
	wantExactlyOnce(t, s, "b1", 1)
}

func TestFinalErrorsAreJournaledAndNotRetried(t *testing.T) {
	s := newSim(t, 2, stripesim.Faults{})
	path := filepath.Join(t.TempDir(), "j.jsonl")
	plan := `{"batch":"b1","item":"gone","charge":"ch_nosuchcharge"}
{"batch":"b1","item":"big","charge":"ch_sim0000001","amount":999999999}
{"batch":"b1","item":"ok","charge":"ch_sim0000002"}
`
	o := run(t, s, path, plan, runOpts{})
	if o.err != nil {
		t.Fatal(o.err)
	}
	for item, code := range map[string]string{"gone": "resource_missing", "big": "amount_too_large"} {
		if r := o.results[item]; r.Status != refund.StatusFailed || r.Code != code {
			t.Errorf("item %s: %s %s, want failed %s", item, r.Status, r.Code, code)
		}
	}
	if r := o.results["ok"]; r.Status != refund.StatusRefunded {
		t.Errorf("item ok: %s, want refunded: a final failure must not stop the run", r.Status)
	}
	before := s.calls()
	o = run(t, s, path, plan, runOpts{})
	if got := s.calls() - before; got != 0 {
		t.Errorf("rerun made %d calls, want 0", got)
	}
	if r := o.results["gone"]; r.Status != refund.StatusFailed || r.Code != "resource_missing" {
		t.Errorf("rerun: item gone %s %s, want failed resource_missing from the journal", r.Status, r.Code)
	}
}

func TestBadInputLineStopsTheRunThere(t *testing.T) {
	s := newSim(t, 10, stripesim.Faults{})
	path := filepath.Join(t.TempDir(), "j.jsonl")
	lines := strings.Split(planLines("b1", 10, 0), "\n")
	lines[4] = `{"batch":"b1","item":"i5","charge":"ch_sim0000005","amount":-3}`
	o := run(t, s, path, strings.Join(lines, "\n"), runOpts{workers: 1})
	var ie *refund.InputError
	if !errors.As(o.err, &ie) || ie.Line != 5 || !strings.Contains(ie.Error(), "plan.jsonl:5: amount: -3") {
		t.Fatalf("error %v, want plan.jsonl:5: amount: -3 ...", o.err)
	}
	got := s.refundsByItem()
	for i := 5; i <= 10; i++ {
		if got[fmt.Sprintf("b1/i%d", i)] != 0 {
			t.Errorf("item i%d at or after the bad line was refunded", i)
		}
	}
	for i := 1; i <= 4; i++ {
		if got[fmt.Sprintf("b1/i%d", i)] != 1 {
			t.Errorf("item i%d before the bad line: %d refunds, want 1", i, got[fmt.Sprintf("b1/i%d", i)])
		}
	}
}

func TestDuplicateItemInInputIsRefused(t *testing.T) {
	s := newSim(t, 2, stripesim.Faults{})
	path := filepath.Join(t.TempDir(), "j.jsonl")
	plan := planLines("b1", 2, 0) + `{"batch":"b1","item":"i1","charge":"ch_sim0000002"}` + "\n"
	o := run(t, s, path, plan, runOpts{workers: 1})
	if o.err == nil || !strings.Contains(o.err.Error(), `plan.jsonl:3: item "i1" of batch "b1" is already at line 1`) {
		t.Fatalf("error %v, want the duplicate named with both lines", o.err)
	}
}

func TestRefusedKeyHaltsTheRun(t *testing.T) {
	s := newSim(t, 20, stripesim.Faults{})
	path := filepath.Join(t.TempDir(), "j.jsonl")
	o := run(t, s, path, planLines("b1", 20, 0), runOpts{workers: 1, key: "sk_live_wrong"})
	var h *refund.HaltError
	if !errors.As(o.err, &h) || h.Journal {
		t.Fatalf("error %v, want a Stripe halt", o.err)
	}
	// The look-up before the first call meets the refusal: nothing is sent.
	if got := s.Creates(); got != 0 {
		t.Errorf("%d create calls with a refused key, want 0", got)
	}
	if got := s.Lists(); got != 1 {
		t.Errorf("%d look-ups after the key was refused, want 1", got)
	}
	if strings.Contains(o.err.Error(), "sk_live_wrong") {
		t.Errorf("error shows the key: %v", o.err)
	}
}

// TestDryRunMakesNoCallsAndWritesNothing: an offline dry run answers from
// the journal alone (dryrun_test.go has the dry run that looks up).
func TestDryRunMakesNoCallsAndWritesNothing(t *testing.T) {
	s := newSim(t, 4, stripesim.Faults{})
	path := filepath.Join(t.TempDir(), "j.jsonl")
	plan := planLines("b1", 4, 0)
	if o := run(t, s, path, planLines("b1", 2, 0), runOpts{}); o.err != nil {
		t.Fatal(o.err)
	}
	appendIntent(t, path, "b1", "i3", "ch_sim0000003", 1, time.Now())
	before := s.calls()
	o := run(t, s, path, plan, runOpts{dryRun: true, cfg: func(c *refund.Config) { c.Offline = true }})
	if o.err != nil {
		t.Fatal(o.err)
	}
	want := map[string]string{"i1": refund.StatusSkipped, "i2": refund.StatusSkipped, "i3": refund.StatusWouldRec, "i4": refund.StatusWould}
	for item, st := range want {
		if o.results[item].Status != st {
			t.Errorf("item %s: %s, want %s", item, o.results[item].Status, st)
		}
	}
	if got := s.calls() - before; got != 0 {
		t.Errorf("dry run made %d calls", got)
	}
	state, _, err := journal.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := state.Lookup("b1", "i4"); st.Status != journal.StatusUnknown {
		t.Errorf("dry run journaled item i4: %v", st.Status)
	}
}

// TestRefundMetadataNamesTheItem: Stripe-side records can be matched to
// their batch and item without the journal.
func TestRefundMetadataNamesTheItem(t *testing.T) {
	s := newSim(t, 1, stripesim.Faults{})
	path := filepath.Join(t.TempDir(), "j.jsonl")
	plan := `{"batch":"b1","item":"i1","charge":"ch_sim0000001","reason":"duplicate","metadata":{"ticket":"T-9"}}` + "\n"
	if o := run(t, s, path, plan, runOpts{}); o.err != nil {
		t.Fatal(o.err)
	}
	rs := s.Refunds()
	if len(rs) != 1 {
		t.Fatalf("%d refunds, want 1", len(rs))
	}
	md := rs[0].Metadata
	if md[refund.MetaBatch] != "b1" || md[refund.MetaItem] != "i1" || md[refund.MetaAttempt] != "1" || md["ticket"] != "T-9" {
		t.Errorf("metadata %v", md)
	}
	if rs[0].IdempotencyKey != refund.IdempotencyKey("b1", "i1", 1) {
		t.Errorf("idempotency key %q", rs[0].IdempotencyKey)
	}
	if rs[0].Reason != "duplicate" {
		t.Errorf("reason %q", rs[0].Reason)
	}
}

// TestDeadRefundIsNotReplayedNorRepeated: the item's refund exists at Stripe
// but failed there. Its key would replay a success, a new key would send the
// money again: the item is journaled as failed for a person to decide.
func TestDeadRefundIsNotReplayedNorRepeated(t *testing.T) {
	for _, status := range []string{"failed", "canceled"} {
		t.Run(status, func(t *testing.T) {
			s := newSim(t, 0, stripesim.Faults{})
			err := s.AddCharges(stripesim.Charge{ID: "ch_dead1", Amount: 1000, Refunds: []stripesim.SeedRefund{{
				Amount: 1000, Status: status,
				Metadata: map[string]string{refund.MetaBatch: "b1", refund.MetaItem: "i1", refund.MetaAttempt: "1"},
			}}})
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "j.jsonl")
			appendIntent(t, path, "b1", "i1", "ch_dead1", 1, time.Now())
			plan := `{"batch":"b1","item":"i1","charge":"ch_dead1"}` + "\n"
			o := run(t, s, path, plan, runOpts{})
			if o.err != nil {
				t.Fatal(o.err)
			}
			r := o.results["i1"]
			if r.Status != refund.StatusFailed || r.Code != "refund_"+status || !strings.Contains(r.Message, "not sent again") {
				t.Fatalf("result %+v, want failed refund_%s", r, status)
			}
			if got := s.Creates(); got != 0 {
				t.Fatalf("%d create calls for an item whose refund %s at Stripe, want 0", got, status)
			}
			state, _, err := journal.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if st, _ := state.Lookup("b1", "i1"); st.Status != journal.StatusFailed || st.Code != "refund_"+status {
				t.Fatalf("journal state %+v, want failed refund_%s", st, status)
			}
		})
	}
}

// TestStopWhileWaitingLeavesNothingInDoubt: an item waiting on the rate
// limiter when a stop comes was never sent. It gets no intent and no
// in-doubt result; the next run starts it afresh.
func TestStopWhileWaitingLeavesNothingInDoubt(t *testing.T) {
	s := newSim(t, 2, stripesim.Faults{})
	path := filepath.Join(t.TempDir(), "j.jsonl")
	w, state, _, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	// The stop comes once the first create is on the wire.
	s.SetCreateHook(func(string) { stop() })
	var mu sync.Mutex
	var results []refund.Result
	// Look-ups go freely; one create, then the other waits (for hours).
	pacer := refund.NewPacer(refund.Limits{Create: 1e-6})
	_, err = refund.Run(ctx, refund.Config{
		Provider: stripe.New(s.URL, testKey, 2), Checkpoint: refund.Journal(w, state), Workers: 2, Pacer: pacer,
		OnResult: func(r refund.Result) {
			mu.Lock()
			defer mu.Unlock()
			results = append(results, r)
		},
	}, strings.NewReader(planLines("b1", 2, 0)), "plan.jsonl")
	w.Close()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want canceled", err)
	}
	if len(results) != 1 || results[0].Status != refund.StatusRefunded {
		t.Fatalf("results %+v, want only the one item sent, refunded", results)
	}
	after, _, err := journal.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if after.Len() != 1 {
		t.Errorf("the journal holds %d items, want only the one sent", after.Len())
	}
}
