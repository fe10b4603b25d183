package cli

// --metrics-file (issue 22) through the real binaries: the file parses
// with Prometheus' own parser, its counts are the run's summary, it is
// replaced atomically, and its last success moves only on exit 0.

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/refundkit/refundkit/refund/money"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// readMetrics parses the metrics file at path.
func readMetrics(t *testing.T, path string) map[string]*dto.MetricFamily {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mfs, err := parseMetrics(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return mfs
}

// metricSum adds up the values of family name's series whose labels
// include want.
func metricSum(mfs map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	sum := 0.0
	mf := mfs[name]
	if mf == nil {
		return 0
	}
series:
	for _, m := range mf.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue series
			}
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		}
	}
	return sum
}

// summaryCount is the number before what in refund's summary line on
// stderr ("3 in_doubt", "12 create").
func summaryCount(t *testing.T, stderr, what string) float64 {
	t.Helper()
	line := regexp.MustCompile(`refund: \d+ items?\b[^\n]*`).FindString(stderr)
	pat := regexp.QuoteMeta(what)
	if what == "items" {
		pat = "items?"
	}
	m := regexp.MustCompile(`(\d+) ` + pat + `\b`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no %q in the summary:\n%s", what, stderr)
	}
	n, _ := strconv.ParseFloat(m[1], 64)
	return n
}

// checkMetricsMatchSummary asserts that the metrics file's counts are
// the summary's on stderr: items by status, amounts refunded, calls,
// 429s.
func checkMetricsMatchSummary(t *testing.T, mfs map[string]*dto.MetricFamily, stderr string) {
	t.Helper()
	for _, st := range []string{"refunded", "skipped", "failed", "in_doubt"} {
		if got, want := metricSum(mfs, "refundkit_refund_items_total", map[string]string{"status": st}), summaryCount(t, stderr, st); got != want {
			t.Errorf("items %s: metrics say %v, the summary %v", st, got, want)
		}
	}
	if got, want := metricSum(mfs, "refundkit_refund_items_total", nil), summaryCount(t, stderr, "items"); got != want {
		t.Errorf("items: metrics say %v, the summary %v", got, want)
	}
	for endpoint, what := range map[string]string{"create": "creates", "payment": "payment reads", "list": "refund lists", "get": "refund reads"} {
		if got, want := metricSum(mfs, "refundkit_refund_requests_total", map[string]string{"endpoint": endpoint}), summaryCount(t, stderr, what); got != want {
			t.Errorf("%s: metrics say %v, the summary %v", what, got, want)
		}
	}
	if got, want := metricSum(mfs, "refundkit_refund_requests_total", map[string]string{"outcome": "rate_limited"}), summaryCount(t, stderr, "rate-limited"); got != want {
		t.Errorf("429s: metrics say %v, the summary %v", got, want)
	}
	for _, found := range []string{"false", "true"} {
		amount := metricSum(mfs, "refundkit_refund_refunded_minor_units_total", map[string]string{"currency": "usd", "found": found})
		what := "refunded "
		if found == "true" {
			what = "found at Stripe (refunded earlier) "
		}
		if amount == 0 {
			if strings.Contains(stderr, "; "+what) {
				t.Errorf("the summary names %s, the metrics none", what)
			}
			continue
		}
		if s := "; " + what + money.Format(int64(amount), "usd"); !strings.Contains(stderr, s) {
			t.Errorf("metrics say %q, the summary does not:\n%s", s, stderr)
		}
	}
}

