package refund_test

// Found by an adversarial review of the per-charge safety (f6eae2a), each a
// test that failed on that commit: second refunds and untrue signals.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/provider/stripe"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
)

// A1. The same batch, rerun into the same journal from an export that names
// the payment intent instead of the charge (plan derives the item id from
// the target: "ch_..." one day, "pi_..." the next). The look-up finds the
// batch's own refund for item ch_sim0000001 and waves it through as "another
// item of the same batch": a second refund, exit 0.
func TestReviewSameBatchPaymentIntentAlias(t *testing.T) {
	s := newSim(t, 1, stripesim.Faults{})
	path := filepath.Join(t.TempDir(), "j.jsonl")
	day1 := `{"batch":"b1","item":"ch_sim0000001","charge":"ch_sim0000001","amount":100}` + "\n"
	if o := run(t, s, path, day1, runOpts{}); o.err != nil {
		t.Fatal(o.err)
	}
	day2 := `{"batch":"b1","item":"pi_sim0000001","payment_intent":"pi_sim0000001","amount":100}` + "\n"
	o := run(t, s, path, day2, runOpts{})
	r := o.results["pi_sim0000001"]
	t.Logf("second run: err=%v status=%s code=%q summary=%v", o.err, r.Status, r.Code, o.summary.ByStatus)
	wantOneRefundPerCharge(t, s, 1)
}

// A2. The same hole with explicit item ids: the batch is rerun a day later
// into a fresh journal (restored from an old copy) from a re-exported CSV
// whose rows were renumbered. Every charge is refunded a second time.
func TestReviewSameBatchRenumberedItemsLostJournal(t *testing.T) {
	s := newSim(t, 2, stripesim.Faults{})
	dir := t.TempDir()
	v1 := `{"batch":"b1","item":"row-1","charge":"ch_sim0000001","amount":100}
{"batch":"b1","item":"row-2","charge":"ch_sim0000002","amount":100}
`
	if o := run(t, s, filepath.Join(dir, "j.jsonl"), v1, runOpts{}); o.err != nil {
		t.Fatal(o.err)
	}
	s.ForgetKeys() // a day later
	v2 := `{"batch":"b1","item":"row-1","charge":"ch_sim0000002","amount":100}
{"batch":"b1","item":"row-2","charge":"ch_sim0000001","amount":100}
`
	o := run(t, s, filepath.Join(dir, "restored.jsonl"), v2, runOpts{})
	t.Logf("second run: err=%v summary=%v", o.err, o.summary.ByStatus)
	wantOneRefundPerCharge(t, s, 2)
}

// B. Two batches on one charge in one run (two plans concatenated, or a
// plan holding yesterday's and today's batch): both items look the charge
// up before either refund exists, and both are sent. Run alone, one after
// the other, the second is held.
func TestReviewTwoBatchesOneChargeSameRun(t *testing.T) {
	s := newSim(t, 1, stripesim.Faults{})
	var answers atomic.Int64
	bothListed := make(chan struct{})
	s.OnAnswer(func(int) {
		if answers.Add(1) == 2 {
			close(bothListed)
		}
	})
	var first sync.Once
	s.SetCreateHook(func(string) {
		first.Do(func() {
			// Wait for the other item's look-up; a run that serialises
			// items of one charge never sends it, hence the bound.
			select {
			case <-bothListed:
			case <-time.After(3 * time.Second):
			}
		})
	})
	plan := `{"batch":"day-1","item":"a1","charge":"ch_sim0000001","amount":100}
{"batch":"day-2","item":"b1","charge":"ch_sim0000001","amount":100}
`
	o := run(t, s, filepath.Join(t.TempDir(), "j.jsonl"), plan, runOpts{workers: 2})
	t.Logf("err=%v summary=%v", o.err, o.summary.ByStatus)
	wantOneRefundPerCharge(t, s, 1)
}

// stripe500OnList answers the look-up of charge with Stripe's own 500
// (api_error body and Request-Id), and proxies everything else.
func stripe500OnList(t *testing.T, s *sim, charge string) string {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Query().Get("charge") == charge {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Request-Id", "req_boom")
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, `{"error":{"type":"api_error","message":"An unknown error occurred"}}`)
			return
		}
		proxyTo(w, r, s.URL)
	}))
	t.Cleanup(ts.Close)
	return ts.URL
}

