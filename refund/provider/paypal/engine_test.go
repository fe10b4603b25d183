package paypal

// refund.Run with this client against the simulator's PayPal routes, over
// the real journal: the engine's exactly-once promise kept PayPal's way.
// A capture's refunds are looked up through its order before a first call
// and before an item in doubt is sent again; pending refunds are settled
// by Get, never resent.

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
	"github.com/refundkit/refundkit/refund/sim/paypalsim"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/refund/sim/stripesim/simtest"
)

const e2eBatch = "pp-e2e"

// e2e is a simulator, a client of it and a journal, for runs of the engine.
type e2e struct {
	t       *testing.T
	sim     *simtest.Sim
	c       *Client
	journal string
}

func newE2E(t *testing.T, f stripesim.Faults, captures ...paypalsim.Capture) *e2e {
	t.Helper()
	s := simtest.Start(t, stripesim.Config{Faults: f, Seed: 7, PayPal: paypalsim.Config{Captures: captures}})
	return &e2e{t: t, sim: s, c: New(s.URL, "e2e-client", "e2e-secret", 4), journal: filepath.Join(t.TempDir(), "refunds.jsonl")}
}

// loseOutcomes is a checkpoint that loses every outcome, as a crash between
// a call and the fsync of its answer does.
type loseOutcomes struct{ refund.Checkpoint }

func (l loseOutcomes) Append(recs ...*journal.Record) error {
	if recs[0].Type != journal.TypeIntent {
		return errors.New("crashed")
	}
	return l.Checkpoint.Append(recs...)
}

// runOpts vary a run: lose its outcomes, run it at another time, hold
// items whose capture has refunds without refundkit's metadata.
type runOpts struct {
	lose       bool
	now        func() time.Time
	allRefunds bool
}

// run runs the plan through the engine with the journal and returns each
// item's result and the run's error.
func (e *e2e) run(plan string, o runOpts) (map[string]refund.Result, error) {
	e.t.Helper()
	w, state, _, err := journal.Open(e.journal, journal.Options{})
	if err != nil {
		e.t.Fatal(err)
	}
	defer w.Close()
	var cp refund.Checkpoint = refund.Journal(w, state)
	if o.lose {
		cp = loseOutcomes{cp}
	}
	var mu sync.Mutex
	res := map[string]refund.Result{}
	_, err = refund.Run(context.Background(), refund.Config{Provider: e.c, Checkpoint: cp, Workers: 2, Now: o.now, AllRefunds: o.allRefunds,
		Backoff: refund.Backoff{Base: time.Millisecond, Max: 5 * time.Millisecond}, MaxUnanswered: 1000,
		OnResult: func(r refund.Result) { mu.Lock(); res[r.Item] = r; mu.Unlock() }}, strings.NewReader(plan), "plan.jsonl")
	return res, err
}

// mustRun runs the plan and fails the test on any error of the run.
func (e *e2e) mustRun(plan string) map[string]refund.Result {
	e.t.Helper()
	res, err := e.run(plan, runOpts{})
	if err != nil {
		e.t.Fatalf("run: %v", err)
	}
	return res
}

// refunds are the refunds the engine's runs made at the simulator (seeded
// ones left out), by capture.
func (e *e2e) refunds() map[string][]paypalsim.Refund {
	out := map[string][]paypalsim.Refund{}
	for _, r := range e.sim.PayPal().Refunds() {
		if r.RequestID != "" {
			out[r.Capture] = append(out[r.Capture], r)
		}
	}
	return out
}

// planItem is a plan line: item refunds amount (0: the rest) of capture.
type planItem struct {
	item, capture string
	amount        int64
	currency      string
}

func planOf(items ...planItem) string { return planIn(e2eBatch, items...) }

// planIn is the plan of items in batch.
func planIn(batch string, items ...planItem) string {
	var b strings.Builder
	for _, it := range items {
		fmt.Fprintf(&b, `{"batch":%q,"item":%q,"capture":%q`, batch, it.item, it.capture)
		if it.amount > 0 {
			fmt.Fprintf(&b, `,"amount":%d,"currency":%q`, it.amount, it.currency)
		}
		b.WriteString("}\n")
	}
	return b.String()
}

// usdCaptures are n USD captures of 50.00, CAPE2E1..., each refunded in
// full by item i1... of the plan.
func usdCaptures(n int) ([]paypalsim.Capture, []planItem) {
	cs, items := make([]paypalsim.Capture, n), make([]planItem, n)
	for i := range cs {
		cs[i] = paypalsim.Capture{ID: fmt.Sprintf("CAPE2E%d", i+1), Currency: "USD", Amount: 5000}
		items[i] = planItem{item: fmt.Sprintf("i%d", i+1), capture: cs[i].ID}
	}
	return cs, items
}

