package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/audit"
	"github.com/refundkit/refundkit/refund/checkpoint/postgres"
	"github.com/refundkit/refundkit/refund/money"
)

const auditHelp = `Tell whether a batch was refunded exactly once: findings as JSON lines on stdout, a summary on stderr.

A journal that a running refund holds is audited as it stands, and audit says so: items in flight show as in doubt. Audit it again when the run has finished.

Exit status: 0 no findings (every audited item has exactly one refund, nothing is in doubt); 1 findings (a final failure is one: the batch is not done); 2 usage error, input that cannot be read, a plan of other batches than the journals' (one line says which), amounts that sum beyond int64 minor units (no verdict), or nothing to audit (no journal records and no plan items); 3 stdout (a full disk, or a closed pipe: audit ... | head -0 exits 3, not by SIGPIPE) or a backfill or cancel record could not be written; 4 the journal to write is held by another run; 5 a journal is corrupt or of an unknown version; 6 the provider refused the key or is unreachable; 130 stopped by SIGINT, 143 by SIGTERM. Halted (3, 6) or stopped, audit gives no verdict.`

type auditCmd struct {
	Journals     []string      `arg:"" optional:"" placeholder:"JOURNAL" predictor:"file" help:"Journals to audit, read in the order given (default: stdin; - reads stdin); a postgres:// URL reads a PostgreSQL checkpoint, and says who holds what in it."`
	Batch        []string      `placeholder:"BATCH" help:"With a PostgreSQL checkpoint: audit these batches only (default: all it holds)."`
	Plan         string        `placeholder:"FILE" predictor:"plan" help:"The plan (refund items as JSON lines): also report planned items without a refund (missing) and journal items it does not list (not_in_plan)."`
	Provider     string        `enum:",stripe,exec,paypal,adyen" default:"" group:"provider" predictor:"providers" help:"Also list at the provider the refunds of every payment audited: stripe (STRIPE_API_KEY), paypal (PAYPAL_CLIENT_ID, PAYPAL_CLIENT_SECRET: each capture's refunds through its order), adyen (the refunds its notifications tell of: --notifications, ADYEN_HMAC_KEY; Adyen has no API that lists them) or exec (--exec-find)."`
	Stripe       bool          `group:"provider" help:"The same as --provider stripe."`
	PendingAfter time.Duration `name:"pending-after" default:"168h" placeholder:"D" help:"Report a refund journaled pending longer ago than this (default 7 days)."`
	AllRefunds   bool          `name:"all-refunds" group:"provider" help:"With --provider: count refunds without refundkit metadata (older scripts, the dashboard) as refunds of the batch; one is an item's only when it is exactly what the item asked for (for a full refund, the charge's amount) and nothing else matches, else it is reported as unattributed."`
	Backfill     string        `placeholder:"FILE" group:"repair" predictor:"file" help:"With --provider: journal into FILE, one of the JOURNALs, each refund the provider has for an item and the journals lack, so refund skips that item."`
	CancelExtras bool          `name:"cancel-extras" group:"repair" help:"With --provider: cancel the extra refunds the provider can still cancel (requires_action), keeping one per item, and journal each cancel in the --backfill or --journal FILE."`
	Journal      string        `placeholder:"FILE" group:"repair" predictor:"file" help:"With --cancel-extras and no --backfill: the journal, one of the JOURNALs, that records the cancels."`
	Concurrency  int           `short:"j" default:"4" group:"pacing" help:"Provider lists in flight at once."`
	Rate         float64       `default:"10" placeholder:"R" group:"pacing" help:"Provider API requests per second, all workers together (default 10; 0: no limit)."`
	CPUProfile   string        `hidden:"" name:"cpuprofile" placeholder:"FILE" help:"Write a CPU profile (benchmarks)."`
	MetricsFile  string        `placeholder:"FILE" group:"output" predictor:"file" help:"Write metrics to FILE in Prometheus' text format (0644), replaced atomically at exit: findings by kind, items by status, the last clean audit, for node_exporter's textfile collector (name it *.prom in its directory)."`
	stripeFlags
	paypalFlags
	adyenFlags
	execFlags
	logFormatFlag
	givenFlags `kong:"-"`
}