// C. Stripe answers 500 to the look-up of one charge, every time. The item
// is dropped by notCalled: no result line, not in the summary, nothing in
// the journal, and the run returns no error (the command exits 0).
func TestReviewLookup500DropsItemSilently(t *testing.T) {
	s := newSim(t, 3, stripesim.Faults{})
	url := stripe500OnList(t, s, "ch_sim0000002")
	o := run(t, s, filepath.Join(t.TempDir(), "j.jsonl"), planLines("b1", 3, 100), runOpts{url: url})
	t.Logf("err=%v summary items=%d %v results=%d", o.err, o.summary.Items, o.summary.ByStatus, len(o.results))
	exit0 := o.err == nil && o.summary.ByStatus[refund.StatusFailed] == 0 && o.summary.ByStatus[refund.StatusInDoubt] == 0
	if _, ok := o.results["i2"]; !ok && exit0 {
		t.Errorf("item i2 was never refunded, has no result line, and the run would exit 0")
	}
}

// C2. The same after journal-merge --compact: an item in doubt (intent
// journaled, call lost) that a rerun held for another batch's refund keeps
// only its hold record when compacted, so it is "unsent" again. The rerun
// with --allow-refunded-charges over a look-up that keeps failing drops it
// without a line, exit 0; uncompacted, the same rerun says in_doubt, exit 1.
func TestReviewCompactedHeldItemDroppedSilently(t *testing.T) {
	s := newSim(t, 1, stripesim.Faults{})
	refundPartial(t, s, "day-1", "i1", "ch_sim0000001", 1, 100)
	dir := t.TempDir()
	path := filepath.Join(dir, "j.jsonl")
	appendRecord(t, path, &journal.Record{V: journal.Version, Type: journal.TypeIntent, Time: time.Now(), Batch: "day-2", Item: "i1",
		Charge: "ch_sim0000001", Attempt: 1, Key: refund.IdempotencyKey("day-2", "i1", 1), Amount: 100})
	plan := `{"batch":"day-2","item":"i1","charge":"ch_sim0000001","amount":100}` + "\n"
	if o := run(t, s, path, plan, runOpts{}); o.results["i1"].Code != refund.CodeRefundedByOtherBatch {
		t.Fatalf("want the item held, got %+v", o.results["i1"])
	}
	var buf bytes.Buffer
	if _, err := journal.MergeWith([]string{path}, &buf, journal.MergeOptions{Compact: true}); err != nil {
		t.Fatal(err)
	}
	compacted := filepath.Join(dir, "compact.jsonl")
	if err := os.WriteFile(compacted, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	url := stripe500OnList(t, s, "ch_sim0000001")
	allow := runOpts{url: url, cfg: func(c *refund.Config) { c.AllowRefundedCharges = true }}
	for _, p := range []string{path, compacted} {
		o := run(t, s, p, plan, allow)
		t.Logf("%s: err=%v summary=%v results=%+v", filepath.Base(p), o.err, o.summary.ByStatus, o.results)
		if _, ok := o.results["i1"]; !ok && o.err == nil {
			t.Errorf("%s: item i1 (sent once, in doubt) vanished from the output and the run would exit 0", filepath.Base(p))
		}
	}
}

// D. A signal that arrives while the look-up is answered: the item's intent
// is journaled, the call is never made, and the item is reported (and
// journaled) in doubt "interrupted before Stripe answered".
func TestReviewSignalAfterLookupReportsUnsentInDoubt(t *testing.T) {
	s := newSim(t, 1, stripesim.Faults{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			cancel() // SIGINT lands while the list is on the wire
		}
		proxyTo(w, r, s.URL)
	}))
	t.Cleanup(ts.Close)
	path := filepath.Join(t.TempDir(), "j.jsonl")
	w, state, _, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var res []refund.Result
	_, runErr := refund.Run(ctx, refund.Config{
		Provider: stripe.New(ts.URL, testKey, 1), Checkpoint: refund.Journal(w, state), Workers: 1,
		Backoff:  refund.Backoff{Base: time.Millisecond, Max: 4 * time.Millisecond},
		OnResult: func(r refund.Result) { res = append(res, r) },
	}, strings.NewReader(planLines("b1", 1, 100)), "plan.jsonl")
	w.Close()
	data, _ := os.ReadFile(path)
	t.Logf("err=%v results=%+v creates=%d\njournal:\n%s", runErr, res, s.Creates(), data)
	if s.Creates() == 0 && len(res) == 1 && res[0].Status == refund.StatusInDoubt {
		t.Errorf("item reported in doubt (%q) but no refund call was ever made", res[0].Message)
	}
	if s.Creates() == 0 && bytes.Contains(data, []byte(`"type":"intent"`)) {
		t.Errorf("journal holds an intent for a call that was never made")
	}
}

