package cli

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/renameio/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/audit"
)

// --metrics-file, for node_exporter's textfile collector. renameio fsyncs
// before the rename: prometheus.WriteToTextfile's file can be empty after a crash.

// metricsFileMode: counts, no secret, and node_exporter must read them.
const metricsFileMode = 0o644

// metricsFile writes a registry to a file every interval and at close.
type metricsFile struct {
	path    string
	reg     *prometheus.Registry
	refresh func() // sets the gauges read at each write; nil for none
	warn    func(error)

	mu     sync.Mutex // one write at a time
	warned sync.Once
	stop   func()
}

func newMetricsFile(path string, reg *prometheus.Registry, warn func(error)) *metricsFile {
	return &metricsFile{path: path, reg: reg, warn: warn, stop: func() {}}
}

func (m *metricsFile) write() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.refresh != nil {
		m.refresh()
	}
	mfs, err := m.reg.Gather()
	if err != nil {
		return err
	}
	f, err := renameio.NewPendingFile(m.path, renameio.WithTempDir(filepath.Dir(m.path)), renameio.WithStaticPermissions(metricsFileMode))
	if err != nil {
		return err
	}
	defer f.Cleanup()
	w := bufio.NewWriter(f)
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(w, mf); err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.CloseAtomicallyReplace()
}

// writeOrWarn tells a failure once: no reason to stop the run.
func (m *metricsFile) writeOrWarn() {
	if err := m.write(); err != nil {
		m.warned.Do(func() { m.warn(err) })
	}
}

func (m *metricsFile) start(interval time.Duration) { m.stop = every(interval, false, m.writeOrWarn) }

func (m *metricsFile) close() error {
	m.stop()
	return m.write()
}

// previousSuccess is the last success an earlier run wrote to path.
func previousSuccess(path, name string) (float64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	mfs, err := parseMetrics(f)
	if err != nil {
		return 0, false
	}
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
	best, ok := 0.0, false
	for _, m := range mf.GetMetric() {
		if v := m.GetGauge().GetValue(); !math.IsNaN(v) && v > best {
			best, ok = v, true
		}
	}
	return best, ok
}

func parseMetrics(r io.Reader) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(r)
}

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

func gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

// metricLabels tell two runs' files apart (node_exporter refuses duplicates).
func metricLabels(worker, shard string) prometheus.Labels {
	l := prometheus.Labels{}
	if worker != "" {
		l["worker"] = worker
	}
	if shard != "" {
		l["shard"] = shard
	}
	return l
}

// refundMetrics are the run's results, its requests and the batch's progress.
type refundMetrics struct {
	file *metricsFile

	items, refunds, amounts, requests *prometheus.CounterVec
	batchItems, batchDone, inDoubt    *prometheus.GaugeVec
	lastSuccess, exitCode             prometheus.Gauge
	reg                               prometheus.Registerer

	mu       sync.Mutex
	own      map[string]*batchOwn // this run's results by batch (a file journal's progress)
	tally    []refund.BatchInfo   // the checkpoint's, when it has one
	shared   bool
	complete bool // the whole plan was read: a file journal's total is known
}

// batchOwn is what this run's results say of a batch.
type batchOwn struct{ results, inDoubt int }

const refundLastSuccess = "refundkit_refund_last_success_timestamp_seconds"

func newRefundMetrics(path string, labels prometheus.Labels, shared bool, warn func(error)) *refundMetrics {
	root := prometheus.NewRegistry()
	reg := prometheus.WrapRegistererWith(labels, root)
	m := &refundMetrics{reg: reg, shared: shared, own: map[string]*batchOwn{}}
	m.items = counterVec("refundkit_refund_items_total", "Items this run settled, skipped or left in doubt, by result status (the summary's counts).", "batch", "status")
	m.refunds = counterVec("refundkit_refund_refunds_total", "Refunds this run made (found=false) or found made earlier and adopted (found=true), by currency.", "batch", "currency", "found")
	m.amounts = counterVec("refundkit_refund_refunded_minor_units_total", "Amounts of those refunds in the currency's minor units (cents), by currency.", "batch", "currency", "found")
	m.requests = counterVec("refundkit_refund_requests_total", "Requests to the provider by endpoint and outcome (rate_limited: its 429s).", "provider", "endpoint", "outcome")
	m.batchItems = gaugeVec("refundkit_batch_items", "Items of the batch's plan (all workers' with a PostgreSQL checkpoint).", "batch")
	m.batchDone = gaugeVec("refundkit_batch_items_done", "Items of the batch with an outcome: refunded, pending, failed or refunded twice (all workers' with a PostgreSQL checkpoint).", "batch")
	m.inDoubt = gaugeVec("refundkit_batch_items_in_doubt", "Items of the batch in doubt: sent, outcome unknown until looked up (all workers' with a PostgreSQL checkpoint).", "batch")
	m.lastSuccess = gauge(refundLastSuccess, "When a run last ended with exit 0 (the batch done), as a Unix time; kept from the file's previous value by a run that does not.")
	m.exitCode = gauge("refundkit_refund_exit_code", "The exit code of the run that wrote the file, once it ended.")
	start := gauge("refundkit_refund_start_time_seconds", "When the run that wrote the file started, as a Unix time.")
	start.SetToCurrentTime()
	reg.MustRegister(m.items, m.refunds, m.amounts, m.requests, m.batchItems, m.batchDone, m.inDoubt, start)
	if t, ok := previousSuccess(path, refundLastSuccess); ok {
		m.lastSuccess.Set(t)
		reg.MustRegister(m.lastSuccess)
	}
	m.file = newMetricsFile(path, root, warn)
	m.file.refresh = m.refreshBatches
	return m
}

