package cli

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
	"golang.org/x/time/rate"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
)

type refundCmd struct {
	Journal        string      `required:"" placeholder:"FILE" help:"The checkpoint journal (JSON lines), created 0600 if absent. One run at a time holds it."`
	Input          string      `arg:"" optional:"" default:"-" placeholder:"PLAN" help:"Plan items as JSON lines (default: stdin)."`
	Concurrency    int         `short:"j" default:"8" help:"Items in flight at once."`
	Rate           float64     `default:"10" help:"API requests per second, all workers together (0: no limit). Stripe allows 25/s in test mode, 100/s live, and asks bulk jobs to use a part of it."`
	DryRun         bool        `help:"Read the journal and show what would be done: no API call, no journal write."`
	ResendAfter500 bool        `name:"resend-after-500" help:"Send items whose earlier call Stripe answered with its own 500 under a new key, once the look-up finds no refund for them. Stripe treats a 500 as indeterminate and may still complete the call while it repairs an incident: use it once the incident is over."`
	AllowRefunded  bool        `name:"allow-refunded-charges" help:"More refunds on charges that another refundkit batch (or, with --all-refunds, anyone) already refunded are intended. Without it such items are held: journaled as failed, nothing sent."`
	AllRefunds     bool        `help:"Hold items whose charge has refunds without refundkit metadata too (made by hand, in the dashboard or by older scripts)."`
	NoLookup       bool        `help:"Skip the look-up at Stripe before an item's first call and trust the journal alone. Saves one request per item; a new batch name, a lost or restored journal or a changed shard count can then refund a charge twice."`
	Progress       string      `enum:"auto,always,never" default:"auto" help:"Progress display on stderr (auto: when stderr is a terminal)."`
	Verbose        bool        `short:"v" help:"Log each retry on stderr."`
	NoGroupCommit  bool        `hidden:"" help:"One fsync per journal record (benchmark baseline)."`
	CPUProfile     string      `hidden:"" name:"cpuprofile" placeholder:"FILE" help:"Write a CPU profile (benchmarks)."`
	Version        versionFlag `help:"Print the version and exit."`
	stripeFlags
}

const refundDescription = `Refund planned items through Stripe exactly once, journaling every step.

Reads plan items (JSON lines, as plan writes them) and writes one result line per item on stdout once its outcome is journaled; a summary goes to stderr. The Stripe key is read from STRIPE_API_KEY only. Run the same command again to resume: items the journal holds are skipped with no API call; before any other item's first call, and before anything is sent again for an item left in doubt, the charge's refunds are looked up at Stripe. A charge that another refundkit batch already refunded is held (failed, nothing sent) unless --allow-refunded-charges says so.

Exit codes: 0 all refunded or skipped; 1 some failed, held, in doubt or refunded twice; 2 usage or input error (a plan item that differs from what the journal recorded for it included); 3 journal unwritable or replaced; 4 journal locked by another run; 5 journal corrupt; 6 Stripe refused the key, does not answer, or answered with a refund that is not the item's; 130 interrupted.`

