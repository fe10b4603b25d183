package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/checkpoint/natsjs"
	"github.com/refundkit/refundkit/refund/checkpoint/postgres"
	"github.com/refundkit/refundkit/refund/plan"
)

type refundCmd struct {
	Journal        string        `required:"" placeholder:"FILE|URL" group:"checkpoint" predictor:"file" help:"The checkpoint: a journal file (JSON lines), created 0600 if absent, that one run at a time holds; or a URL of a checkpoint that many runs on many hosts share, each fed the same plan: PostgreSQL (postgres://..., PG* environment variables fill in the rest) or NATS JetStream (nats://host:4222/NAME, docs/nats.md)."`
	Lease          time.Duration `default:"30s" group:"checkpoint" help:"With a shared checkpoint (PostgreSQL or NATS): how long a claim of an item stays this run's without renewal (renewed every third of it), 1s to 24h (with NATS: the ack-wait of the batch's queue, set by the worker that makes it). A run that dies loses its claims after it; another run then looks the items up before anything is sent."`
	Worker         string        `placeholder:"NAME" group:"checkpoint" help:"With a shared checkpoint (PostgreSQL or NATS): the name this run claims items under, shown by audit (default host:pid:random)."`
	Input          string        `arg:"" optional:"" default:"-" placeholder:"PLAN" predictor:"plan" help:"Plan items as JSON lines (default: stdin)."`
	Concurrency    int           `short:"j" default:"8" group:"pacing" help:"Items in flight at once."`
	Shard          string        `placeholder:"K/N" group:"checkpoint" help:"Work only shard K of N of the plan (the partition plan --shard uses), for N workers with a journal each, each fed the whole plan: every worker then knows every item, so a refund of another shard's item is the plan's, and an empty shard is a finished worker (exit 0)."`
	Share          float64       `default:"0.8" type:"fraction" placeholder:"S" group:"pacing" help:"Share of the provider's rate limits the batch takes (stripe, paypal, adyen), 0 to 1; Stripe's: of the account's (25 requests/s in test mode, 100/s live) and of each endpoint's (25/s: creates and look-ups apart). The rest is headroom for the account's other traffic. With a shared checkpoint (PostgreSQL or NATS) the live workers of one account split it among themselves, re-split as they join, end or die; N workers with a journal file each (plan --shard K/N) take 0.8/N each (--share 0.8/4 is 0.2). Each endpoint's share must send one request a minute (a lease when that is shorter)."`
	Rate           *float64      `placeholder:"R" group:"pacing" help:"Requests per second for this run, all endpoints together, instead of --share of the account's limit (0: no pacing at all), at least one a minute (with a shared checkpoint (PostgreSQL or NATS), one a lease when that is shorter). Stripe's endpoints keep --share of their own limits; PayPal's and Adyen's, which publish none, all take --rate."`
	DryRun         bool          `help:"Show what the run would do, and do none of it: no create or cancel call, no journal write (the journal is only read). Items the journal does not settle are looked up at the provider as the run would (reads only, paced as a run is; the credential is needed), each said would_refund, would_adopt, would_hold or would_fail; exit 1 when the run would hold or fail items or leave them in doubt."`
	Offline        bool          `help:"With --dry-run: the journal alone, no look-up at the provider (no credential, no network): every item the journal does not hold is would_refund, whatever the provider holds."`
	ResendAfter500 bool          `name:"resend-after-500" group:"safety" help:"--provider stripe: send items whose earlier call Stripe answered with its own 500 (an indeterminate answer saved under the key) under a new key, once the look-up finds no refund for them. Stripe may still complete such a call while it repairs an incident: use it once the incident is over. Adyen's items need no flag and never get a new key: Adyen cannot list refunds, so a rerun sends such an item again under its same key while Adyen surely keeps it (3.5 days), and Adyen answers for the first call; PayPal's 500s are retried under the same request id in the run."`
	AllowRefunded  bool          `name:"allow-refunded-charges" group:"safety" help:"More refunds on charges that another refundkit batch (or, with --all-refunds, anyone) already refunded are intended. Without it such items are held: journaled as failed, nothing sent."`
	AllRefunds     bool          `group:"safety" help:"Hold items whose charge has refunds without refundkit metadata too (made by hand, in the dashboard or by older scripts)."`
	NoLookup       bool          `group:"safety" help:"Skip the look-up at the provider before an item's first call and trust the journal alone. Saves one request per item; a new batch name, a lost or restored journal or a changed shard count can then refund a charge twice."`
	Progress       string        `enum:"auto,always,never" default:"auto" group:"output" help:"Progress display on stderr (auto: when stderr is a terminal)."`
	Verbose        bool          `short:"v" group:"output" help:"Log every decision on stderr: look-ups, holds, retries, 429s, 500s, key changes, with item, charge, attempt and idempotency key."`
	NoGroupCommit  bool          `hidden:"" help:"One fsync per journal record (benchmark baseline)."`
	CPUProfile     string        `hidden:"" name:"cpuprofile" placeholder:"FILE" help:"Write a CPU profile (benchmarks)."`
	MetricsFile    string        `placeholder:"FILE" group:"output" predictor:"file" help:"Write metrics to FILE in Prometheus' text format (0644), replaced atomically every few seconds and at exit: for node_exporter's textfile collector (name it *.prom in its directory)."`
	MetricsEvery   time.Duration `hidden:"" default:"5s" help:"How often --metrics-file is rewritten (tests)."`
	providerFlags
	logFormatFlag
	givenFlags `kong:"-"`
}