// Audit is the audit command: every item not refunded exactly once.
func Audit(env Env) (exit int) {
	const name = "audit"
	var c auditCmd
	if code, done := parse(env, name, auditHelp, &c); done {
		return code
	}
	catchBrokenPipe()
	env.Stderr = c.messages(env.Stderr, name)
	if err := c.check(); err != nil {
		return usage(env.Stderr, name, err)
	}
	stopProfile, err := startCPUProfile(c.CPUProfile)
	if err != nil {
		return usage(env.Stderr, name, err)
	}
	defer stopProfile()
	var client refund.Provider
	if c.Provider != "" {
		pf := providerFlags{Provider: c.Provider, stripeFlags: c.stripeFlags, paypalFlags: c.paypalFlags, adyenFlags: c.adyenFlags, execFlags: c.execFlags}
		if i := slices.IndexFunc(c.Journals, postgres.IsURL); i >= 0 {
			pf.checkpoint = c.Journals[i] // Adyen's notifications may be kept there too
		}
		if client, err = pf.provider(env, env.Stderr, name, c.Concurrency, true); err != nil {
			return usage(env.Stderr, name, err)
		}
		defer closeProvider(client)
	}

	a := audit.New()
	var planName string // as messages name it
	if c.Plan != "" {
		in, inName, closeIn, err := openInput(env, c.Plan)
		if err != nil {
			return usage(env.Stderr, name, err)
		}
		defer closeIn()
		planName = inName
		if err := a.AddPlan(in, inName); err != nil {
			return fail(env.Stderr, name, err)
		}
	}
	// Opened after the plan (a bad one leaves no file), held throughout.
	var (
		w     *journal.Writer
		wInfo os.FileInfo // the journal w holds
	)
	if path := c.writeJournal(); path != "" {
		var torn *journal.Torn
		if w, _, torn, err = journal.Open(path, journal.Options{}); err != nil {
			return fail(env.Stderr, name, unwritable(err))
		}
		defer w.Close()
		if torn != nil {
			warnf(env.Stderr, name, "%s", torn)
			a.AddTorn(torn)
		}
		wInfo, _ = os.Stat(path)
	}

	journals := c.Journals
	if len(journals) == 0 {
		journals = []string{"-"}
	}
	// A shared checkpoint is read as the journal it exports; its stored plan
	// is audited unless --plan gives one.
	inputs, exported, done, err := exportInputs(env, name, journals, c.Batch, func(x *checkpointExport) error {
		if c.Plan != "" {
			return nil
		}
		return x.addPlans(context.Background(), a, c.Batch)
	})
	if err != nil {
		return exitCodeFor(err)
	}
	defer done()
	var inNames []string
	for i, path := range inputs {
		in, inName, closeIn, err := openInput(env, path)
		if err != nil {
			return usage(env.Stderr, name, err)
		}
		defer closeIn()
		add, x := a.AddJournal, exported[i]
		if x != nil {
			inName = x.name
			live, err := describeHolders(context.Background(), env.Stderr, name, x, c.Batch)
			if err != nil {
				return usage(env.Stderr, name, err)
			}
			if live > 0 {
				warnf(env.Stderr, name, "%s: %d %s claimed by live workers: items in flight show as in doubt; audit again when the workers have finished", x.name, live, plural(live, "item"))
				add = a.AddHeldJournal
			}
		} else if f, ok := in.(*os.File); ok {
			held, err := heldJournal(f.Name(), inName, wInfo)
			if err != nil {
				return usage(env.Stderr, name, err)
			}
			if held {
				warnf(env.Stderr, name, "journal %s is held by a running refund: items in flight show as in doubt; audit again when it has finished", inName)
				add = a.AddHeldJournal
			}
		}
		inNames = append(inNames, inName)
		torn, err := add(in, inName)
		if err != nil {
			warnf(env.Stderr, name, "%v", err)
			if x == nil && lineError(err) {
				warnf(env.Stderr, name, "the journal cannot be audited past that line: nothing was checked")
			} else if x == nil {
				warnf(env.Stderr, name, "nothing was checked")
			}
			return exitCodeFor(err)
		}
		if torn != nil {
			warnf(env.Stderr, name, "%s", torn) // not of an export: exported whole
		}
	}
	if a.Empty() {
		what := "no journal records in " + strings.Join(inNames, ", ")
		if c.Plan != "" {
			what = "no plan items in " + planName + " and " + what
		}
		return failf(env.Stderr, name, ExitUsage, "%s: nothing to audit", what)
	}

	ctx, stdout, stop := signalContext(env.Stderr, name, env.Stdout)
	defer stop()
	defer func() { exit = interruptedCode(ctx, exit) }()
	opts := audit.Options{Provider: client, AllRefunds: c.AllRefunds, Workers: c.Concurrency, CancelExtras: c.CancelExtras,
		PendingAfter: c.PendingAfter, Actions: w}
	if c.Rate > 0 {
		opts.Pacer = refund.NewPacer(refund.Limits{Global: c.Rate})
	}
	if c.Backfill != "" {
		opts.Backfill = w
	}
	if t, ok := client.(refund.AllTeller); ok {
		if opts.Told, err = t.AllTold(ctx); err != nil {
			return usage(env.Stderr, name, err)
		}
	}

	out := bufio.NewWriterSize(stdout, 64*1024) // a failed write stops the audit
	var rep *audit.Report
	if c.MetricsFile != "" {
		// Written with the code the audit exits with, interrupted included.
		defer func() {
			if err := writeAuditMetrics(c.MetricsFile, rep, interruptedCode(ctx, exit), time.Now()); err != nil {
				warnf(env.Stderr, name, "--metrics-file: %v", err)
			}
		}()
	}
	rep, runErr := a.Run(ctx, opts, func(f *audit.Finding) {
		b, _ := json.Marshal(f) // a Finding always marshals
		out.Write(append(b, '\n'))
		if client != nil {
			out.Flush() // a long audit shows its findings as they come
		}
	})
	stdout.done()         // nothing is left to stop
	outErr := out.Flush() // bufio keeps the first failed write's error
	if rep != nil {
		for _, line := range rep.Lines() {
			warnf(env.Stderr, name, "%s", line)
		}
	}

	var stripeErr *audit.StripeError
	var journalErr *audit.JournalError
	var overflow *money.TotalError
	// Halted or interrupted: the findings so far, no verdict.
	switch {
	case errors.As(runErr, &stripeErr):
		warnf(env.Stderr, name, "halted: %v", stripeErr)
		warnf(env.Stderr, name, "the charges not yet listed were not checked, so this audit gives no verdict")
	case errors.As(runErr, &journalErr):
		warnf(env.Stderr, name, "halted: %v", journalErr)
		warnf(env.Stderr, name, "no API call was made after the failed write, and this audit gives no verdict; fix the disk and audit again")
	case errors.As(runErr, &overflow):
		warnf(env.Stderr, name, "%v", overflow)
		warnf(env.Stderr, name, "no total can be told past it, so this audit gives no verdict")
	case errors.Is(runErr, context.Canceled) && stdoutFailure(ctx) != nil:
		warnf(env.Stderr, name, "stdout: %v: %s", stdoutFailure(ctx), findingsLost)
		warnf(env.Stderr, name, "stopped: the charges not yet listed were not checked, so this audit gives no verdict")
	case errors.Is(runErr, context.Canceled):
		warnf(env.Stderr, name, "interrupted: the charges not yet listed were not checked, so this audit gives no verdict")
	case runErr != nil:
		warnf(env.Stderr, name, "%v", runErr)
	}
	switch {
	case runErr != nil:
		return exitCodeFor(runErr)
	case outErr != nil:
		return failf(env.Stderr, name, ExitJournal, "stdout: %v: %s", outErr, findingsLost)
	case !rep.Clean():
		return ExitFailed
	}
	return ExitOK
}

