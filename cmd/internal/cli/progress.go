package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/refundkit/refundkit/refund"
)

// progressWriter is stderr shared by messages and the progress line: a
// message first clears the line, which is drawn again after it, so neither
// lands in the middle of the other.
type progressWriter struct {
	mu   sync.Mutex
	w    io.Writer
	line string // the progress line on screen, "" when none
}

func newProgressWriter(w io.Writer) *progressWriter { return &progressWriter{w: w} }

// clearLine returns to the start of the line and erases it.
const clearLine = "\r\x1b[K"

func (p *progressWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.line != "" {
		io.WriteString(p.w, clearLine)
	}
	n, err := p.w.Write(b)
	if p.line != "" {
		io.WriteString(p.w, p.line)
	}
	return n, err
}

// show draws line in place of the current progress line ("" removes it).
func (p *progressWriter) show(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if line == p.line {
		return
	}
	io.WriteString(p.w, clearLine+line)
	p.line = line
}

// progress is refund's one-line display on a terminal: counts by outcome,
// items retrying, the rate of items settled through the API and, when the
// plan's size is known, the total and an ETA. A nil *progress shows nothing.
type progress struct {
	out *progressWriter
	// size is the plan's number of items as far as the run knows it
	// (refund.PlanSize.Items), asked at every frame: 0 is unknown.
	size func() int

	mu       sync.Mutex
	counts   map[string]int
	done     int       // results so far
	api      int       // results that took API calls (not skipped)
	firstAPI time.Time // when the first of them came
	waiting  int       // items waiting to retry
	// batch, with a shared checkpoint, is the batch's tally, all
	// workers': the line then shows it, and the ETA comes from its rate.
	batch *batchWatch

	// log, with --log-format json, takes the display as a "progress"
	// record every jsonProgressEvery instead: a JSON log never carries
	// the terminal's control bytes.
	log *slog.Logger

	stopOnce sync.Once
	quit     chan struct{}
	finished chan struct{}
}

// jsonProgressEvery spaces the progress records of a JSON log: a log
// pipeline wants a heartbeat, not five lines a second.
const jsonProgressEvery = 5 * time.Second

// newProgress starts the display when mode says so: always, or auto with
// stderr a terminal. With log (--log-format json) it is written as records
// of log, never drawn.
func newProgress(w *progressWriter, mode string, log *slog.Logger, total func() int) *progress {
	show := mode == "always"
	if mode == "auto" {
		f, ok := w.w.(*os.File)
		show = ok && term.IsTerminal(int(f.Fd()))
	}
	if !show {
		return nil
	}
	p := &progress{out: w, log: log, size: total, counts: map[string]int{}, quit: make(chan struct{}), finished: make(chan struct{})}
	go p.loop()
	return p
}

// loop redraws a few times a second: the rate, the ETA and the retries move
// between results too. A JSON log gets a record at the start, every
// jsonProgressEvery and at the end: its last record has the run's last
// counts, against the total known once the plan was read.
func (p *progress) loop() {
	defer close(p.finished)
	every := 200 * time.Millisecond
	if p.log != nil {
		every = jsonProgressEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if p.log != nil {
			p.log.Info("progress", p.attrs(time.Now())...)
		} else {
			p.out.show(p.line(time.Now()))
		}
		select {
		case <-t.C:
		case <-p.quit:
			if p.log != nil {
				p.log.Info("progress", p.attrs(time.Now())...)
			}
			return
		}
	}
}

// total is the plan's number of items, 0 when unknown. A total below the
// items done is unknown too: a count that the run outgrew (a plan edited
// after plan counted it) is never shown as more than 100%. The caller
// holds p.mu.
func (p *progress) total() int {
	n := p.size()
	if n < p.done {
		return 0
	}
	return n
}

func (p *progress) add(r refund.Result) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counts[r.Status]++
	p.done++
	if r.Status != refund.StatusSkipped {
		if p.api == 0 {
			p.firstAPI = time.Now()
		}
		p.api++
	}
}