// exactlyOnce checks that each plan item has exactly one refund at the
// simulator, of its amount (a full refund's: rest[item], else 50.00), made
// under its attempt-1 request id, that its result names it, and that the
// simulator holds no other refund.
func (e *e2e) exactlyOnce(items []planItem, res map[string]refund.Result, rest map[string]int64) {
	e.t.Helper()
	byCapture := e.refunds()
	for _, it := range items {
		var mine []paypalsim.Refund
		for _, r := range byCapture[it.capture] {
			if r.RequestID == refund.IdempotencyKey(e2eBatch, it.item, 1) {
				mine = append(mine, r)
			}
		}
		want := it.amount
		if want == 0 {
			want = 5000
			if n, ok := rest[it.item]; ok {
				want = n
			}
		}
		if len(mine) != 1 || mine[0].Amount != want || mine[0].CustomID != customID(e2eBatch, it.item, 1) {
			e.t.Errorf("%s: refunds at the simulator %+v, want one of %d under attempt 1's request id", it.item, mine, want)
			continue
		}
		if r := res[it.item]; r.Refund != mine[0].ID && r.Status != refund.StatusSkipped {
			e.t.Errorf("%s: result %+v, want refund %s", it.item, r, mine[0].ID)
		}
	}
	n := 0
	for _, rs := range byCapture {
		n += len(rs)
	}
	if n != len(items) {
		e.t.Errorf("%d refunds at the simulator, want %d: one per item", n, len(items))
	}
}

// TestEngineRefundsEachCaptureOnce: a plan of captures (full and partial,
// two partial refunds of one capture, USD, JPY, KWD and HUF) through
// dropped answers, PayPal's 500s after the refund was made and 429s: each
// item refunded exactly once; a rerun sends nothing.
func TestEngineRefundsEachCaptureOnce(t *testing.T) {
	cs, items := usdCaptures(6)
	cs = append(cs, paypalsim.Capture{ID: "CAPJPY", Currency: "JPY", Amount: 9000},
		paypalsim.Capture{ID: "CAPKWD", Currency: "KWD", Amount: 20000},
		paypalsim.Capture{ID: "CAPHUF", Currency: "HUF", Amount: 500000})
	items = append(items, planItem{"i1-part2", "CAPE2E1", 0, ""},
		planItem{"jpy", "CAPJPY", 500, "jpy"}, planItem{"kwd", "CAPKWD", 1500, "kwd"}, planItem{"huf", "CAPHUF", 150000, "huf"})
	items[0] = planItem{"i1", "CAPE2E1", 1050, "usd"} // the rest of it is i1-part2's
	e := newE2E(t, stripesim.Faults{DropAfterCommitShare: 0.2, ErrorAfterCommitShare: 0.2, RateLimitShare: 0.1}, cs...)
	res := e.mustRun(planOf(items...))
	for _, it := range items {
		if r := res[it.item]; r.Status != refund.StatusRefunded || r.Attempt != 1 {
			t.Errorf("%s: %+v, want refunded at attempt 1", it.item, r)
		}
	}
	e.exactlyOnce(items, res, map[string]int64{"i1-part2": 5000 - 1050})
	if st := e.sim.Stats(); st.Dropped+st.ErrorsAfterCommit == 0 || st.Replayed == 0 {
		t.Errorf("stats %+v: the faults hit nothing, the test proves nothing", st)
	}
	e.sim.Reset()
	for item, r := range e.mustRun(planOf(items...)) {
		if r.Status != refund.StatusSkipped {
			t.Errorf("rerun %s: %+v, want skipped", item, r)
		}
	}
	if n := e.sim.Calls(simtest.PayPalToken, simtest.PayPalRefund, simtest.PayPalGetRefund, simtest.PayPalGetCapture); n != 0 {
		t.Errorf("rerun: %d calls to PayPal, want none", n)
	}
}