// --lease's range: far longer, its half (PostgreSQL's lock timeout) overflows.
const (
	minLease = time.Second
	maxLease = 24 * time.Hour
)

const refundDescription = `Refund planned items exactly once through Stripe (or --provider paypal, or any refund API with --provider exec), journaling every step.

Reads plan items (JSON lines, as plan writes them) and writes one result line per item on stdout once its outcome is journaled; a summary goes to stderr. Credentials come from the environment only: STRIPE_API_KEY, or PAYPAL_CLIENT_ID and PAYPAL_CLIENT_SECRET (an exec command inherits the environment). Run the same command again to resume: items the journal holds are skipped with no API call; before any other item's first call, and before anything is sent again for an item left in doubt, the payment's refunds are looked up at the provider. A charge that another refundkit batch already refunded is held (failed, nothing sent) unless --allow-refunded-charges says so.

Exit codes: 0 every item refunded, skipped, or accepted and pending at the provider (a later run settles it); 1 some failed, held, in doubt or refunded twice (with a shared checkpoint, PostgreSQL or NATS: by the batch's tally, all workers together, so an item this run left in doubt that another worker settled since is settled; and still 1 for an item this run found refunded twice or saw fail); 2 usage or input error (a plan item that differs from what the journal recorded for it, or a plan that differs from the one a shared checkpoint holds for the batch, included; and a summary total beyond what an int64 of minor units holds, each refund journaled as ever); 3 journal unwritable or replaced (with a shared checkpoint: unreachable for longer than a lease, or unwritable, or a claim lost to another worker; a NATS server refused as not durable enough, without sync_interval: always and under 3 replicas), or stdout unwritable (a full disk, or a closed pipe: refund ... | head -1 exits 3, not by SIGPIPE; nothing new is sent, the calls in flight are journaled first); 4 journal locked by another run; 5 journal corrupt; 6 the provider refused the key, does not answer, or answered with a refund that is not the item's; 130 stopped by SIGINT, 143 by SIGTERM (the calls in flight journaled first). A --dry-run exits as the run would, as far as its look-ups tell: 1 when the run would hold or fail items or leave them in doubt; with --offline it tells only the journal's failures.`