// E. journal-merge --compact drops the intents of refunded items, and with
// them the binding of amount and currency: a plan edited from a partial 100
// usd refund to a full refund in eur is "skipped", exit 0, on the compacted
// journal, while the same journal uncompacted refuses it (exit 2).
func TestReviewCompactLosesAmountBinding(t *testing.T) {
	s := newSim(t, 1, stripesim.Faults{})
	dir := t.TempDir()
	path := filepath.Join(dir, "j.jsonl")
	orig := `{"batch":"b1","item":"i1","charge":"ch_sim0000001","amount":100,"currency":"usd"}` + "\n"
	if o := run(t, s, path, orig, runOpts{}); o.err != nil {
		t.Fatal(o.err)
	}
	compacted := filepath.Join(dir, "compact.jsonl")
	var buf bytes.Buffer
	if _, err := journal.MergeWith([]string{path}, &buf, journal.MergeOptions{Compact: true}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(compacted, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, edited := range []string{
		`{"batch":"b1","item":"i1","charge":"ch_sim0000001"}`,                               // full instead of partial
		`{"batch":"b1","item":"i1","charge":"ch_sim0000001","amount":100,"currency":"eur"}`, // other currency
	} {
		for _, p := range []string{path, compacted} {
			o := run(t, s, p, edited+"\n", runOpts{})
			var ie *refund.InputError
			if !errors.As(o.err, &ie) {
				t.Errorf("%s on %s: err %v result %+v, want an input error (exit 2)", edited, filepath.Base(p), o.err, o.results["i1"])
			}
		}
	}
}

// G. An in-doubt item whose call is still in flight at Stripe, on a charge
// another batch refunded: the look-up does not see its own refund yet and
// holds it as final "failed ... nothing sent". The call then lands. The
// journal says failed for good and the result said nothing was sent; the
// item holds a refund.
func TestReviewHoldOfInDoubtItemSaysNothingSent(t *testing.T) {
	s := newSim(t, 1, stripesim.Faults{})
	refundPartial(t, s, "day-1", "i1", "ch_sim0000001", 1, 100)
	path := filepath.Join(t.TempDir(), "j.jsonl")
	appendRecord(t, path, &journal.Record{V: journal.Version, Type: journal.TypeIntent, Time: time.Now(), Batch: "day-2", Item: "i1",
		Charge: "ch_sim0000001", Attempt: 1, Key: refund.IdempotencyKey("day-2", "i1", 1), Amount: 100})
	release := make(chan struct{})
	held := make(chan struct{})
	s.SetCreateHook(func(key string) {
		if key == refund.IdempotencyKey("day-2", "i1", 1) {
			close(held)
			<-release
		}
	})
	orig := make(chan error, 1)
	go func() { // the killed run's call, still in flight
		c := stripe.New(s.URL, testKey, 1)
		_, err := c.Create(context.Background(), &refund.Item{Batch: "day-2", Item: "i1", Charge: "ch_sim0000001", Amount: 100}, 1)
		orig <- err
	}()
	<-held
	o := run(t, s, path, `{"batch":"day-2","item":"i1","charge":"ch_sim0000001","amount":100}`+"\n", runOpts{})
	close(release)
	if err := <-orig; err != nil {
		t.Fatal(err)
	}
	r := o.results["i1"]
	t.Logf("result %+v", r)
	if s.refundsByItem()["day-2/i1"] == 1 && r.Status == refund.StatusFailed && strings.Contains(r.Message, "nothing sent") {
		t.Errorf("item reported failed, %q, yet its own call (journaled intent) made refund at Stripe", "nothing sent")
	}
}

// H. The look-up finds the item's own refund with another amount (an
// earlier plan said 50; its journal was lost). The run halts, exit 6, with
// "check it at Stripe before running again". Nothing at Stripe can change:
// every rerun halts again at the same item, and no item after it is ever
// refunded.
func TestReviewListMismatchHaltsForever(t *testing.T) {
	s := newSim(t, 2, stripesim.Faults{})
	refundPartial(t, s, "b1", "i1", "ch_sim0000001", 1, 50)
	path := filepath.Join(t.TempDir(), "j.jsonl")
	for n := 1; n <= 2; n++ {
		o := run(t, s, path, planLines("b1", 2, 100), runOpts{workers: 1})
		var h *refund.HaltError
		t.Logf("run %d: err=%v results=%+v", n, o.err, o.results)
		if n == 2 && errors.As(o.err, &h) {
			t.Errorf("following the advice (%q) halts again: exit 6 forever, i2 never refunded", o.results["i1"].Message)
		}
	}
}

// I. Stripe's own 500 (api_error, Request-Id) while the refund is still
// being committed behind it. The look-up right after the 500 finds nothing
// yet, a new key is used at once, and both refunds are made.
func TestReviewStripe500ThenLateCommit(t *testing.T) {
	s := newSim(t, 1, stripesim.Faults{})
	key1 := refund.IdempotencyKey("b1", "i1", 1)
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	s.SetCreateHook(func(key string) {
		if key == key1 {
			<-release
		} else {
			free() // a new key arrives: let the original commit
		}
	})
	var inFlight sync.WaitGroup
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.Header.Get("Idempotency-Key") == key1 {
			req := r.Clone(context.WithoutCancel(r.Context()))
			body, _ := io.ReadAll(r.Body)
			req.Body = io.NopCloser(bytes.NewReader(body))
			inFlight.Add(1)
			go func() { defer inFlight.Done(); proxyRecord(httptest.NewRecorder(), req, s.URL) }()
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Request-Id", "req_stripe500")
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, `{"error":{"type":"api_error","message":"An unknown error occurred"}}`)
			return
		}
		proxyTo(w, r, s.URL)
	}))
	t.Cleanup(ts.Close)
	path := filepath.Join(t.TempDir(), "j.jsonl")
	o := run(t, s, path, planLines("b1", 1, 100), runOpts{url: ts.URL})
	free() // the original commits late, as Stripe's repair of an incident may
	inFlight.Wait()
	if r := o.results["i1"]; r.Status != refund.StatusInDoubt || o.summary.Indeterminate != 1 {
		t.Errorf("result %+v, want in doubt after Stripe's 500, no new key", r)
	}
	wantOneRefundPerCharge(t, s, 1)
	// The next run, even told to resend, finds the late refund and adopts it.
	o = run(t, s, path, planLines("b1", 1, 100), runOpts{cfg: func(c *refund.Config) { c.ResendAfter500 = true }})
	if r := o.results["i1"]; r.Status != refund.StatusRefunded || !r.Found {
		t.Errorf("result %+v, want the late refund found", r)
	}
	wantOneRefundPerCharge(t, s, 1)
}