// findingsLost is what a stdout failure costs audit.
const findingsLost = "findings were lost; audit again with stdout where it can be written"

// check reports flags that do not apply or do not fit together.
func (c *auditCmd) check() error {
	if err := c.inapplicable(); err != nil {
		return err
	}
	if c.Stripe && c.Provider != "" && c.Provider != providerStripe {
		return &usageError{fmt.Sprintf("--stripe and --provider %s: give one", c.Provider)}
	}
	if c.Stripe {
		c.Provider = providerStripe
	}
	switch {
	case c.Concurrency < 1 || c.Concurrency > 64:
		return &usageError{"--concurrency: want 1 to 64"}
	case c.Rate < 0:
		return &usageError{"--rate: want 0 (no limit) or more"}
	case c.Provider == "" && (c.AllRefunds || c.Backfill != "" || c.CancelExtras):
		return &usageError{"--all-refunds, --backfill and --cancel-extras need --provider (or --stripe)"}
	case c.PendingAfter <= 0:
		return &usageError{fmt.Sprintf("--pending-after %v: want a duration above 0", c.PendingAfter)}
	case c.Journal != "" && !c.CancelExtras:
		return &usageError{"--journal names where --cancel-extras records the cancels: give it with --cancel-extras"}
	case c.Journal != "" && c.Backfill != "":
		return &usageError{"--journal and --backfill both name the journal audit writes to: give one"}
	case postgres.IsURL(c.writeJournal()):
		return &usageError{"audit writes backfill and cancel records to a journal file only: write them to a file, then merge it into the PostgreSQL checkpoint with journal-merge -o " + postgres.Redact(c.writeJournal()) + " FILE"}
	case c.CancelExtras && c.writeJournal() == "":
		return &usageError{"--cancel-extras journals each cancel: give --backfill FILE or --journal FILE"}
	}
	stdin := 0
	for _, p := range c.Journals {
		if p == "-" {
			stdin++
		}
	}
	if stdin > 1 || stdin == 1 && c.Plan == "-" || len(c.Journals) == 0 && c.Plan == "-" {
		return &usageError{"stdin can be read only once"}
	}
	if path := c.writeJournal(); path != "" && !c.audits(path) {
		flag := "--backfill"
		if c.Journal != "" {
			flag = "--journal"
		}
		return &usageError{flag + " " + path + ": name it as a JOURNAL to audit too, so what it already holds is not written again"}
	}
	return nil
}