// Refund is the refund command.
func Refund(env Env) (exit int) {
	const name = "refund"
	var c refundCmd
	if code, done := parse(env, name, refundDescription, &c); done {
		return code
	}
	catchBrokenPipe()
	// The metrics' last write has the exit code the process ends with.
	var metrics *refundMetrics
	planRead := false // the whole plan was read: a journal file's batch total is known
	defer func() { metrics.finishOrWarn(exit, planRead) }()
	stderr := newProgressWriter(env.Stderr)
	log := newLogger(stderr, name, c.Verbose, c.LogFormat)
	msgs := c.messages(stderr, name) // with --log-format json, JSON records too
	// Caught from the start: a run stopped while loading exits cleanly.
	ctx, stdout, stop := signalContext(msgs, name, env.Stdout)
	defer stop()
	defer func() { exit = interruptedCode(ctx, exit) }()
	if env.Getenv("GOGC") == "" {
		// The heap is mostly the journal's index: a million-item resume
		// stays well under 200 MB for about 1% more CPU.
		debug.SetGCPercent(50)
	}
	stopProfile, err := startCPUProfile(c.CPUProfile)
	if err != nil {
		return usage(msgs, name, err)
	}
	defer stopProfile()
	shard, err := c.check()
	if err != nil {
		return usage(msgs, name, err)
	}
	pacer, err := c.pacer(env)
	if err != nil {
		return usage(msgs, name, err)
	}
	if metrics, err = c.startMetrics(msgs, name); err != nil {
		return usage(msgs, name, err)
	}

	var client refund.Provider
	if !c.Offline {
		// A dry run looks items up as the run would, read only.
		c.checkpoint = c.Journal
		if client, err = c.provider(env, msgs, name, c.Concurrency, false); err != nil {
			return usage(msgs, name, err)
		}
		defer closeProvider(client)
		client = metrics.provider(client)
	}

	in, inName, closeIn, err := openInput(env, c.Input)
	if err != nil {
		return usage(msgs, name, err)
	}
	defer closeIn()
	if isTerminal(in) {
		warnf(msgs, name, "waiting for plan items on stdin (JSON lines, as plan writes them; end with Ctrl-D)")
	}
	// No plan items is an error before anything is opened: a failed plan
	// before the pipe must not end in an empty journal and exit 0.
	size := &refund.PlanSize{Shard: shard}
	if c.Input != "-" {
		size.File = c.Input
	}
	in, ok, err := size.Peek(in, inName)
	if err != nil {
		warnf(msgs, name, "%v", err)
		if isErr[*refund.InputError](err) {
			warnf(msgs, name, "make plan items with: plan --batch BATCH FILE | refund --journal JOURNAL (refund reads JSON lines as plan writes them); nothing was sent and the journal was not opened")
		}
		return ExitUsage
	}
	if !ok {
		warnf(msgs, name, "no plan items in %s: nothing to refund", inName)
		return failf(msgs, name, ExitUsage, "did the command before the pipe fail? run pipelines with set -o pipefail")
	}

	checkpoint, closeCheckpoint, err := c.openCheckpoint(ctx, msgs, name)
	if err != nil {
		return fail(msgs, name, unwritable(err))
	}
	defer closeCheckpoint()
	if err := c.shareBudget(ctx, env, log, checkpoint, pacer); err != nil {
		return fail(msgs, name, unwritable(err))
	}

	out := newResultWriter(stdout) // a failed write stops the run
	defer out.stop()
	var jsonLog *slog.Logger // the progress as records of a JSON log
	if c.LogFormat == "json" {
		jsonLog = log
	}
	bar := c.progress(stderr, jsonLog, size.Items, checkpoint, metrics)
	defer bar.end()

	var doubts []refund.Result // this run's items left in doubt (OnResult is called one at a time)
	var groups outcomeGroups   // this run's unfinished items by reason, told after the summary
	summary, runErr := refund.Run(refund.WithPlanSize(ctx, size), refund.Config{
		Provider: client, Checkpoint: checkpoint,
		Workers: c.Concurrency, Pacer: pacer, DryRun: c.DryRun, Offline: c.Offline, Shard: shard,
		ResendAfter500: c.ResendAfter500, Log: log,
		NoLookup: c.NoLookup, AllowRefundedCharges: c.AllowRefunded, AllRefunds: c.AllRefunds,
		OnRetry: bar.retrying,
		OnResult: func(r refund.Result) {
			out.write(r)
			groups.add(r)
			bar.add(r)
			metrics.result(r)
			if r.Status == refund.StatusInDoubt {
				doubts = append(doubts, r)
			}
		},
	}, in, inName)
	stdout.done() // nothing is left to stop
	out.stop()
	bar.end()
	planRead = runErr == nil
	if jsonLog != nil {
		jsonLog.Info("summary", summary.LogAttrs()...)
	} else {
		warnf(msgs, name, "%s", summary.String())
	}
	for _, line := range groups.lines() {
		warnf(msgs, name, "%s", line)
	}
	if summary.Overflow != nil {
		// No provider takes such amounts, though each refund is journaled.
		warnf(msgs, name, "%v", summary.Overflow)
		warnf(msgs, name, "that total is beyond what refundkit can count, and beyond any amounts a provider takes: every refund was journaled as it happened; check the plan's amounts and the payments at the provider")
	}
	// The summary counts this run's items; the exit says if the batch is done.
	shared, unfinished := false, 0
	where := redactCheckpoint(c.Journal)
	if cp, ok := checkpoint.(refund.Tallier); ok && !c.DryRun {
		shared = true
		bs, err := cp.Progress(context.WithoutCancel(ctx))
		metrics.batches(bs)
		for _, b := range bs {
			warnf(msgs, name, "checkpoint: batch %s: %d items (%s), by all workers", b.Batch, b.Items, countsText(b.ByStatus))
			unfinished += b.ByStatus["failed"] + b.ByStatus["in_doubt"] + b.ByStatus["unknown"] + b.ByStatus["duplicate"]
		}
		if err != nil && runErr == nil {
			unfinished = 1 // done cannot be said without the tally
			warnf(msgs, name, "the batch's tally could not be read (%v): audit %s says whether it is done", err, where)
		} else if unfinished > 0 && runErr == nil {
			warnf(msgs, name, "the batch is not done: %d %s failed, held, in doubt, refunded twice or not started (other workers may still be on some); audit %s names them", unfinished, plural(unfinished, "item"), where)
		}
	}
	// An item this run left in doubt may have been settled since by another
	// worker (pending counts, unless as the refund this run found missing).
	if shared && unfinished == 0 && runErr == nil {
		for _, r := range doubts {
			st, known, err := checkpoint.Lookup(r.Batch, r.Item)
			settled := st.Status == journal.StatusRefunded || st.Status == journal.StatusFailed ||
				st.Status == journal.StatusPending && st.Refund != r.Refund
			if err != nil || !known || !settled {
				unfinished++
			}
		}
		if unfinished > 0 {
			warnf(msgs, name, "the batch is not done: %d %s this run left in doubt %s not settled since; audit %s names them", unfinished, plural(unfinished, "item"), isAre(unfinished, "is", "are"), where)
		}
	}
	batchDone := shared && unfinished == 0
	if n := summary.ByStatus[refund.StatusInDoubt]; batchDone && runErr == nil && n > 0 {
		warnf(msgs, name, "the %d %s this run left in doubt %s settled since, by another worker's look-up: the batch is done", n, plural(n, "item"), isAre(n, "was", "were"))
	}

	var inputErr *refund.InputError
	var haltErr *refund.HaltError
	journalHalt := errors.As(runErr, &haltErr) && haltErr.Journal
	inDoubt := summary.ByStatus[refund.StatusInDoubt]
	switch {
	case errors.As(runErr, &inputErr):
		warnf(msgs, name, "%v", inputErr)
		warnf(msgs, name, "stopped at that line: nothing was sent for it or after it")
	case journalHalt && errors.Is(haltErr, journal.ErrReplaced):
		warnf(msgs, name, "no API call was made after that; find what replaced or moved the journal (a tool that ignores its lock?), merge the file it moved (if it still exists) into the journal with journal-merge, then run again")
	case journalHalt && errors.Is(runErr, refund.ErrClaimLost):
		warnf(msgs, name, "no API call was made for that item after its claim was lost; run again: the item's new holder looks it up before anything is sent")
	case journalHalt && natsjs.IsURL(c.Journal):
		warnf(msgs, name, "no API call was made after the failed write; once the NATS servers answer again, run again: the checkpoint resumes where it stopped")
	case journalHalt && postgres.IsURL(c.Journal):
		warnf(msgs, name, "no API call was made after the failed write; once the database answers again, run again: the checkpoint resumes where it stopped")
	case journalHalt:
		warnf(msgs, name, "no API call was made after the failed write; free the space or fix the disk, then run again: the journal resumes where it stopped")
	case haltErr != nil:
		// The summary names what halted the run.
	case errors.Is(runErr, context.Canceled) && stdoutFailure(ctx) != nil:
		warnf(msgs, name, "stdout: %v: %s", stdoutFailure(ctx), resultLinesLost)
		warnf(msgs, name, "stopped: nothing new was sent; the calls in flight were finished and journaled, %d %s left in doubt; items not yet sent were left untouched; run again to continue", inDoubt, plural(inDoubt, "item"))
	case errors.Is(runErr, context.Canceled):
		warnf(msgs, name, "interrupted: the calls in flight were finished and journaled, %d %s left in doubt; items not yet sent were left untouched; run again to continue", inDoubt, plural(inDoubt, "item"))
	case runErr != nil:
		warnf(msgs, name, "%v", runErr)
	}
	if runErr != nil {
		return exitCodeFor(runErr)
	}
	// A result line that did not reach stdout is a lost signal all the same.
	if err := out.err(); err != nil {
		return failf(msgs, name, ExitJournal, "stdout: %v: %s", err, resultLinesLost)
	}
	if summary.Overflow != nil {
		return exitCodeFor(summary.Overflow)
	}
	if n := int(summary.Indeterminate); n > 0 {
		f := client.Facts()
		switch {
		case batchDone: // their items were adopted since
			warnf(msgs, name, "%s answered %d %s with its own 500; the refunds were found since and every item of the batch is settled", f.Name, n, plural(n, "call"))
		case f.LateOutcomes:
			warnf(msgs, name, "%s answered %d %s with its own 500: the result is indeterminate (%[1]s may still complete them while it repairs an incident); a rerun looks them up, and sends under a new key only with --resend-after-500", f.Name, n, plural(n, "call"))
		default:
			warnf(msgs, name, "%s answered %d %s with its own 500: the result is indeterminate; %s", f.Name, n, plural(n, "call"), f.AfterIndeterminate())
		}
	}
	if n := summary.ByStatus[refund.StatusPending]; n > 0 {
		warnf(msgs, name, "%d %s accepted and not finished at %s (pending): nothing more is sent for them; run again later to settle them", n, plural(n, "refund"), cmp.Or(summary.Provider, "the provider"))
	}
	// Duplicates and failures are this run's to report; items in doubt are
	// the batch's (the tally says, when shared).
	switch {
	case summary.Duplicates > 0 || summary.ByStatus[refund.StatusFailed] > 0 ||
		summary.ByStatus[refund.StatusWouldHold] > 0 || summary.ByStatus[refund.StatusWouldFail] > 0,
		shared && unfinished > 0, !shared && inDoubt > 0:
		return ExitFailed
	}
	return ExitOK
}

