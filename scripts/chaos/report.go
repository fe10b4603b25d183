package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/refundkit/refundkit/refund/sim/stripesim"
)

// tally is what the runs of one scenario found. Processes waited for in
// other goroutines count their runs and problems under mu.
type tally struct {
	mu                sync.Mutex
	Name, Title, What string
	Seeds             int // scenario runs, each with its own seed and simulator
	Runs              int // refund processes started
	Items             int // planned items checked at the end of the runs
	injected          []string
	injectedN         map[string]int
	Dup               int  // refunds beyond the first for an item
	Missing           int  // planned items with no refund
	Lost              int  // journal records gone after a later run
	Audits            int  // clean audit --stripe verdicts
	NoAudit           bool // the scenario has no batch to audit
	// AuditOffline says why only the offline audit could run, if so.
	AuditOffline string
	Problems     []string
	ProblemCount int
	Notes        []string
	Skipped      string
	Elapsed      time.Duration
}

// maxProblems bounds the problems kept for the report; all are counted.
const maxProblems = 12

func (t *tally) Errorf(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ProblemCount++
	if len(t.Problems) < maxProblems {
		t.Problems = append(t.Problems, fmt.Sprintf(format, args...))
	}
}

// inject counts n faults of a kind.
func (t *tally) inject(kind string, n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.injectedN == nil {
		t.injectedN = map[string]int{}
	}
	if _, ok := t.injectedN[kind]; !ok {
		t.injected = append(t.injected, kind)
	}
	t.injectedN[kind] += n
}

// injectFaults counts the simulator's 500s before and after commit and the
// answers it dropped, then (gateway) its gateway 504s.
func (t *tally) injectFaults(st stripesim.Stats, gateway bool) {
	t.inject("500 before commit", int(st.ErrorsBeforeCommit))
	t.inject("500 after commit", int(st.ErrorsAfterCommit))
	t.inject("answers dropped after commit", int(st.Dropped))
	if gateway {
		t.inject("gateway 504s while the refund went on", int(st.GatewayTimeouts))
	}
}

// countRun counts one refund process.
func (t *tally) countRun() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.Runs++
}

func (t *tally) injectedText() string {
	var parts []string
	for _, kind := range t.injected {
		parts = append(parts, fmt.Sprintf("%d %s", t.injectedN[kind], kind))
	}
	return strings.Join(parts, ", ")
}

func (t *tally) note(format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.Notes = append(t.Notes, fmt.Sprintf(format, args...))
}

// auditOffline records that only the offline audit ran, and why.
func (t *tally) auditOffline(why string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.AuditOffline = why
}

func (t *tally) clean() bool {
	return t.Dup == 0 && t.Missing == 0 && t.Lost == 0 && t.ProblemCount == 0
}

func (t *tally) verdict() string {
	switch {
	case t.Skipped != "" && t.Seeds == 0:
		return "not run: " + t.Skipped
	case !t.clean():
		return fmt.Sprintf("**FAIL** (%d problems)", t.ProblemCount)
	}
	return "ok"
}

// line is the tally in one line, for the log.
func (t *tally) line() string {
	return fmt.Sprintf("%s; %d seeds, %d refund runs, %d items, injected %s; %d duplicates, %d missing, %d records lost, %d problems (%s)",
		t.verdict(), t.Seeds, t.Runs, t.Items, t.injectedText(), t.Dup, t.Missing, t.Lost, t.ProblemCount, t.Elapsed.Round(time.Second))
}

// report is the whole matrix, as RELIABILITY.md shows it.
type report struct {
	Quick   bool
	Command string
	Date    time.Time
	CPUs    int
	Kernel  string
	GoVer   string
	Version string   // what bin/refund --version says
	Missing []string // optional binaries that were not built
	Rows    []*tally
	Elapsed time.Duration
}

func (rep *report) clean() bool {
	for _, t := range rep.Rows {
		if !t.clean() {
			return false
		}
	}
	return true
}

