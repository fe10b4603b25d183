package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/refundkit/refundkit/refund"
)

// every calls f every d (first at once when now) until stop, which waits.
func every(d time.Duration, now bool, f func()) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(d)
		defer t.Stop()
		if now {
			f()
		}
		for {
			select {
			case <-t.C:
				f()
			case <-quit:
				return
			}
		}
	}()
	return sync.OnceFunc(func() {
		close(quit)
		<-done
	})
}

// progressWriter is stderr shared by messages and the progress line.
type progressWriter struct {
	mu   sync.Mutex
	w    io.Writer
	line string // the progress line on screen, "" when none
}

func newProgressWriter(w io.Writer) *progressWriter { return &progressWriter{w: w} }

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
	if line != p.line {
		io.WriteString(p.w, clearLine+line)
		p.line = line
	}
}

func isTerminal(x any) bool {
	f, ok := x.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progress is refund's one-line display, and the shared checkpoint's tally
// of the run's batches (all workers') that it and the metrics poll; a nil
// *progress shows and polls nothing.
type progress struct {
	out  *progressWriter
	size func() int // the plan's items as far as the run knows (0: unknown)
	// log, with --log-format json, takes "progress" records instead.
	log *slog.Logger

	mu            sync.Mutex
	counts        map[string]int
	done          int       // results so far
	api           int       // results that took API calls (not skipped)
	firstAPI      time.Time // when the first of them came
	waiting       int       // items waiting to retry
	tally         []refund.BatchInfo
	first, latest batchSample // the first tally that named a batch, the latest

	stop func()
}

// batchSample is how many of the batches' items were done at a time.
type batchSample struct {
	at          time.Time
	done, total int
}

// jsonProgressEvery spaces the progress records of a JSON log.
const jsonProgressEvery = 5 * time.Second

// progress starts the display (--progress always, or auto with stderr a
// terminal) and, with a shared checkpoint, the polls of its tally for the
// display and the metrics (a dry run's tally is no run's).
func (c *refundCmd) progress(w *progressWriter, log *slog.Logger, total func() int, cp refund.Checkpoint, m *refundMetrics) *progress {
	show := c.Progress == "always" || c.Progress == "auto" && isTerminal(w.w)
	tallier, shared := cp.(refund.Tallier)
	poll := shared && !c.DryRun && (show || m != nil)
	if !show && !poll {
		return nil
	}
	p := &progress{out: w, log: log, size: total, counts: map[string]int{}}
	var stops []func()
	if show {
		draw, d := func() { p.out.show(p.line(time.Now())) }, 200*time.Millisecond
		if log != nil {
			draw, d = func() { p.log.Info("progress", p.attrs(time.Now())...) }, jsonProgressEvery
		}
		stop := every(d, true, draw)
		stops = append(stops, func() {
			stop()
			if log != nil {
				draw() // the run's last counts, against the total known at the end
			} else {
				p.out.show("")
			}
		})
	}
	if poll {
		interval := c.MetricsEvery
		if show {
			interval = min(interval, 2*time.Second)
		}
		// A failed read keeps the last tally (the run reports it).
		ctx, cancel := context.WithCancel(context.Background())
		stop := every(interval, true, func() {
			if bs, err := tallier.Progress(ctx); err == nil && len(bs) > 0 {
				p.observe(time.Now(), bs)
				m.batches(bs)
			}
		})
		stops = append(stops, func() {
			cancel()
			stop()
		})
	}
	p.stop = sync.OnceFunc(func() {
		for _, stop := range stops {
			stop()
		}
	})
	return p
}

// total is the plan's size, 0 when unknown or below done. Holds p.mu.
func (p *progress) total() int {
	if n := p.size(); n >= p.done {
		return n
	}
	return 0
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

func (p *progress) end() {
	if p != nil {
		p.stop()
	}
}

func (p *progress) observe(now time.Time, bs []refund.BatchInfo) {
	s := batchSample{at: now}
	for _, b := range bs {
		s.done += tallyDone(b)
		s.total += int(b.Items)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tally, p.latest = bs, s
	if p.first.at.IsZero() {
		p.first = s
	}
}

// line is the display at now; skipped items go by too fast to count in the rate.
func (p *progress) line(now time.Time) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if batch, ok := p.batchLine(now); ok {
		return fmt.Sprintf("%s · this run %d items, %d retrying", batch, p.done, p.waiting)
	}
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
	if rate, eta := p.pace(now); rate > 0 {
		fmt.Fprintf(&b, " · %.1f items/s", rate)
		if eta > 0 {
			fmt.Fprintf(&b, " · ETA %s", eta.Round(time.Second))
		}
	}
	return b.String()
}

// pace is the rate of items settled through the API, and the ETA. Holds p.mu.
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

// attrs is the display at now as a log record's fields.
func (p *progress) attrs(now time.Time) []any {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []any
	if rate, ok := p.batchRate(); ok {
		out = append(out, slog.Group("batch", "done", p.latest.done, "total", p.latest.total, "by_status", byStatus(p.tally), "items_per_second", rate))
	}
	out = append(out, "done", p.done, "by_status", maps.Clone(p.counts), "retrying", p.waiting)
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

// byStatus adds up the batches' items by status.
func byStatus(tally []refund.BatchInfo) map[string]int {
	by := map[string]int{}
	for _, b := range tally {
		for st, n := range b.ByStatus {
			by[st] += n
		}
	}
	return by
}

// batchRate is the rate of the batches' items since the first tally; false
// before a tally that names items. Holds p.mu.
func (p *progress) batchRate() (rate float64, ok bool) {
	if p == nil || p.latest.at.IsZero() || p.latest.total == 0 {
		return 0, false
	}
	if d := p.latest.at.Sub(p.first.at); d >= time.Second && p.latest.done > p.first.done {
		rate = float64(p.latest.done-p.first.done) / d.Seconds()
	}
	return rate, true
}

// batchLine is the batches' part of the progress line at now. Holds p.mu.
func (p *progress) batchLine(now time.Time) (string, bool) {
	rate, ok := p.batchRate()
	if !ok {
		return "", false
	}
	s, what := p.latest, "batch "+p.tally[0].Batch
	if len(p.tally) > 1 {
		what = fmt.Sprintf("%d batches", len(p.tally))
	}
	line := fmt.Sprintf("refund %s: %d/%d (%d%%) by all workers · %s", what, s.done, s.total, s.done*100/s.total, countsText(byStatus(p.tally)))
	if rate > 0 {
		line += fmt.Sprintf(" · %.1f items/s", rate)
		if left := s.total - s.done; left > 0 {
			// From the tally's time: the rate holds between tallies.
			eta := time.Duration(float64(left)/rate*float64(time.Second)) - now.Sub(s.at)
			line += fmt.Sprintf(" · ETA %s", max(eta, 0).Round(time.Second))
		}
	}
	return line, true
}

// resultWriter prints result lines, flushed every 100 ms for pipelines.
type resultWriter struct {
	mu     sync.Mutex
	w      *bufio.Writer
	dirty  bool
	failed error // the first write to stdout that failed; bufio keeps it
	stop   func()
}

func newResultWriter(w io.Writer) *resultWriter {
	rw := &resultWriter{w: bufio.NewWriterSize(w, 64*1024)}
	stop := every(100*time.Millisecond, false, rw.flush)
	rw.stop = sync.OnceFunc(func() {
		stop()
		rw.flush()
	})
	return rw
}

func (rw *resultWriter) write(r refund.Result) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	// Encoded straight into the writer's free space: no copy when it fits.
	rw.w.Write(r.AppendJSON(rw.w.AvailableBuffer()))
	rw.dirty = true
}

func (rw *resultWriter) flush() {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if rw.dirty {
		if err := rw.w.Flush(); err != nil && rw.failed == nil {
			rw.failed = err
		}
		rw.dirty = false
	}
}

// err is the first error writing stdout, nil while every line got out.
func (rw *resultWriter) err() error {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return rw.failed
}