// TestEngineLostOutcomesLookedUp: a run whose outcomes are lost leaves
// its items in doubt. A rerun 23 days on, past half of the 45 days PayPal
// keeps a request id, looks each capture up through its order: the lost
// run's refunds are adopted (found), nothing is sent for them, and only the
// items it did not refund are sent: one refund per capture.
func TestEngineLostOutcomesLookedUp(t *testing.T) {
	cs, items := usdCaptures(8)
	e := newE2E(t, stripesim.Faults{}, cs...)
	plan := planOf(items...)
	_, err := e.run(plan, runOpts{lose: true})
	var h *refund.HaltError
	if !errors.As(err, &h) || !h.Journal {
		t.Fatalf("lost outcomes: %v, want a halt on the journal", err)
	}
	sent := map[string]string{} // capture: the refund made by the lost run
	for c, rs := range e.refunds() {
		sent[c] = rs[0].ID
	}
	if len(sent) == 0 {
		t.Fatal("the lost run made no refund: nothing is in doubt")
	}
	e.sim.Reset()
	late := func() time.Time { return time.Now().Add(23 * 24 * time.Hour) }
	res, err := e.run(plan, runOpts{now: late})
	if err != nil {
		t.Fatal(err)
	}
	e.exactlyOnce(items, res, nil)
	for _, it := range items {
		r := res[it.item]
		id, made := sent[it.capture]
		switch {
		case made && (r.Status != refund.StatusRefunded || !r.Found || r.Refund != id || r.Attempt != 1):
			t.Errorf("%s: %+v, want %s, the lost run's refund, found", it.item, r, id)
		case !made && (r.Status != refund.StatusRefunded || r.Found):
			t.Errorf("%s: %+v, want refunded now", it.item, r)
		}
	}
	if c, l := e.sim.PayPalCreates(), e.sim.Calls(simtest.PayPalGetCapture, simtest.PayPalGetOrder); c != int64(len(items)-len(sent)) || l != 2*int64(len(items)) {
		t.Errorf("rerun: %d refund requests, %d look-up requests; want %d and %d", c, l, len(items)-len(sent), 2*len(items))
	}
	if n := e.sim.Stats().Replayed; n != 0 {
		t.Errorf("%d answers replayed from a request id, want none: the look-up found the refunds", n)
	}
}