func (rep *report) writeSummary(w io.Writer) {
	verdict := "clean: every scenario ended with exactly one refund per item, none more per charge than meant, and no record lost"
	if !rep.clean() {
		verdict = "FAILED: see the report"
	}
	fmt.Fprintf(w, "chaos: %s (%s)\n", verdict, rep.Elapsed.Round(time.Second))
}

func (rep *report) writeMarkdown(w io.Writer) error {
	var b strings.Builder
	matrixName := "full"
	if rep.Quick {
		matrixName = "quick"
	}
	fmt.Fprintf(&b, "# Reliability\n\n")
	fmt.Fprintf(&b, "What `make chaos` measured: the real binaries (`bin/refund`, `bin/plan`, `bin/audit`, `bin/journal-merge`, `bin/adyen-webhook`) run against an in-process simulator (`refund/sim/stripesim`, which serves Stripe's, PayPal's and Adyen's APIs on one port) while faults are injected: the rows named PayPal run `refund --provider paypal`, the rows named Adyen `refund --provider adyen` with Adyen's signed notifications posted to `bin/adyen-webhook` (whose file refund reads with `--notifications`), the rows named exec run `refund --provider exec` with the curl commands of `testdata/exec` (which call Stripe's API), the others Stripe's provider. ")
	fmt.Fprintf(&b, "Every scenario runs several times with a different seed and a fresh simulator, and each run ends with the simulator's own records checked: every planned item has exactly one live refund, of the right charge and amount; no charge holds more live refunds (of any batch, with or without metadata) than the plans meant to run on it intend; the journal names each item's refund; every idempotency key the simulator received has a journaled intent (write-ahead); and `audit --stripe` agrees.\n\n")
	fmt.Fprintf(&b, "A duplicate is counted per charge: a live refund beyond what the plans meant for it. The only acceptable figure in the duplicates, missing and records lost columns is 0; `chaos` exits non-zero otherwise, and on any other broken promise (a wrong exit code, the API key in an output or a file, audit disagreeing, a panic). The operator rows plan partial refunds (a third of each charge), so Stripe's own \"already refunded\" check hides no second refund.\n\n")
	fmt.Fprintf(&b, "- Matrix: %s\n", matrixName)
	fmt.Fprintf(&b, "- Command: `%s`\n", rep.Command)
	fmt.Fprintf(&b, "- Date: %s\n", rep.Date.Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "- Machine: %d CPUs (nproc), Linux %s (uname -r), %s\n", rep.CPUs, rep.Kernel, rep.GoVer)
	fmt.Fprintf(&b, "- Binaries: %s\n", rep.Version)
	fmt.Fprintf(&b, "- Duration: %s\n", rep.Elapsed.Round(time.Second))
	if len(rep.Missing) > 0 {
		fmt.Fprintf(&b, "- **Not built when this ran: %s.** The checks that need them were not made; the simulator's own records were checked instead.\n", "`bin/"+strings.Join(rep.Missing, "`, `bin/")+"`")
	}
	fmt.Fprintf(&b, "\n| scenario | seeds | refund runs | items | kills or faults injected | duplicates | missing | records lost | audit --stripe clean | result |\n")
	fmt.Fprintf(&b, "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- |\n")
	for _, t := range rep.Rows {
		audits := fmt.Sprint(t.Audits)
		switch {
		case t.NoAudit:
			audits = "–"
		case t.AuditOffline != "":
			audits = "offline"
		case slices.Contains(rep.Missing, "audit"):
			audits = "n/a"
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %s | %d | %d | %d | %s | %s |\n",
			t.Title, t.Seeds, t.Runs, t.Items, t.injectedText(), t.Dup, t.Missing, t.Lost, audits, t.verdict())
	}
	fmt.Fprintf(&b, "\nItems are planned items checked at the end of each run, summed over seeds. Refund runs count every `refund` process, killed or not. ")
	fmt.Fprintf(&b, "The audit column counts the final checks where both `audit --plan` (offline) and `audit --stripe --plan` exited 0; \"offline\": only the offline audit could judge the row (a row that ends with items failed or left for a person, which the offline audit must report).\n")

	fmt.Fprintf(&b, "\n## Scenarios\n")
	for _, t := range rep.Rows {
		fmt.Fprintf(&b, "\n### %s (`-only %s`)\n\n%s\n", t.Title, t.Name, t.What)
		if t.AuditOffline != "" {
			fmt.Fprintf(&b, "\nAudit: %s.\n", t.AuditOffline)
		}
		if len(t.Notes) > 0 {
			fmt.Fprintf(&b, "\nMeasured:\n\n")
			for _, n := range t.Notes {
				fmt.Fprintf(&b, "- %s\n", n)
			}
		}
		if t.ProblemCount > 0 {
			fmt.Fprintf(&b, "\nProblems (%d; the first %d):\n\n", t.ProblemCount, len(t.Problems))
			for _, p := range t.Problems {
				fmt.Fprintf(&b, "- %s\n", p)
			}
		}
	}
	b.WriteString(staticSections)
	_, err := io.WriteString(w, b.String())
	return err
}

