package refund_test

// A plan that streams in (a producer still running, a terminal), stops and
// halts while workers wait: found by an adversarial review, each test hung or
// failed on the commit before its fix.

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/provider/stripe"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
)

// bound fails the test if ch yields nothing within d: the behaviour under
// test must come at once, so d only keeps a broken build from hanging.
func bound[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("%s: nothing after %v", what, d)
		var zero T
		return zero
	}
}

// TestStreamingPlanIsWorkedOnAsItComes: two partial refunds of one charge
// written to a pipe that stays open. Both settle before the plan ends, and
// a stop while the pipe is idle ends the run.
func TestStreamingPlanIsWorkedOnAsItComes(t *testing.T) {
	s := newSim(t, 1, stripesim.Faults{})
	pr, pw := io.Pipe()
	defer pw.Close()
	w, state, _, err := journal.Open(filepath.Join(t.TempDir(), "j.jsonl"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	results := make(chan refund.Result, 2)
	done := make(chan error, 1)
	go func() {
		_, err := refund.Run(ctx, refund.Config{
			Provider: stripe.New(s.URL, testKey, 2), Checkpoint: refund.Journal(w, state), Workers: 2,
			OnResult: func(r refund.Result) { results <- r },
		}, pr, "<stdin>")
		done <- err
	}()
	io.WriteString(pw, `{"batch":"b1","item":"a","charge":"ch_sim0000001","amount":100}
{"batch":"b1","item":"b","charge":"ch_sim0000001","amount":100}
`)
	for range 2 {
		if r := bound(t, results, 10*time.Second, "a result while the plan is still open"); r.Status != refund.StatusRefunded {
			t.Errorf("result %+v, want refunded (two partial refunds of one charge)", r)
		}
	}
	stop() // SIGINT while the pipe is idle
	if err := bound(t, done, 10*time.Second, "Run's return after the stop"); !errors.Is(err, context.Canceled) {
		t.Errorf("Run returned %v, want canceled", err)
	}
}

// TestHaltStopsWorkersWaitingOnThePacer: the key is refused while other
// workers wait for the pacer (at one create an hour): the run ends at once.
func TestHaltStopsWorkersWaitingOnThePacer(t *testing.T) {
	s := newSim(t, 8, stripesim.Faults{})
	var once atomic.Bool
	var posts atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			posts.Add(1)
		}
		if r.Method == http.MethodPost && once.CompareAndSwap(false, true) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Request-Id", "req_401")
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"error":{"type":"invalid_request_error","code":"api_key_expired","message":"Expired API Key provided"}}`)
			return
		}
		proxyTo(w, r, s.URL)
	}))
	t.Cleanup(ts.Close)
	done := make(chan outcome, 1)
	go func() {
		done <- run(t, s, filepath.Join(t.TempDir(), "j.jsonl"), planLines("b1", 8, 100), runOpts{workers: 8, url: ts.URL, cfg: func(c *refund.Config) {
			c.Pacer = refund.NewPacer(refund.Limits{Create: 1.0 / 3600})
		}})
	}()
	o := bound(t, done, 10*time.Second, "Run's return after the halt")
	var h *refund.HaltError
	if !errors.As(o.err, &h) || h.Journal {
		t.Fatalf("err %v, want a halt for the refused key", o.err)
	}
	if posts.Load() != 1 {
		t.Errorf("%d creates, want only the refused one", posts.Load())
	}
}

// TestKeyUsedWithOtherParametersByThisItemStaysInDoubt: the plan's reason
// changed while the item's earlier call is still in flight. Stripe refuses
// the key's new parameters; that earlier call may still make the refund,
// so the item is in doubt, not failed with "nothing sent".
func TestKeyUsedWithOtherParametersByThisItemStaysInDoubt(t *testing.T) {
	s := newSim(t, 1, stripesim.Faults{})
	path := filepath.Join(t.TempDir(), "j.jsonl")
	appendRecord(t, path, &journal.Record{V: journal.Version, Type: journal.TypeIntent, Time: time.Now(), Batch: "B", Item: "x",
		Charge: "ch_sim0000001", Attempt: 1, Key: refund.IdempotencyKey("B", "x", 1), Amount: 100, Reason: "duplicate"})
	// The killed run's call, still in flight.
	release, orig := inFlight(t, s, refund.Item{Batch: "B", Item: "x", Charge: "ch_sim0000001", Amount: 100, Reason: "duplicate"}, 1)
	o := run(t, s, path, `{"batch":"B","item":"x","charge":"ch_sim0000001","amount":100,"reason":"requested_by_customer"}`+"\n", runOpts{})
	release()
	if err := <-orig; err != nil {
		t.Fatal(err)
	}
	if r := o.results["x"]; r.Status != refund.StatusInDoubt || !strings.Contains(r.Message, "may have made") {
		t.Fatalf("result %+v, want in doubt: the earlier call may have made the refund", r)
	}
	// Restored as it was, the item's refund is found; nothing more is sent.
	o = run(t, s, path, `{"batch":"B","item":"x","charge":"ch_sim0000001","amount":100,"reason":"duplicate"}`+"\n", runOpts{})
	if r := o.results["x"]; r.Status != refund.StatusRefunded || !r.Found {
		t.Fatalf("result %+v, want the earlier call's refund found", r)
	}
	wantOneRefundPerCharge(t, s, 1)
}