// resultLinesLost: the journal, not the result lines, is the record.
const resultLinesLost = "result lines were lost (the journal holds every outcome: audit it, or run again to print them as skipped)"

// check refuses flags that do not apply or are out of range; reads --shard.
func (c *refundCmd) check() (shard refund.Shard, err error) {
	if c.Shard != "" {
		if shard.K, shard.N, err = plan.ParseShard(c.Shard); err != nil {
			return shard, fmt.Errorf("--%v", err)
		}
	}
	switch err := c.inapplicable(); {
	case err != nil:
		return shard, err
	case c.Concurrency < 1 || c.Concurrency > 256:
		return shard, fmt.Errorf("--concurrency %d: want 1 to 256", c.Concurrency)
	case c.Rate != nil && !(*c.Rate >= 0):
		return shard, fmt.Errorf("--rate %g: want 0 (no pacing) or more requests per second", *c.Rate)
	case !(c.Share > 0 && c.Share <= 1):
		return shard, fmt.Errorf("--share %g: want a share of Stripe's limits above 0 and at most 1", c.Share)
	case isShared(c.Journal) && (c.Lease < minLease || c.Lease > maxLease):
		return shard, fmt.Errorf("--lease %s: want 1s to 24h", c.Lease)
	}
	return shard, nil
}

