package cli

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/checkpoint/postgres"
)

// TestOutcome names what became of a request, 429s apart.
func TestOutcome(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, "ok"},
		{&refund.Failure{Class: refund.ClassRetry, Status: 429, RateLimited: true, Err: errors.New("429")}, "rate_limited"},
		{&refund.Failure{Class: refund.ClassRetry, Status: 503, Err: errors.New("503")}, "retry"},
		{errors.New("connection reset"), "no_answer"},
		{&refund.Failure{Class: refund.ClassIndeterminate, Status: 500, Err: errors.New("500")}, "indeterminate"},
		{&refund.Failure{Class: refund.ClassFinal, Status: 400, Err: errors.New("400")}, "refused"},
		{&refund.Failure{Class: refund.ClassFatal, Status: 401, Err: errors.New("401")}, "unauthorized"},
	} {
		if got := outcome(c.err); got != c.want {
			t.Errorf("outcome(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// TestBatchWatchLine: the progress line's batch part counts all workers'
// items and takes its rate and ETA from the tallies, not from this run.
func TestBatchWatchLine(t *testing.T) {
	w := &progress{}
	t0 := time.Unix(1000, 0)
	if _, ok := w.batchLine(t0); ok {
		t.Fatal("a line before any tally")
	}
	w.observe(t0, []postgres.BatchInfo{{Batch: "b", Items: 100, ByStatus: map[string]int{"refunded": 10, "unknown": 90}}})
	line, ok := w.batchLine(t0)
	if !ok || !strings.Contains(line, "batch b: 10/100 (10%) by all workers · 10 refunded, 90 not started") || strings.Contains(line, "ETA") {
		t.Fatalf("first tally: %q", line)
	}
	// 20 more done in 10 seconds: 2 items/s, 70 left: 35s.
	w.observe(t0.Add(10*time.Second), []postgres.BatchInfo{{Batch: "b", Items: 100, ByStatus: map[string]int{"refunded": 28, "failed": 1, "pending": 1, "in_doubt": 2, "unknown": 68}}})
	line, _ = w.batchLine(t0.Add(10 * time.Second))
	for _, want := range []string{"30/100 (30%)", "2 in_doubt", "2.0 items/s", "ETA 35s"} {
		if !strings.Contains(line, want) {
			t.Errorf("second tally: %q lacks %q", line, want)
		}
	}
	// Between tallies the ETA counts down.
	if line, _ = w.batchLine(t0.Add(15 * time.Second)); !strings.Contains(line, "ETA 30s") {
		t.Errorf("5s after the tally: %q, want ETA 30s", line)
	}
	var nilWatch *progress
	if _, ok := nilWatch.batchLine(t0); ok {
		t.Error("a nil watch draws a line")
	}
}

// TestPreviousSuccessKept: a run that exits 0 sets the last success, the
// next that does not keeps it from the file.
func TestPreviousSuccessKept(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/r.prom"
	m := newRefundMetrics(path, metricLabels("w", ""), false, func(err error) { t.Error(err) })
	if err := m.finish(ExitOK, true, time.Unix(1700000000, 0)); err != nil {
		t.Fatal(err)
	}
	if got, ok := previousSuccess(path, refundLastSuccess); !ok || got != 1700000000 {
		t.Fatalf("after exit 0: %v %v", got, ok)
	}
	m = newRefundMetrics(path, metricLabels("w", ""), false, func(err error) { t.Error(err) })
	if err := m.finish(ExitFailed, true, time.Unix(1800000000, 0)); err != nil {
		t.Fatal(err)
	}
	if got, ok := previousSuccess(path, refundLastSuccess); !ok || got != 1700000000 {
		t.Fatalf("after exit 1: %v %v, want the success kept", got, ok)
	}
}