// Refund is the refund command: it refunds plan items from stdin exactly
// once, journaling every step.
func Refund(env Env) int {
	const name = "refund"
	var c refundCmd
	if code, done := parse(env, name, refundDescription, &c); done {
		return code
	}
	// Signals are caught from the start: a deploy that stops a run while it
	// loads its journal gets the same clean exit as one mid-batch.
	ctx, stop := signalContext(env.Stderr, name)
	defer stop()
	log := newLogger(env.Stderr, name, c.Verbose)
	if env.Getenv("GOGC") == "" {
		// Most of refund's heap is the journal's index, alive for the whole
		// run; garbage is little. A lower target keeps a million-item resume
		// well under 200 MB for about 1% more CPU.
		debug.SetGCPercent(50)
	}
	if c.CPUProfile != "" {
		stop, err := startCPUProfile(c.CPUProfile)
		if err != nil {
			warnf(env.Stderr, name, "%v", err)
			return ExitUsage
		}
		defer stop()
	}
	if c.Concurrency < 1 || c.Concurrency > 256 {
		warnf(env.Stderr, name, "--concurrency %d: want 1 to 256", c.Concurrency)
		return ExitUsage
	}
	if c.Rate < 0 {
		warnf(env.Stderr, name, "--rate %g: want 0 (no limit) or more", c.Rate)
		return ExitUsage
	}

	var client *refund.Stripe
	if !c.DryRun {
		var err error
		if client, err = c.client(env, c.Concurrency); err != nil {
			warnf(env.Stderr, name, "%v", err)
			return ExitUsage
		}
	}

	in, inName := env.Stdin, "<stdin>"
	if c.Input != "-" {
		f, err := os.Open(c.Input)
		if err != nil {
			warnf(env.Stderr, name, "%v", err)
			return ExitUsage
		}
		defer f.Close()
		in, inName = f, c.Input
	}

	var (
		w     *journal.Writer
		state *journal.State
		torn  *journal.Torn
		err   error
	)
	if c.DryRun {
		state, torn, err = loadForDryRun(c.Journal)
	} else {
		w, state, torn, err = journal.Open(c.Journal, journal.Options{NoGroupCommit: c.NoGroupCommit})
	}
	if err != nil {
		warnf(env.Stderr, name, "%v", err)
		return journalExit(err)
	}
	if w != nil {
		defer w.Close()
	}
	if torn != nil {
		warnf(env.Stderr, name, "%s", torn)
	}

	out := newResultWriter(env.Stdout)
	defer out.stop()
	bar := newProgress(env.Stderr, c.Progress)

	var limiter *rate.Limiter
	if c.Rate > 0 {
		limiter = rate.NewLimiter(rate.Limit(c.Rate), max(1, int(c.Rate/10)))
	}
	summary, runErr := refund.Run(ctx, refund.Config{
		Stripe: client, Journal: w, State: state,
		Workers: c.Concurrency, Limiter: limiter, DryRun: c.DryRun,
		ResendAfter500: c.ResendAfter500, Log: log,
		NoLookup: c.NoLookup, AllowRefundedCharges: c.AllowRefunded, AllRefunds: c.AllRefunds,
		OnResult: func(r refund.Result) {
			out.write(r)
			if bar != nil {
				bar.Add(1)
			}
		},
	}, in, inName)
	out.stop()
	if bar != nil {
		bar.Finish()
		io.WriteString(env.Stderr, "\n")
	}
	warnf(env.Stderr, name, "%s", summary.String())

	var inputErr *refund.InputError
	var haltErr *refund.HaltError
	switch {
	case errors.As(runErr, &inputErr):
		warnf(env.Stderr, name, "%v", inputErr)
		warnf(env.Stderr, name, "stopped at that line: nothing was sent for it or after it")
		return ExitUsage
	case errors.As(runErr, &haltErr):
		if haltErr.Journal {
			if errors.Is(haltErr, journal.ErrReplaced) {
				warnf(env.Stderr, name, "no API call was made after that; find what replaced or moved the journal (a tool that ignores its lock?), merge the file it moved (if it still exists) into the journal with journal-merge, then run again")
				return ExitJournal
			}
			warnf(env.Stderr, name, "no API call was made after the failed write; free the space or fix the disk, then run again: the journal resumes where it stopped")
			return ExitJournal
		}
		return ExitStripe
	case errors.Is(runErr, context.Canceled):
		n := summary.ByStatus[refund.StatusInDoubt]
		warnf(env.Stderr, name, "interrupted: %d %s in doubt (sent, or in doubt from before), journaled; items not yet sent were left untouched; run again to continue", n, plural(n, "item"))
		return ExitInterrupted
	case runErr != nil:
		warnf(env.Stderr, name, "%v", runErr)
		return ExitUsage
	}
	if summary.Indeterminate > 0 {
		warnf(env.Stderr, name, "Stripe answered %d %s with its own 500: the result is indeterminate (Stripe may still complete them while it repairs an incident); a rerun looks them up, and sends under a new key only with --resend-after-500", summary.Indeterminate, plural(int(summary.Indeterminate), "call"))
	}
	if summary.ByStatus[refund.StatusFailed] > 0 || summary.ByStatus[refund.StatusInDoubt] > 0 || summary.Duplicates > 0 {
		return ExitFailed
	}
	return ExitOK
}

func loadForDryRun(path string) (*journal.State, *journal.Torn, error) {
	state, torn, err := journal.Load(path)
	if errors.Is(err, os.ErrNotExist) {
		return journal.NewState(), nil, nil
	}
	return state, torn, err
}

// resultWriter prints result lines on stdout, buffered, flushed at least
// every 100 ms so a pipeline sees progress.
type resultWriter struct {
	mu      sync.Mutex
	w       *bufio.Writer
	buf     []byte
	dirty   bool
	done    chan struct{}
	stopped sync.Once
	ticker  *time.Ticker
}

func newResultWriter(w io.Writer) *resultWriter {
	rw := &resultWriter{w: bufio.NewWriterSize(w, 64*1024), done: make(chan struct{}), ticker: time.NewTicker(100 * time.Millisecond)}
	go func() {
		for {
			select {
			case <-rw.ticker.C:
				rw.flush()
			case <-rw.done:
				return
			}
		}
	}()
	return rw
}

func (rw *resultWriter) write(r refund.Result) {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	rw.buf = r.AppendJSON(rw.buf[:0])
	rw.w.Write(rw.buf)
	rw.dirty = true
}

func (rw *resultWriter) flush() {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if rw.dirty {
		rw.w.Flush()
		rw.dirty = false
	}
}

func (rw *resultWriter) stop() {
	rw.stopped.Do(func() {
		rw.ticker.Stop()
		close(rw.done)
		rw.flush()
	})
}

// newProgress returns a spinner with counts on stderr, or nil when there is
// no terminal to show it on (or it is turned off).
func newProgress(stderr io.Writer, mode string) *progressbar.ProgressBar {
	show := mode == "always"
	if mode == "auto" {
		f, ok := stderr.(*os.File)
		show = ok && term.IsTerminal(int(f.Fd()))
	}
	if !show {
		return nil
	}
	return progressbar.NewOptions(-1,
		progressbar.OptionSetWriter(stderr),
		progressbar.OptionSetDescription("refund"),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("items"),
		progressbar.OptionThrottle(100*time.Millisecond),
	)
}