// retrying counts items that start (+1) or end (-1) a wait to retry.
func (p *progress) retrying(delta int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.waiting += delta
	p.mu.Unlock()
}

// stop removes the line for good.
func (p *progress) stop() {
	if p == nil {
		return
	}
	p.stopOnce.Do(func() {
		close(p.quit)
		<-p.finished
		if p.log == nil {
			p.out.show("")
		}
	})
}

// line is the display at now. The rate counts only items settled through
// the API, from the first of them: skipped items go by at thousands a
// second and would make the first frames absurd.
func (p *progress) line(now time.Time) string {
	p.mu.Lock()
	w := p.batch
	p.mu.Unlock()
	if s, ok := w.line(now); ok {
		p.mu.Lock()
		defer p.mu.Unlock()
		return fmt.Sprintf("%s · this run %d items, %d retrying", s, p.done, p.waiting)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	b.WriteString("refund ")
	if total := p.total(); total > 0 {
		fmt.Fprintf(&b, "%d/%d (%d%%)", p.done, total, p.done*100/total)
	} else {
		fmt.Fprintf(&b, "%d items", p.done)
	}
	fmt.Fprintf(&b, " · %d refunded, %d skipped, %d failed, %d in doubt, %d retrying",
		p.counts[refund.StatusRefunded], p.counts[refund.StatusSkipped], p.counts[refund.StatusFailed], p.counts[refund.StatusInDoubt], p.waiting)
	if n := p.counts[refund.StatusPending]; n > 0 {
		fmt.Fprintf(&b, ", %d pending", n)
	}
	rate, eta := p.pace(now)
	if rate == 0 {
		return b.String()
	}
	fmt.Fprintf(&b, " · %.1f items/s", rate)
	if eta > 0 {
		fmt.Fprintf(&b, " · ETA %s", eta.Round(time.Second))
	}
	return b.String()
}

// pace is this run's rate of items settled through the API at now, and
// the ETA when the plan's size is known; 0s until two items and a second.
// The caller holds p.mu.
func (p *progress) pace(now time.Time) (rate float64, eta time.Duration) {
	elapsed := now.Sub(p.firstAPI)
	if p.api < 2 || elapsed < time.Second {
		return 0, 0
	}
	rate = float64(p.api-1) / elapsed.Seconds()
	if total := p.total(); total > p.done {
		eta = time.Duration(float64(total-p.done) / rate * float64(time.Second))
	}
	return rate, eta
}

// attrs is the display at now as a log record's fields: this run's counts,
// and the batch's, all workers', with a shared checkpoint.
func (p *progress) attrs(now time.Time) []any {
	p.mu.Lock()
	w := p.batch
	p.mu.Unlock()
	var out []any
	if tally, done, total, rate, ok := w.snapshot(); ok {
		by := map[string]int{}
		for _, b := range tally {
			for st, n := range b.ByStatus {
				by[st] += n
			}
		}
		out = append(out, slog.Group("batch", "done", done, "total", total, "by_status", by, "items_per_second", rate))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	counts := make(map[string]int, len(p.counts))
	for st, n := range p.counts {
		counts[st] = n
	}
	out = append(out, "done", p.done, "by_status", counts, "retrying", p.waiting)
	if total := p.total(); total > 0 {
		out = append(out, "total", total)
	}
	if rate, eta := p.pace(now); rate > 0 {
		out = append(out, "items_per_second", rate)
		if eta > 0 {
			out = append(out, "eta_seconds", int64(eta.Round(time.Second)/time.Second))
		}
	}
	return out
}

// batchWatch reads the tally of the run's batches from a PostgreSQL
// checkpoint every interval (one query grouping the batch's items by
// status, Checkpoint.Progress), for the progress line and the metrics: the
// batch's counts across all workers, and its rate, items done over time
// by all of them, from which the ETA follows. A nil *batchWatch watches
// nothing.
type batchWatch struct {
	cp      refund.Tallier
	onTally func([]refund.BatchInfo)

	mu     sync.Mutex
	tally  []refund.BatchInfo
	first  batchSample // the first tally that named a batch
	latest batchSample

	stopOnce sync.Once
	cancel   context.CancelFunc
	finished chan struct{}
}

// batchSample is how many of the batches' items were done at a time.
type batchSample struct {
	at          time.Time
	done, total int
}

// watchBatches starts a watch of cp's batches every interval; onTally,
// when set, hears each tally. A cp that is not a shared checkpoint is
// no watch.
func watchBatches(cp refund.Checkpoint, every time.Duration, onTally func([]refund.BatchInfo)) *batchWatch {
	tallier, ok := cp.(refund.Tallier)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &batchWatch{cp: tallier, onTally: onTally, cancel: cancel, finished: make(chan struct{})}
	go func() {
		defer close(w.finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			w.poll(ctx)
			select {
			case <-t.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	return w
}

// poll reads the tally once; a failed read keeps the last one (the run
// itself says when the database is gone).
func (w *batchWatch) poll(ctx context.Context) {
	bs, err := w.cp.Progress(ctx)
	if err != nil || len(bs) == 0 {
		return
	}
	w.observe(time.Now(), bs)
}

// observe takes the tally bs read at now.
func (w *batchWatch) observe(now time.Time, bs []refund.BatchInfo) {
	s := batchSample{at: now}
	for _, b := range bs {
		s.done += tallyDone(b)
		s.total += int(b.Items)
	}
	w.mu.Lock()
	w.tally, w.latest = bs, s
	if w.first.at.IsZero() {
		w.first = s
	}
	w.mu.Unlock()
	if w.onTally != nil {
		w.onTally(bs)
	}
}

// stop ends the watch.
func (w *batchWatch) stop() {
	if w == nil {
		return
	}
	w.stopOnce.Do(func() {
		w.cancel()
		<-w.finished
	})
}

// rate is the batches' items done per second by all workers since the
// watch's first tally; 0 until a second has passed and an item was done.
func (w *batchWatch) rate() float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.latest.at.Sub(w.first.at)
	if d < time.Second || w.latest.done <= w.first.done {
		return 0
	}
	return float64(w.latest.done-w.first.done) / d.Seconds()
}

// snapshot is the latest tally with its done and total items and the
// batches' rate; false before the first tally.
func (w *batchWatch) snapshot() (tally []refund.BatchInfo, done, total int, rate float64, ok bool) {
	if w == nil {
		return nil, 0, 0, 0, false
	}
	rate = w.rate()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.latest.at.IsZero() || w.latest.total == 0 {
		return nil, 0, 0, 0, false
	}
	return w.tally, w.latest.done, w.latest.total, rate, true
}

// line is the batch's part of the progress line at now; false before the
// first tally.
func (w *batchWatch) line(now time.Time) (string, bool) {
	if w == nil {
		return "", false
	}
	rate := w.rate()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.latest.at.IsZero() || w.latest.total == 0 {
		return "", false
	}
	by := map[string]int{}
	for _, b := range w.tally {
		for st, n := range b.ByStatus {
			by[st] += n
		}
	}
	var b strings.Builder
	what := "batch " + w.tally[0].Batch
	if len(w.tally) > 1 {
		what = fmt.Sprintf("%d batches", len(w.tally))
	}
	fmt.Fprintf(&b, "refund %s: %d/%d (%d%%) by all workers · %s", what, w.latest.done, w.latest.total, w.latest.done*100/w.latest.total, countsText(by))
	if rate > 0 {
		fmt.Fprintf(&b, " · %.1f items/s", rate)
		if left := w.latest.total - w.latest.done; left > 0 {
			// From the tally's time: the rate holds between tallies.
			eta := time.Duration(float64(left)/rate*float64(time.Second)) - now.Sub(w.latest.at)
			fmt.Fprintf(&b, " · ETA %s", max(eta, 0).Round(time.Second))
		}
	}
	return b.String(), true
}
