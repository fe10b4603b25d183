package cli

import (
	"fmt"
	"io"
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
	out   *progressWriter
	total int // 0: unknown (a plan on stdin)

	mu       sync.Mutex
	counts   map[string]int
	done     int       // results so far
	api      int       // results that took API calls (not skipped)
	firstAPI time.Time // when the first of them came
	waiting  int       // items waiting to retry

	stopOnce sync.Once
	quit     chan struct{}
	finished chan struct{}
}

// newProgress starts the display when mode says so: always, or auto with
// stderr a terminal.
func newProgress(w *progressWriter, mode string, total func() int) *progress {
	show := mode == "always"
	if mode == "auto" {
		f, ok := w.w.(*os.File)
		show = ok && term.IsTerminal(int(f.Fd()))
	}
	if !show {
		return nil
	}
	p := &progress{out: w, total: total(), counts: map[string]int{}, quit: make(chan struct{}), finished: make(chan struct{})}
	go p.loop()
	return p
}

// loop redraws a few times a second: the rate, the ETA and the retries move
// between results too.
func (p *progress) loop() {
	defer close(p.finished)
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		p.out.show(p.line(time.Now()))
		select {
		case <-t.C:
		case <-p.quit:
			return
		}
	}
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
		p.out.show("")
	})
}

// line is the display at now. The rate counts only items settled through
// the API, from the first of them: skipped items go by at thousands a
// second and would make the first frames absurd.
func (p *progress) line(now time.Time) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	b.WriteString("refund ")
	if p.total > 0 {
		fmt.Fprintf(&b, "%d/%d (%d%%)", p.done, p.total, p.done*100/p.total)
	} else {
		fmt.Fprintf(&b, "%d items", p.done)
	}
	fmt.Fprintf(&b, " · %d refunded, %d skipped, %d failed, %d in doubt, %d retrying",
		p.counts[refund.StatusRefunded], p.counts[refund.StatusSkipped], p.counts[refund.StatusFailed], p.counts[refund.StatusInDoubt], p.waiting)
	if n := p.counts[refund.StatusPending]; n > 0 {
		fmt.Fprintf(&b, ", %d pending", n)
	}
	elapsed := now.Sub(p.firstAPI)
	if p.api < 2 || elapsed < time.Second {
		return b.String()
	}
	rate := float64(p.api-1) / elapsed.Seconds()
	fmt.Fprintf(&b, " · %.1f items/s", rate)
	if p.total > p.done && rate > 0 {
		eta := time.Duration(float64(p.total-p.done) / rate * float64(time.Second))
		fmt.Fprintf(&b, " · ETA %s", eta.Round(time.Second))
	}
	return b.String()
}