// result counts r as Summary.add does.
func (m *refundMetrics) result(r refund.Result) {
	if m == nil {
		return
	}
	m.items.WithLabelValues(r.Batch, r.Status).Inc()
	if r.Status == refund.StatusRefunded && r.Amount > 0 {
		found := fmt.Sprint(r.Found)
		m.refunds.WithLabelValues(r.Batch, r.Currency, found).Inc()
		m.amounts.WithLabelValues(r.Batch, r.Currency, found).Add(float64(r.Amount))
	}
	m.mu.Lock()
	b := m.own[r.Batch]
	if b == nil {
		b = &batchOwn{}
		m.own[r.Batch] = b
	}
	b.results++
	if r.Status == refund.StatusInDoubt {
		b.inDoubt++
	}
	m.mu.Unlock()
}

// batches takes the checkpoint's tally of the run's batches.
func (m *refundMetrics) batches(bs []refund.BatchInfo) {
	if m == nil || bs == nil {
		return
	}
	m.mu.Lock()
	m.tally = bs
	m.mu.Unlock()
}

// refreshBatches sets the batch gauges from the tally, or this run's results.
func (m *refundMetrics) refreshBatches() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.shared {
		for _, b := range m.tally {
			m.batchItems.WithLabelValues(b.Batch).Set(float64(b.Items))
			m.batchDone.WithLabelValues(b.Batch).Set(float64(tallyDone(b)))
			m.inDoubt.WithLabelValues(b.Batch).Set(float64(b.ByStatus["in_doubt"]))
		}
		return
	}
	for batch, b := range m.own {
		if m.complete {
			m.batchItems.WithLabelValues(batch).Set(float64(b.results))
		}
		m.batchDone.WithLabelValues(batch).Set(float64(b.results - b.inDoubt))
		m.inDoubt.WithLabelValues(batch).Set(float64(b.inDoubt))
	}
}

// tallyDone counts a batch's items with an outcome, all workers'.
func tallyDone(b refund.BatchInfo) int {
	return b.ByStatus["refunded"] + b.ByStatus["pending"] + b.ByStatus["failed"] + b.ByStatus["duplicate"]
}

// finish writes the file a last time; last success moves only on exit 0.
func (m *refundMetrics) finish(exit int, complete bool, now time.Time) error {
	m.mu.Lock()
	m.complete = complete
	m.mu.Unlock()
	m.exitCode.Set(float64(exit))
	m.reg.Register(m.exitCode)
	if exit == ExitOK {
		m.lastSuccess.Set(float64(now.UnixNano()) / 1e9)
		m.reg.Register(m.lastSuccess) // AlreadyRegistered when kept
	}
	return m.file.close()
}

// countingProvider counts requests by endpoint and outcome (not ErrNoLookup).
type countingProvider struct {
	refund.Provider
	name     string
	requests *prometheus.CounterVec
}

func (m *refundMetrics) provider(p refund.Provider) refund.Provider {
	if m == nil || p == nil {
		return p
	}
	return countingProvider{Provider: p, name: strings.ToLower(p.Facts().Name), requests: m.requests}
}

func (p countingProvider) count(endpoint string, err error) error {
	if !errors.Is(err, refund.ErrNoLookup) {
		p.requests.WithLabelValues(p.name, endpoint, outcome(err)).Inc()
	}
	return err
}

