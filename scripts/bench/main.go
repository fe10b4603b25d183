// Command bench measures refundkit's binaries on big generated inputs, each
// beside its baselines run in turn with it in the same session, and writes
// the table with the machine, the commands and the date to BENCHMARKS.md.
// `make bench` runs it through scripts/bench.sh, which installs jq, builds
// scripts/gen, this command and the old core's binaries, and makes the
// temp dir.
//
//	bench -gen GEN -work DIR [-bin bin] [-base-bin DIR -base-rev REV] [-out BENCHMARKS.md]
//	      [-quick] [-items N] [-rounds N] [-only ROW,...]
//
// The restart and audit rows run the new core (-bin), the old core
// (-base-bin, built from an earlier revision) and the baselines (coreutils
// pipelines and jq) in turn, on the journal a real run writes and on a
// compacted one, and judge issue 11's targets on them.
//
// Every figure is a median of several runs; every ratio is the median of
// the ratios of the runs of one round. Each run is checked (exit status,
// counts, zero API calls, the same answer from refundkit and every
// baseline, exactly one refund per item at the simulator): a row whose
// binary is missing or whose check fails is reported as failed, never
// given a figure.
//
// It exits 0 when every row ran, 1 when a row failed, 2 on a usage or
// set-up error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/google/renameio/v2"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// options are the command line of bench.
type options struct {
	Bin, Gen, Work, Out string
	BaseBin, BaseRev    string
	Items, Rounds       int
	Time                string
	Quick               bool
	Only                []string
	MaxLoad             float64
	LoadWait            time.Duration
	Command             string
}

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.Bin, "bin", "bin", "directory holding the refundkit binaries")
	fs.StringVar(&o.BaseBin, "base-bin", "", "directory holding the old core's binaries, to run beside the new ones (default: none)")
	fs.StringVar(&o.BaseRev, "base-rev", "base", "the revision the old core was built from, for the report")
	fs.IntVar(&o.Items, "items", 0, "items of the big inputs (default 1,000,000; with -quick 50,000)")
	fs.IntVar(&o.Rounds, "rounds", 0, "rounds of each side for the fast rows (default 5; with -quick 3)")
	fs.StringVar(&o.Gen, "gen", "", "the scripts/gen binary (required)")
	fs.StringVar(&o.Work, "work", "", "an empty temp dir for inputs, journals and outputs (required; its disk is the one measured)")
	fs.StringVar(&o.Time, "time", "/usr/bin/time", "GNU time, to measure each command's peak RSS")
	fs.StringVar(&o.Out, "out", "BENCHMARKS.md", "write the report (markdown) here; - for stdout")
	fs.BoolVar(&o.Quick, "quick", false, "small inputs and few runs, to try the script (not for the committed figures)")
	only := fs.String("only", "", "comma-separated rows to run (default: all): "+strings.Join(rowNames(), ","))
	fs.Float64Var(&o.MaxLoad, "max-load", 1.5, "wait until the 1-minute load average is at most this before measuring")
	fs.DurationVar(&o.LoadWait, "load-wait", 15*time.Minute, "wait at most this long for the load to drop, then measure anyway (and say so)")
	fs.StringVar(&o.Command, "command", "make bench", "the command to name in the report")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 || o.Gen == "" || o.Work == "" || o.Items < 0 || o.Rounds < 0 {
		fmt.Fprintln(stderr, "bench: usage: bench -gen GEN -work DIR [-bin bin] [-base-bin DIR -base-rev REV] [-out FILE] [-quick] [-items N] [-rounds N] [-only ROW,...]")
		return 2
	}
	if *only != "" {
		o.Only = strings.Split(*only, ",")
		for _, name := range o.Only {
			if !slices.Contains(rowNames(), name) {
				fmt.Fprintf(stderr, "bench: -only: no row %q (have %s)\n", name, strings.Join(rowNames(), ", "))
				return 2
			}
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	b, err := newBench(ctx, o, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 2
	}
	rep, err := b.measure()
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "bench: interrupted: runs stopped, no report written")
		return 130
	}
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 2
	}
	text := rep.markdown()
	if o.Out == "-" {
		io.WriteString(os.Stdout, text)
	} else {
		out, err := filepath.Abs(o.Out)
		if err == nil {
			err = renameio.WriteFile(out, []byte(text), 0o644)
		}
		if err != nil {
			fmt.Fprintf(stderr, "bench: write the report: %v\n", err)
			return 2
		}
		fmt.Fprintf(stderr, "bench: wrote %s\n", o.Out)
	}
	io.WriteString(stderr, rep.summary())
	if rep.failed() {
		fmt.Fprintln(stderr, "bench: some rows failed (see above): their figures are not reported")
		return 1
	}
	return 0
}

// sizes are the inputs and run counts of a session.
type sizes struct {
	Big       int   // items of the plan, journal, shards and CSV
	Dups      int   // items refunded twice in the audited journal
	Shards    int   // shard journals merged
	SimItems  int   // items refunded against the simulator at full speed
	RateItems int   // items refunded at the rate limit
	Rate      int   // the rate limit, requests per second
	Jobs      []int // -j values tried against the simulator
	PaceItems int   // items refunded under the simulator's real rate limits
	Fast      int   // runs of each side for the fast rows
	Slow      int   // runs of each side for the slow rows
	Fsyncs    int   // write+fsync rounds timed for the disk's latency
	// The shared checkpoints' rows (PostgreSQL, NATS): items at zero
	// latency and at 100 ms, and the rounds of each timed checkpoint call.
	SharedItems, SharedSlowItems, SharedRounds int
}

var (
	fullSizes  = sizes{Big: 1_000_000, Dups: 5, Shards: 8, SimItems: 20_000, RateItems: 1_200, Rate: 40, Jobs: []int{8, 16, 32, 64, 128}, PaceItems: 400, Fast: 5, Slow: 3, Fsyncs: 200, SharedItems: 4_000, SharedSlowItems: 800, SharedRounds: 300}
	quickSizes = sizes{Big: 50_000, Dups: 5, Shards: 8, SimItems: 2_000, RateItems: 300, Rate: 40, Jobs: []int{8, 32}, PaceItems: 120, Fast: 3, Slow: 2, Fsyncs: 50, SharedItems: 400, SharedSlowItems: 100, SharedRounds: 50}
)
