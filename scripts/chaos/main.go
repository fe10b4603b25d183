// Command chaos runs refundkit's real binaries (bin/refund, bin/plan,
// bin/audit, bin/journal-merge, bin/adyen-webhook) through a matrix of
// faults against an in-process simulator (Stripe's, PayPal's and Adyen's
// APIs; the exec provider's curl commands call Stripe's; Adyen's
// notifications go to bin/adyen-webhook), checks after every scenario that each planned
// item has exactly one live refund at the simulator and that no journal
// record was lost, and writes the figures to RELIABILITY.md.
//
//	go run ./scripts/chaos [-quick] [-bin bin] [-out RELIABILITY.md] [-seed N] [-only NAME,...]
//
// It exits 1 when any scenario found a duplicate, a missing refund, a lost
// record or another broken promise (wrong exit code, leaked key, audit
// disagreeing), 2 on a usage error.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var opts options
	fs.BoolVar(&opts.Quick, "quick", false, "small counts, for CI (well under 2 minutes on 2 cores)")
	fs.StringVar(&opts.Bin, "bin", "bin", "directory holding the refundkit binaries")
	fs.StringVar(&opts.Out, "out", "-", "write the report (markdown) here; - for stdout")
	fs.Uint64Var(&opts.Seed, "seed", 1, "first seed; each scenario run uses the next one")
	only := fs.String("only", "", "comma-separated scenario names to run (default: all)")
	fs.StringVar(&opts.Command, "command", "", "the command to name in the report (default: this one)")
	fs.StringVar(&opts.ExecDir, "exec-dir", "testdata/exec", "directory of the exec provider's example commands (stripe-create.sh, stripe-find.sh)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "chaos: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *only != "" {
		opts.Only = strings.Split(*only, ",")
		for _, name := range opts.Only {
			if scenarioByName(name) == nil {
				fmt.Fprintf(stderr, "chaos: -only: no scenario %q (have %s)\n", name, strings.Join(scenarioNames(), ", "))
				return 2
			}
		}
	}
	if opts.Command == "" {
		opts.Command = "go run ./scripts/chaos " + strings.Join(args, " ")
	}
	opts.Log = stderr

	rep, err := runMatrix(opts)
	if err != nil {
		fmt.Fprintf(stderr, "chaos: %v\n", err)
		return 2
	}
	var out io.Writer = os.Stdout
	if opts.Out != "-" {
		f, err := os.Create(opts.Out)
		if err != nil {
			fmt.Fprintf(stderr, "chaos: %v\n", err)
			return 2
		}
		defer f.Close()
		out = f
	}
	if err := rep.writeMarkdown(out); err != nil {
		fmt.Fprintf(stderr, "chaos: write the report: %v\n", err)
		return 2
	}
	rep.writeSummary(stderr)
	if !rep.clean() {
		return 1
	}
	return 0
}

// options are what one invocation asks for.
type options struct {
	Quick   bool
	Bin     string
	Out     string
	Seed    uint64
	Only    []string
	Command string
	ExecDir string // testdata/exec, for the exec rows
	Log     io.Writer
	// Now is the clock of the report's date (default time.Now).
	Now func() time.Time
}