// outcome names what became of a request.
func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	switch f := refund.Classify(err); {
	case f.RateLimited:
		return "rate_limited"
	case f.Class == refund.ClassRetry && f.Status == 0:
		return "no_answer"
	default:
		return cmp.Or(outcomes[f.Class], "error")
	}
}

var outcomes = map[refund.Class]string{refund.ClassRetry: "retry", refund.ClassIndeterminate: "indeterminate", refund.ClassFinal: "refused",
	refund.ClassFatal: "unauthorized", refund.ClassKeyReused: "key_reused", refund.ClassStopped: "stopped", refund.ClassInDoubt: "in_doubt"}

func (p countingProvider) Create(ctx context.Context, it *refund.Item, attempt int) (refund.Answer, error) {
	a, err := p.Provider.Create(ctx, it, attempt)
	return a, p.count("create", err)
}

func (p countingProvider) Find(ctx context.Context, pay refund.Payment) ([]refund.Refund, error) {
	rs, err := p.Provider.Find(ctx, pay)
	return rs, p.count("list", err)
}

// Kept forwards a PaymentKeeper's: no request, nothing counted.
func (p countingProvider) Kept(pay refund.Payment) (refund.PaymentInfo, bool) {
	if k, ok := p.Provider.(refund.PaymentKeeper); ok {
		return k.Kept(pay)
	}
	return refund.PaymentInfo{}, false
}

func (p countingProvider) Payment(ctx context.Context, pay refund.Payment) (refund.PaymentInfo, error) {
	info, err := p.Provider.Payment(ctx, pay)
	if info.Kept {
		return info, err // the look-up's read: no request sent
	}
	return info, p.count("payment", err)
}

func (p countingProvider) Cancel(ctx context.Context, id string) (refund.Refund, error) {
	r, err := p.Provider.Cancel(ctx, id)
	return r, p.count("cancel", err)
}

func (p countingProvider) Get(ctx context.Context, id string) (refund.Refund, error) {
	r, err := p.Provider.Get(ctx, id)
	return r, p.count("get", err)
}

const auditLastSuccess = "refundkit_audit_last_success_timestamp_seconds"

// writeAuditMetrics writes audit's metrics at its exit.
func writeAuditMetrics(path string, rep *audit.Report, exit int, now time.Time) error {
	reg := prometheus.NewRegistry()
	findings := gaugeVec("refundkit_audit_findings", "Findings of the last audit, by kind.", "kind")
	items := gaugeVec("refundkit_audit_items", "Items the last audit read, by what the checkpoint says of them (none: planned, never journaled).", "status")
	exitCode := gauge("refundkit_audit_exit_code", "The exit code of the audit that wrote the file.")
	last := gauge(auditLastSuccess, "When an audit last ended with exit 0 (no findings), as a Unix time; kept from the file's previous value by one that does not.")
	reg.MustRegister(findings, items, exitCode)
	if rep != nil {
		for kind, n := range rep.Findings {
			findings.WithLabelValues(kind).Set(float64(n))
		}
		for st, n := range rep.ByStatus {
			items.WithLabelValues(st).Set(float64(n))
		}
	}
	exitCode.Set(float64(exit))
	if exit == ExitOK {
		last.Set(float64(now.UnixNano()) / 1e9)
		reg.MustRegister(last)
	} else if t, ok := previousSuccess(path, auditLastSuccess); ok {
		last.Set(t)
		reg.MustRegister(last)
	}
	return newMetricsFile(path, reg, nil).write()
}

// startMetrics writes --metrics-file once: refused before anything is sent.
func (c *refundCmd) startMetrics(msgs io.Writer, name string) (*refundMetrics, error) {
	if c.MetricsFile == "" {
		return nil, nil
	}
	if c.MetricsEvery <= 0 {
		return nil, fmt.Errorf("--metrics-every %s: want more than 0", c.MetricsEvery)
	}
	m := newRefundMetrics(c.MetricsFile, metricLabels(c.Worker, c.Shard), isShared(c.Journal) && !c.DryRun, func(err error) {
		warnf(msgs, name, "--metrics-file: %v (the run goes on)", err)
	})
	if err := m.file.write(); err != nil {
		return nil, fmt.Errorf("--metrics-file: %w", err)
	}
	m.file.start(c.MetricsEvery)
	return m, nil
}

// finishOrWarn is finish, told on stderr when the last write fails.
func (m *refundMetrics) finishOrWarn(exit int, planRead bool) {
	if m == nil {
		return
	}
	if err := m.finish(exit, planRead, time.Now()); err != nil {
		m.file.warn(err)
	}
}