// TestMetricsFileMatchesSummary: a run with 429s and 500s left in doubt,
// its rerun that settles them, and a run that fails: each file parses, its
// counts are the summary's, and the last success is set by the run that
// exits 0 and kept by the one after it that does not.
func TestMetricsFileMatchesSummary(t *testing.T) {
	const items = 40
	r := newCrashRig(t, items, stripesim.Faults{RateLimitShare: 0.2, ErrorAfterCommitShare: 0.15})
	j := filepath.Join(r.dir, "j.jsonl")
	prom := filepath.Join(r.dir, "refund.prom")

	run := func(plan string) (*crashrig.Proc, map[string]*dto.MetricFamily) {
		t.Helper()
		p, err := crashrig.Start(crashrig.Cmd{Bin: r.bin, Args: []string{"--journal", j, "--rate", "0", "--metrics-file", prom, plan},
			Env: crashrig.Env(scriptKey, r.sim.URL())})
		if err != nil {
			t.Fatal(err)
		}
		p.Wait()
		info, err := os.Stat(prom)
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != metricsFileMode {
			t.Errorf("%s is %v, want %v", prom, info.Mode().Perm(), os.FileMode(metricsFileMode))
		}
		mfs := readMetrics(t, prom)
		checkMetricsMatchSummary(t, mfs, p.Stderr.String())
		if got := metricSum(mfs, "refundkit_refund_exit_code", nil); got != float64(p.Code) {
			t.Errorf("exit code %v in the file, the run's %d", got, p.Code)
		}
		return p, mfs
	}

	first, mfs := run(r.plan)
	if first.Code != ExitFailed || metricSum(mfs, "refundkit_refund_items_total", map[string]string{"status": "in_doubt"}) == 0 {
		t.Fatalf("the first run should leave items in doubt (exit 1), exit %d:\n%s", first.Code, &first.Stderr)
	}
	if _, ok := mfs[refundLastSuccess]; ok {
		t.Errorf("a run that exits 1 with no earlier success wrote %s", refundLastSuccess)
	}
	if got := metricSum(mfs, "refundkit_batch_items", nil); got != items {
		t.Errorf("batch items %v, want %d", got, items)
	}

	r.sim.SetFaults(stripesim.Faults{RateLimitShare: 0.2})
	before := float64(time.Now().Unix())
	second, mfs := run(r.plan)
	if second.Code != ExitOK {
		t.Fatalf("the rerun: exit %d:\n%s", second.Code, &second.Stderr)
	}
	success := metricSum(mfs, refundLastSuccess, nil)
	if success < before {
		t.Fatalf("last success %v after a run that exited 0 at or after %v", success, before)
	}
	if got := metricSum(mfs, "refundkit_batch_items_done", nil); got != items {
		t.Errorf("batch done %v, want %d", got, items)
	}

	// An item on a charge Stripe does not have fails for good: exit 1.
	bad := filepath.Join(r.dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte(`{"batch":"`+crashBatch+`","item":"nope","charge":"ch_nope"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	third, mfs := run(bad)
	if third.Code == ExitOK {
		t.Fatalf("a plan of an unknown charge: exit 0:\n%s", &third.Stderr)
	}
	if got := metricSum(mfs, refundLastSuccess, nil); got != success {
		t.Errorf("a failed run after a success: last success %v, want the success's %v kept", got, success)
	}

	// audit writes its own: findings by kind, the exit code, no success.
	aprom := filepath.Join(r.dir, "audit.prom")
	p, err := crashrig.Start(crashrig.Cmd{Bin: auditBin(t), Args: []string{"--metrics-file", aprom, j}})
	if err != nil {
		t.Fatal(err)
	}
	p.Wait()
	amfs := readMetrics(t, aprom)
	if got := metricSum(amfs, "refundkit_audit_exit_code", nil); got != float64(p.Code) || p.Code != ExitFailed {
		t.Errorf("audit exit %d, the file says %v (want 1: the failed item is a finding)", p.Code, got)
	}
	if got := metricSum(amfs, "refundkit_audit_findings", nil); got == 0 {
		t.Errorf("audit's findings: none in the file:\n%s", &p.Stderr)
	}
	if got := metricSum(amfs, "refundkit_audit_items", map[string]string{"status": "refunded"}); got != items {
		t.Errorf("audit's refunded items %v, want %d", got, items)
	}
	if _, ok := amfs[auditLastSuccess]; ok {
		t.Errorf("an audit with findings wrote %s", auditLastSuccess)
	}
}

func auditBin(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("audit")
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestMetricsFileReplacedAtomically: a reader that reads the file over and
// over while refund rewrites it every few milliseconds sees, every time, a
// whole file that Prometheus' parser reads, until it has seen it replaced
// many times.
func TestMetricsFileReplacedAtomically(t *testing.T) {
	const rewrites = 30
	// Long enough to outlast the reader: 2000 items of two calls each,
	// 10ms a call, 8 at a time.
	r := newCrashRig(t, 2000, stripesim.Faults{Latency: 10 * time.Millisecond})
	prom := filepath.Join(r.dir, "refund.prom")
	p, _ := r.start(filepath.Join(r.dir, "j.jsonl"), "--metrics-file", prom, "--metrics-every", "2ms")
	go p.Wait()

	type version struct {
		ino  uint64
		mod  time.Time
		size int64
	}
	var last version
	seen := 0
	for seen < rewrites {
		select {
		case <-p.Exited():
			t.Fatalf("refund ended after %d rewrites were seen, want %d: %s", seen, rewrites, &p.Stderr)
		default:
		}
		f, err := os.Open(prom)
		if os.IsNotExist(err) {
			continue // not written yet
		}
		if err != nil {
			t.Fatal(err)
		}
		info, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := parseMetrics(bytes.NewReader(b)); err != nil {
			t.Fatalf("a read of the file after %d rewrites: %v:\n%s", seen, err, b)
		}
		// The last family of each write: a file cut short lacks it.
		if !bytes.HasSuffix(b, []byte("\n")) || !bytes.Contains(b, []byte("\nrefundkit_refund_start_time_seconds")) {
			t.Fatalf("a read of the file after %d rewrites is not whole:\n%s", seen, b)
		}
		// A rewrite is a new file (renamed over the old one); a writer
		// that rewrote the file in place would show a new time or size.
		if v := (version{info.Sys().(*syscall.Stat_t).Ino, info.ModTime(), info.Size()}); v != last {
			seen++
			last = v
		}
	}
	p.Cmd.Process.Signal(os.Interrupt)
	<-p.Exited()
	if p.Code != 130 {
		t.Errorf("refund after SIGINT: exit %d, want 130: %s", p.Code, &p.Stderr)
	}
	mfs := readMetrics(t, prom)
	if got := metricSum(mfs, "refundkit_refund_exit_code", nil); got != 130 {
		t.Errorf("exit code %v in the file after SIGINT, want 130", got)
	}
	checkMetricsMatchSummary(t, mfs, p.Stderr.String())
	// No temporary file is left beside it.
	ents, _ := os.ReadDir(r.dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".refund.prom") {
			t.Errorf("%s left in %s", e.Name(), r.dir)
		}
	}
}

// TestPGBatchProgressAcrossWorkers: two workers on one checkpoint, each
// with its own metrics file. Each prints its own items' results and
// summary; the batch's total and done are all workers', in the final
// summary's tally line and in each worker's file, and the workers' own
// counts add up to the batch.
func TestPGBatchProgressAcrossWorkers(t *testing.T) {
	const items = 30
	r := newPGRig(t, items, stripesim.Faults{Latency: 5 * time.Millisecond})
	var procs []*crashrig.Proc
	for _, w := range []string{"w1", "w2"} {
		p := r.start(w, "--metrics-file", filepath.Join(r.dir, w+".prom"), "--metrics-every", "50ms", "--progress", "always")
		go p.Wait()
		procs = append(procs, p)
	}
	total := 0.0
	for i, p := range procs {
		waitExit(t, p, 2*time.Minute)
		if p.Code != ExitOK {
			t.Fatalf("worker %d: exit %d: %s", i+1, p.Code, &p.Stderr)
		}
		tally := fmt.Sprintf("checkpoint: batch %s: %d items (%d refunded), by all workers", crashBatch, items, items)
		if !strings.Contains(p.Stderr.String(), tally) {
			t.Errorf("worker %d's summary does not name the batch's totals (%q):\n%s", i+1, tally, &p.Stderr)
		}
		mfs := readMetrics(t, filepath.Join(r.dir, fmt.Sprintf("w%d.prom", i+1)))
		batch := map[string]string{"batch": crashBatch, "worker": fmt.Sprintf("w%d", i+1)}
		if got := metricSum(mfs, "refundkit_batch_items", batch); got != items {
			t.Errorf("worker %d: batch items %v, want %d", i+1, got, items)
		}
		if got := metricSum(mfs, "refundkit_batch_items_done", batch); got != items {
			t.Errorf("worker %d: batch done %v, want %d (all workers')", i+1, got, items)
		}
		total += metricSum(mfs, "refundkit_refund_items_total", map[string]string{"status": "refunded"})
		checkMetricsMatchSummary(t, mfs, p.Stderr.String())
	}
	if total != items {
		t.Errorf("the workers' own refunded items add up to %v, want %d", total, items)
	}
	r.checkExactlyOnce()
}