// J. A rerun that only adopts refunds made by an earlier run (a lost
// journal) moves no money, yet its summary says "refunded 600 usd".
func TestReviewSummaryCountsAdoptedAsRefundedNow(t *testing.T) {
	s := newSim(t, 6, stripesim.Faults{})
	dir := t.TempDir()
	if o := run(t, s, filepath.Join(dir, "j.jsonl"), planLines("b1", 6, 100), runOpts{}); o.err != nil {
		t.Fatal(o.err)
	}
	creates := s.Creates()
	o := run(t, s, filepath.Join(dir, "lost.jsonl"), planLines("b1", 6, 100), runOpts{})
	if s.Creates() != creates {
		t.Fatal("the rerun sent refunds")
	}
	t.Logf("summary: %s", o.summary.String())
	if o.summary.Refunded["usd"] != 0 {
		t.Errorf("no refund was made, yet the summary says refunded %d usd", o.summary.Refunded["usd"])
	}
}

// One run, one payment named by its charge on one line and by its payment
// intent on the next, a partial refund each: the plan owns both refunds, so
// neither holds the other (a hold would make one plan mean two things, as
// a sharded run sends both). The payment's lock still makes them go one at
// a time: the second one's look-up sees the first one's refund as its
// sibling's.
func TestReviewChargeAndIntentOfOnePaymentInOneRun(t *testing.T) {
	s := newSim(t, 1, stripesim.Faults{})
	var answers atomic.Int64
	bothLooked := make(chan struct{})
	s.OnAnswer(func(int) {
		if answers.Add(1) == 2 {
			close(bothLooked)
		}
	})
	var first sync.Once
	s.SetCreateHook(func(string) {
		first.Do(func() {
			// Give the other item every chance to look before this refund
			// exists; with the payment's lock it cannot, and the bound only
			// keeps a broken build from hanging.
			select {
			case <-bothLooked:
			case <-time.After(3 * time.Second):
			}
		})
	})
	plan := `{"batch":"b1","item":"ch_sim0000001","charge":"ch_sim0000001","amount":100}
{"batch":"b1","item":"pi_sim0000001","payment_intent":"pi_sim0000001","amount":100}
`
	o := run(t, s, filepath.Join(t.TempDir(), "j.jsonl"), plan, runOpts{workers: 2})
	if o.err != nil {
		t.Fatal(o.err)
	}
	if got := s.liveRefundsByCharge()["ch_sim0000001"]; got != 2 {
		t.Errorf("charge ch_sim0000001 has %d live refunds, want 2: one for each planned item", got)
	}
	for item, r := range o.results {
		if r.Status != refund.StatusRefunded {
			t.Errorf("item %s: %s (%s %s), want refunded: the other refund is its sibling's", item, r.Status, r.Code, r.Message)
		}
	}
}