const staticSections = `
## Fuzzing

Every parser of outside input has a ` + "`go test -fuzz`" + ` target with a seed
corpus. ` + "`make fuzz`" + ` runs each for ` + "`FUZZTIME`" + ` (default 60s: five
minutes in all; ` + "`make fuzz FUZZTIME=10m`" + ` for a longer soak):

| target | parses | seed corpus |
| --- | --- | --- |
| ` + "`journal` FuzzScanner" + ` | journal lines: torn tails, corruption, versions | ` + "`journal/testdata/fuzz/FuzzScanner/`" + ` |
| ` + "`refund` FuzzParseItem" + ` | plan lines, against encoding/json | ` + "`f.Add`" + ` seeds in ` + "`refund/item_test.go`" + ` |
| ` + "`refund/plan` FuzzRead" + ` | charge lists: CSV, JSON lines, bare ids | ` + "`refund/plan/testdata/fuzz/FuzzRead/`" + ` |
| ` + "`refund/plan` FuzzJSONRow" + ` | one JSON-lines charge row | ` + "`f.Add`" + ` seeds in ` + "`refund/plan/fuzz_test.go`" + ` |
| ` + "`refund/sim/stripesim` FuzzReadCharges" + ` | the simulator's charges files | ` + "`f.Add`" + ` seeds in ` + "`refund/sim/stripesim/charge_test.go`" + ` |

Inputs the fuzzer finds interesting are kept in Go's cache
(` + "`$(go env GOCACHE)/fuzz/`" + `); a failing input is written to the package's
` + "`testdata/fuzz/<Target>/`" + ` and from then on runs with every ` + "`go test`" + `.
The hostile-input scenario above puts the same kind of input through the
binary, end to end.

## What this does not cover

- **Power loss.** A killed process leaves the page cache behind, so the
  matrix cannot tell a record that was written from one that was fsynced.
  refundkit fsyncs every intent before its call and every outcome before its
  result line, and assumes, as the README says, that fsync is honest; no
  power was cut here.
- **Stripe itself.** The simulator implements Stripe's documented
  idempotency semantics (saved answers replayed, 409 while in flight, keys
  forgotten after a time); the contract test against stripe-mock checks the
  shape of the requests, not those semantics.
- **Other machines.** The second-run check uses flock on one host; a
  journal on a network filesystem is not tested.
- **Clocks.** refund no longer changes a key because of its age. Stripe's
  24-hour key window is exercised by the simulator forgetting keys; a clock
  that jumps is exercised by moving the journal's timestamps, not the
  machine's clock.
- **A real gateway.** The 502 and 504 answers come from the simulator
  acting as one (with or without a Stripe-shaped body, never a Request-Id);
  no proxy or load balancer stood in between.

## Reproducing

    make chaos                                   # the full matrix, writes this file
    make chaos CHAOSFLAGS=-quick                 # the short matrix, report on stdout
    go test ./scripts/chaos                      # the short matrix, as CI runs it
    go run ./scripts/chaos -only kill9 -seed 7   # one scenario, other seeds

The full-disk scenario mounts a small tmpfs and needs root (CI runs as
root); without root it is reported as not run.
`