// inapplicable refuses refund's flags that do not apply to this run.
func (c *refundCmd) inapplicable() error {
	rules := append([]applies{{[]string{"exec-create"}, c.Provider == providerExec, "--provider exec"}}, providerRules(c.Provider, "--provider adyen, stripe or paypal", c.Provider != providerExec,
		applies{[]string{"live"}, c.Provider != providerExec, "--provider stripe, paypal or adyen: an exec command chooses its own API and account"})...)
	rules = append(rules,
		applies{[]string{"lease", "worker"}, isShared(c.Journal), "a shared checkpoint (--journal postgres://... or nats://...): a journal file is held by one run, with no claims to lease or name"},
		applies{[]string{"shard"}, !isShared(c.Journal), "a journal file: the workers of a shared checkpoint claim items instead"},
		applies{[]string{"share"}, c.Provider != providerExec, "a provider whose limits refundkit knows (stripe, paypal, adyen): pace an exec command's API with --rate"},
		applies{[]string{"metrics-every"}, c.MetricsFile != "", "--metrics-file"},
		applies{[]string{"offline"}, c.DryRun, "--dry-run: a run that sends refunds looks each item up at the provider first"},
		applies{[]string{"resend-after-500"}, c.Provider == providerStripe, "--provider stripe, which may still complete a call it answered 500: no other provider's item is ever sent under a new key after its 500 (Adyen's is sent again under its same key while Adyen keeps it, without this flag)"},
	)
	return c.refuseInapplicable(rules...)
}