// TestEnginePendingSettledByGet: PENDING refunds (eChecks) are journaled
// pending; once PayPal settles them, a rerun reads each with Get and
// journals its end, COMPLETED or FAILED, and creates nothing.
func TestEnginePendingSettledByGet(t *testing.T) {
	cs, items := usdCaptures(8)
	// PENDING for far longer than the loop below takes on a busy machine
	// (at 300ms, a slow loop's later runs saw them settled already).
	e := newE2E(t, stripesim.Faults{PayPalPendingShare: 1, PayPalPendingFor: 10 * time.Second, PayPalFailedShare: 0.5}, cs...)
	plan := planOf(items...)
	for _, it := range items {
		if r := e.mustRun(plan)[it.item]; r.Status != refund.StatusPending && r.Status != refund.StatusSkipped {
			t.Fatalf("%s: %+v, want pending", it.item, r)
		}
	}
	// The loop above ran the plan len(items) times: the first run made
	// the refunds, the others found them pending and created nothing.
	if n := len(e.sim.PayPal().Refunds()); n != len(items) {
		t.Fatalf("%d refunds, want %d", n, len(items))
	}
	deadline := time.Now().Add(time.Minute)
	for e.sim.PayPal().Stats().Refunds[paypalsim.StatusPending] > 0 {
		if time.Now().After(deadline) {
			t.Fatal("PENDING refunds did not settle in a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.sim.Reset()
	res := e.mustRun(plan)
	ended := map[string]int{}
	for _, r := range e.sim.PayPal().Refunds() {
		_, item, _, _ := parseCustomID(r.CustomID)
		got := res[item]
		ended[r.Status]++
		switch r.Status {
		case paypalsim.StatusCompleted:
			if got.Status != refund.StatusRefunded || got.Refund != r.ID {
				t.Errorf("%s COMPLETED: result %+v, want refunded", r.ID, got)
			}
		case paypalsim.StatusFailed:
			if got.Status != refund.StatusFailed || got.Code != "refund_failed" || got.Refund != r.ID {
				t.Errorf("%s FAILED: result %+v, want failed, refund_failed", r.ID, got)
			}
			if c, _ := e.sim.PayPal().Capture(r.Capture); c.Refunded != 0 {
				t.Errorf("%s: capture %+v still holds the failed refund", r.ID, c)
			}
		default:
			t.Errorf("%s: %s at the simulator", r.ID, r.Status)
		}
	}
	if ended[paypalsim.StatusCompleted] == 0 || ended[paypalsim.StatusFailed] == 0 {
		t.Errorf("ended %v: want both COMPLETED and FAILED", ended)
	}
	if c, g := e.sim.PayPalCreates(), e.sim.Calls(simtest.PayPalGetRefund); c != 0 || g != int64(len(items)) {
		t.Errorf("settling run: %d refund requests, %d look-ups; want 0 and %d", c, g, len(items))
	}
	e.sim.Reset()
	for item, r := range e.mustRun(plan) {
		if was := res[item]; r.Status != refund.StatusSkipped && (r.Status != was.Status || r.Code != was.Code) {
			t.Errorf("after settling, %s: %+v, want skipped, or %s %s again", item, r, was.Status, was.Code)
		}
	}
	if n := e.sim.Calls(simtest.PayPalRefund, simtest.PayPalGetRefund); n != 0 {
		t.Errorf("after settling: %d calls, want none", n)
	}
}

// TestEngineRefusalsAreFinal: PayPal's 422s (a capture refunded already,
// an amount over what is left) fail their items for good, with PayPal's
// issue as code; an HUF amount PayPal cannot take is refused before
// anything is sent. A rerun sends nothing for any of them.
func TestEngineRefusalsAreFinal(t *testing.T) {
	e := newE2E(t, stripesim.Faults{},
		paypalsim.Capture{ID: "CAPDONE", Currency: "USD", Amount: 5000, Refunds: []paypalsim.SeedRefund{{Amount: 5000}}},
		paypalsim.Capture{ID: "CAPSMALL", Currency: "USD", Amount: 500},
		paypalsim.Capture{ID: "CAPHUF", Currency: "HUF", Amount: 500000})
	plan := planOf(planItem{"done", "CAPDONE", 0, ""}, planItem{"over", "CAPSMALL", 600, "usd"}, planItem{"huf", "CAPHUF", 150050, "huf"})
	res := e.mustRun(plan)
	for item, want := range map[string]string{"done": "CAPTURE_FULLY_REFUNDED", "over": "REFUND_AMOUNT_EXCEEDED", "huf": "DECIMALS_NOT_SUPPORTED"} {
		if r := res[item]; r.Status != refund.StatusFailed || r.Code != want {
			t.Errorf("%s: %+v, want failed %s", item, r, want)
		}
	}
	if n := e.sim.PayPalCreates(); n != 2 {
		t.Errorf("%d refund requests, want 2: the HUF amount is never sent", n)
	}
	if n := len(e.refunds()); n != 0 {
		t.Errorf("refunds made: %v", e.refunds())
	}
	e.sim.Reset()
	for item, r := range e.mustRun(plan) {
		if was := res[item]; r.Status != refund.StatusFailed || r.Code != was.Code {
			t.Errorf("rerun %s: %+v, want failed %s again", item, r, was.Code)
		}
	}
	if n := e.sim.PayPalCreates(); n != 0 {
		t.Errorf("rerun: %d refund requests, want none", n)
	}
}

// TestEngineTokenExpiresMidRun: the access token expires at PayPal while
// the client still holds it (its clock stands still), so refund requests
// are refused 401; each is sent again with a new token and the same
// request id, and every capture is refunded once.
func TestEngineTokenExpiresMidRun(t *testing.T) {
	cs, items := usdCaptures(30)
	// 30 items, two at a time, 30ms each: the run lasts 450ms at least,
	// past the 200ms of a token's life.
	e := newE2E(t, stripesim.Faults{PayPalTokenTTL: 200 * time.Millisecond, Latency: 30 * time.Millisecond}, cs...)
	frozen := time.Now()
	e.c.now = func() time.Time { return frozen }
	res := e.mustRun(planOf(items...))
	for _, it := range items {
		if r := res[it.item]; r.Status != refund.StatusRefunded || r.Attempt != 1 {
			t.Errorf("%s: %+v, want refunded at attempt 1", it.item, r)
		}
	}
	e.exactlyOnce(items, res, nil)
	st := e.sim.Stats().PayPal
	if st.TokensExpired == 0 || st.TokensIssued < 2 {
		t.Errorf("tokens: %+v; want some expired at PayPal and renewed", st)
	}
	// Each item is a look-up (the capture, its order) and a refund request;
	// each expired token refuses one of them, sent again with a new token.
	want := 3*int64(len(items)) + st.TokensExpired
	if n := e.sim.Calls(simtest.PayPalRefund, simtest.PayPalGetCapture, simtest.PayPalGetOrder); n != want {
		t.Errorf("%d requests, want %d: three per item and one more per expired token", n, want)
	}
}