// writeJournal is the journal audit writes to, if any.
func (c *auditCmd) writeJournal() string {
	if c.Backfill != "" {
		return c.Backfill
	}
	return c.Journal
}

// audits reports whether path is one of the journals read.
func (c *auditCmd) audits(path string) bool {
	want, err := filepath.Abs(path)
	if err != nil {
		return false
	}
	for _, p := range c.Journals {
		if p == "-" {
			continue
		}
		if got, err := filepath.Abs(p); err == nil && got == want {
			return true
		}
	}
	return false
}

// lineError reports an error naming a journal line that cannot be read.
func lineError(err error) bool {
	return isErr[*journal.CorruptError](err) || isErr[*journal.VersionError](err) || isErr[*refund.InputError](err)
}

// inapplicable refuses audit's flags that do not apply to this audit.
func (c *auditCmd) inapplicable() error {
	pf := providerFlags{Provider: c.Provider}
	if c.Stripe {
		pf.Provider = providerStripe
	}
	asked := pf.Provider != ""
	pg := slices.ContainsFunc(c.Journals, postgres.IsURL)
	notesFor := "--provider adyen, stripe or paypal"
	if !asked {
		notesFor += ": add --provider adyen (ADYEN_HMAC_KEY), stripe (STRIPE_WEBHOOK_SECRET) or paypal (PAYPAL_WEBHOOK_ID), whose key verifies them (audit --provider adyen --notifications FILE --plan PLAN JOURNAL)"
	}
	rules := append([]applies{{[]string{"exec-create"}, false, "refund: audit never creates a refund (with --provider exec it runs --exec-find)"}}, providerRules(pf.Provider, notesFor, pf.Provider != providerExec && asked,
		applies{[]string{"live"}, asked && pf.Provider != providerExec, "--provider stripe, paypal or adyen: without one audit reads no account"})...)
	rules = append(rules,
		applies{[]string{"concurrency", "rate"}, asked, "--provider: without one audit asks no API"},
		applies{[]string{"batch"}, pg, "a PostgreSQL checkpoint (a postgres://... JOURNAL): a journal file's batches are all audited"})
	return c.refuseInapplicable(rules...)
}