func isAre(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// outcomeGroups gathers unfinished items by status and code: one line per
// reason, not per item.
type outcomeGroups struct {
	groups map[groupKey]*outcomeGroup
}

// groupShown is how many items a group names before "and N more".
const groupShown = 3

type groupKey struct{ status, code string }

type outcomeGroup struct {
	n     int
	items []string // the first groupShown
	first string   // the first item's message
}

func (g *outcomeGroups) add(r refund.Result) {
	if r.Status != refund.StatusFailed && r.Status != refund.StatusInDoubt {
		return
	}
	if g.groups == nil {
		g.groups = map[groupKey]*outcomeGroup{}
	}
	k := groupKey{r.Status, r.Code}
	x := g.groups[k]
	if x == nil {
		x = &outcomeGroup{first: r.Message}
		g.groups[k] = x
	}
	x.n++
	if len(x.items) < groupShown {
		x.items = append(x.items, r.Item)
	}
}

// lines are the groups, largest first: "12 items failed (CODE): i1, ...".
func (g *outcomeGroups) lines() []string {
	keys := slices.SortedFunc(maps.Keys(g.groups), func(a, b groupKey) int {
		return cmp.Or(cmp.Compare(g.groups[b].n, g.groups[a].n), cmp.Compare(a.status+a.code, b.status+b.code))
	})
	var out []string
	for _, k := range keys {
		x := g.groups[k]
		status := strings.ReplaceAll(k.status, "_", " ")
		names := strings.Join(x.items, ", ")
		if more := x.n - len(x.items); more > 0 {
			names += fmt.Sprintf(" and %d more", more)
		}
		line := fmt.Sprintf("%d %s %s (%s): %s", x.n, plural(x.n, "item"), status, cmp.Or(k.code, "no code"), names)
		if x.first != "" {
			line += "; the first: " + x.first
		}
		out = append(out, line)
	}
	return out
}
