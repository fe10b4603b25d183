package main

// What the shared checkpoints' rows (PostgreSQL, NATS JetStream) have in
// common: N refund processes on one checkpoint beside the file journal's
// ways to use the same concurrency, in the same rounds, and the
// checkpoint's own operations timed in-process beside one fsync.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
)

// sharedJobs is each process's -j in the shared checkpoints' rows:
// refund's default, as a worker is run in production.
const sharedJobs = 8

// workerCounts are the process counts of the workers rows.
var workerCounts = []int{1, 2, 4, 8}

// workerSetting is one latency of a workers row: its plan, and the plan's
// shards for every N of workerCounts.
type workerSetting struct {
	name    string
	items   int
	plan    string
	shards  map[int][]string // plan --shard K/N, by N
	simArgs []string
}

// workerSide is one way of running a workers row's concurrency.
type workerSide struct {
	name     string   // in the table's header
	short    string   // in the ratios' headers and the summary
	commands []string // as the report shows them
	run      func(st *workerSetting, n int) (simRun, error)
}

// perItem is a column of the table: a count per item of the first side's
// runs (the median of the rounds).
type perItem struct {
	header string
	of     func(simRun) float64
}

// fileSides are the file journal with the workers' concurrency: one
// process -j 8×N, and N shard processes with a journal each.
func (b *bench) fileSides() []workerSide {
	return []workerSide{
		{"file journal, 1 process -j 8×N", "file 1 process",
			[]string{b.short(fmt.Sprintf("bin/refund --journal $WORK/sim-journal.jsonl -j %d×N --rate 0 --api-base $SIM_URL PLAN > /dev/null", sharedJobs))},
			func(st *workerSetting, n int) (simRun, error) {
				return b.refundOnSim(st.items, st.plan, st.simArgs, []string{"-j", strconv.Itoa(sharedJobs * n), "--rate", "0"}, false)
			}},
		{"file journals, N shards", "N shards",
			[]string{b.short(fmt.Sprintf("bin/refund --journal $WORK/sim-journal-K.jsonl -j %d --rate 0 --api-base $SIM_URL SHARD_K_OF_N > /dev/null   # N at once", sharedJobs))},
			func(st *workerSetting, n int) (simRun, error) {
				return b.refundsOnSim(st.items, st.shards[n], st.simArgs, []string{"-j", strconv.Itoa(sharedJobs), "--rate", "0"})
			}},
	}
}

// workersRow measures items/s with 1, 2, 4 and 8 processes of every side
// against the simulator at zero latency and at 100 ms: per N, rounds in
// which every side runs once, the order rotated. The first side is the
// row's subject: the ratios and the per-item columns are its. tag names
// the row's files and log lines.
func (b *bench) workersRow(r *row, tag string, sides []workerSide, cols []perItem) error {
	fast, slow := b.sz.SharedItems, b.sz.SharedSlowItems
	var settings []*workerSetting
	defer func() {
		for _, st := range settings {
			removeAll(st.plan, b.path(tag+"-ids-"+strings.Fields(st.name)[0]+".txt"))
			for _, ps := range st.shards {
				removeAll(ps...)
			}
		}
	}()
	for _, s := range []struct {
		name  string
		items int
		extra []string
	}{{"zero latency", fast, nil}, {"100 ms latency", slow, []string{"--latency", "100ms"}}} {
		st := &workerSetting{name: s.name, items: s.items, shards: map[int][]string{}, simArgs: b.simArgs(s.items, s.extra...)}
		settings = append(settings, st)
		var err error
		if st.plan, err = b.sharedPlan(r, tag, strings.Fields(s.name)[0], s.items, st.shards); err != nil {
			return err
		}
	}
	r.commands = append(r.commands, b.short("bin/stripe-sim --addr 127.0.0.1:0 --charges N [--latency 100ms] &   # a fresh simulator per run"))
	for _, sd := range sides {
		r.commands = append(r.commands, sd.commands...)
	}

	r.detailf("%d rounds; in each, every side runs once per setting, the order rotated each round; a fresh simulator (and checkpoint, or journals) per run. items/s is the items over the wall time of the slowest process, start-up and plan load included.", b.sz.Slow)
	r.detailf("")
	r.detailf("%s", workersHeader(sides, cols))
	r.detailf("%s", tableRule(1, 2*len(sides)+len(cols)))
	// medians[setting][side] are the median items/s by N, for the summary.
	medians := make([][][]string, len(settings))
	for si, st := range settings {
		medians[si] = make([][]string, len(sides))
		for _, n := range workerCounts {
			b.logf("%s-workers: %s, %d processes, %d rounds", tag, st.name, n, b.sz.Slow)
			fns := make([]func() (simRun, error), len(sides))
			for i, sd := range sides {
				fns[i] = func() (simRun, error) {
					run, err := sd.run(st, n)
					if err != nil {
						err = fmt.Errorf("%s, N=%d, %s: %w", st.name, n, sd.name, err)
					}
					return run, err
				}
			}
			runs, err := rotate(b.sz.Slow, fns)
			if err != nil {
				return err
			}
			rates := make([][]float64, len(sides))
			for i := range sides {
				rates[i] = mapRuns(runs[i], simRun.itemsPerSec)
				medians[si][i] = append(medians[si][i], fmt.Sprintf("%.0f", median(rates[i])))
			}
			counts := make([]float64, len(cols))
			for i, c := range cols {
				counts[i] = median(mapRuns(runs[0], c.of))
			}
			r.detailf("%s", workersLine(st.name, n, rates, counts))
		}
	}
	r.detailf("")
	var ns []string
	for _, n := range workerCounts {
		ns = append(ns, strconv.Itoa(n))
	}
	byN := func(side int) string {
		return fmt.Sprintf("%s items/s at zero latency, %s at 100 ms", strings.Join(medians[0][side], " / "), strings.Join(medians[1][side], " / "))
	}
	r.cand = fmt.Sprintf("%s, %s processes: %s", sides[0].short, strings.Join(ns, " / "), byN(0))
	var base []string
	for i := 1; i < len(sides); i++ {
		base = append(base, sides[i].short+": "+byN(i))
	}
	r.base = strings.Join(base, "; ")
	r.ratio = "see the table"
	r.verdict = reported
	return nil
}

// workersHeader is the header of a workers row's table.
func workersHeader(sides []workerSide, cols []perItem) string {
	h := []string{"latency", "N", sides[0].name + ": items/s (median; runs)"}
	for _, sd := range sides[1:] {
		h = append(h, sd.name)
	}
	for _, sd := range sides[1:] {
		h = append(h, sides[0].short+" / "+sd.short)
	}
	for _, c := range cols {
		h = append(h, c.header)
	}
	return "| " + strings.Join(h, " | ") + " |"
}

// tableRule is a table's header rule: left columns, then right-aligned ones.
func tableRule(left, right int) string {
	return "|" + strings.Repeat(" --- |", left) + strings.Repeat(" ---: |", right)
}

// workersLine is a line of a workers row's table: every side's median
// items/s with its runs, the first side's ratios over each other (the
// median of the rounds' ratios) and its per-item counts.
func workersLine(setting string, n int, rates [][]float64, counts []float64) string {
	cells := []string{setting, strconv.Itoa(n)}
	for _, rs := range rates {
		cells = append(cells, fmt.Sprintf("%.0f (%s)", median(rs), joinFloats(rs, "%.0f")))
	}
	for _, rs := range rates[1:] {
		cells = append(cells, fmt.Sprintf("%.2fx", median(pairRatios(rates[0], rs))))
	}
	for _, c := range counts {
		cells = append(cells, fmt.Sprintf("%.1f", c))
	}
	return "| " + strings.Join(cells, " | ") + " |"
}

// sharedPlan writes the plan of items charges the simulator generates
// (plan over their ids) and its shards for every N of workerCounts.
func (b *bench) sharedPlan(r *row, tag, setting string, items int, shards map[int][]string) (string, error) {
	name := tag + "-%s-" + setting
	gen := b.path(fmt.Sprintf(name, "gen") + ".jsonl")
	defer removeAll(gen)
	if err := b.gen2(r, gen, "plan", items, "B"); err != nil {
		return "", err
	}
	ids := b.path(fmt.Sprintf(name, "ids") + ".txt")
	if err := chargeIDs(gen, ids); err != nil {
		return "", err
	}
	plan := b.path(fmt.Sprintf(name, "plan") + ".jsonl")
	if err := b.planInto(r, plan, ids); err != nil {
		return "", err
	}
	for _, n := range workerCounts {
		for k := 1; k <= n; k++ {
			p := b.path(fmt.Sprintf("%s-%dof%d.jsonl", fmt.Sprintf(name, "plan"), k, n))
			if err := b.planInto(r, p, ids, "--shard", fmt.Sprintf("%d/%d", k, n)); err != nil {
				return "", err
			}
			shards[n] = append(shards[n], p)
		}
	}
	return plan, nil
}

// planInto runs bin/plan --batch B over a charge list into out, recording
// the first command of each kind in the row.
func (b *bench) planInto(r *row, out, charges string, extra ...string) error {
	exe, err := b.tool("plan")
	if err != nil {
		return err
	}
	c := cmdSpec{argv: append(append([]string{exe, "--batch", "B"}, extra...), charges), stdout: out}
	res, err := b.run(c)
	if err == nil && res.exit != 0 {
		err = fmt.Errorf("%s: exit status %d%s", b.show(c), res.exit, quoteStderr(res.stderr))
	}
	if len(extra) == 0 || strings.HasPrefix(extra[len(extra)-1], "1/") {
		r.commands = append(r.commands, b.show(c))
	}
	return err
}

// workersOn starts a simulator with simArgs and runs n refund processes
// on one shared checkpoint (journalURL) at once over the same plan
// against it, -j 8 each.
func (b *bench) workersOn(simArgs []string, items int, journalURL, plan string, n int) (simRun, error) {
	return b.refundsAt(simArgs, items, n, func(k int, exe, apiBase string) []string {
		return []string{exe, "--journal", journalURL, "--worker", fmt.Sprintf("w%d", k+1), "-j", strconv.Itoa(sharedJobs), "--rate", "0", "--api-base", apiBase, plan}
	})
}

// recordsPerItem is the records a run wrote over its items: a shared
// checkpoint's worker writes each append on its own (a commit, a
// key-value write).
func recordsPerItem(r simRun) float64 { return float64(r.sum.Records) / float64(max(1, r.sum.Items)) }

// checkpointOps times a shared checkpoint's operations one by one against
// its real server, after loading a plan of 2×rounds+1 items: rounds of
// Claim(1) and Release (the item given back unsettled); then rounds of one
// item's whole way through a worker, one step at a time: Claim(1), its
// payment's lock taken, Append of the intent, Append of the refunded
// outcome, the lock given up, Release. It fills the row beside one
// write+fsync of a journal line, and returns the operations' medians in
// milliseconds by name, for the caller's notes.
func (b *bench) checkpointOps(r *row, cp refund.Claims) (map[string]float64, error) {
	ctx := b.ctx
	rounds := b.sz.SharedRounds
	items := 2*rounds + 1
	plan := make([]refund.PlanLine, items)
	charge := map[string]string{}
	for i := range plan {
		plan[i] = refund.PlanLine{Item: &refund.Item{Batch: "B", Item: fmt.Sprintf("it%d", i+1), Charge: fmt.Sprintf("ch_sim%07d", i+1)}, Line: i + 1}
		charge[plan[i].Item.Item] = plan[i].Item.Charge
	}
	start := time.Now()
	if err := cp.Load(ctx, plan); err != nil {
		return nil, err
	}
	load := time.Since(start)
	claim := func() (refund.Claimed, time.Duration, error) {
		start := time.Now()
		got, _, err := cp.Claim(ctx, 1, false)
		d := time.Since(start)
		if err == nil && len(got) != 1 {
			err = fmt.Errorf("claim: got %d items, want 1", len(got))
		}
		if err != nil {
			return refund.Claimed{}, 0, err
		}
		return got[0], d, nil
	}
	timed := func(f func() error) (time.Duration, error) {
		start := time.Now()
		err := f()
		return time.Since(start), err
	}

	b.logf("%s: %d rounds of Claim+Release", r.name, rounds)
	var claimOnly, claimRelease []time.Duration
	for range rounds {
		start := time.Now()
		cl, d, err := claim()
		if err != nil {
			return nil, err
		}
		if err := cp.Release(ctx, cl.Batch, cl.Item); err != nil {
			return nil, err
		}
		claimRelease = append(claimRelease, time.Since(start))
		claimOnly = append(claimOnly, d)
	}

	b.logf("%s: %d items through claim, lock, intent, outcome, unlock, release", r.name, rounds)
	var locks, intents, outcomes, unlocks, releases, whole []time.Duration
	for i := range rounds {
		start := time.Now()
		cl, _, err := claim()
		if err != nil {
			return nil, err
		}
		rec := func(typ journal.Type) *journal.Record {
			r := &journal.Record{V: 1, Type: typ, Time: time.Now().UTC(), Batch: cl.Batch, Item: cl.Item,
				Charge: charge[cl.Item], Attempt: 1, Key: refund.IdempotencyKey(cl.Batch, cl.Item, 1)}
			if typ == journal.TypeRefunded {
				r.Refund, r.Amount, r.Currency, r.Status = fmt.Sprintf("re_bench%07d", i+1), 1000, "usd", "succeeded"
			}
			return r
		}
		var unlock func()
		steps := []struct {
			ds *[]time.Duration
			f  func() error
		}{
			{&locks, func() (err error) {
				unlock, err = cp.LockPayments(ctx, cl.Batch, cl.Item, []string{charge[cl.Item]})
				return err
			}},
			{&intents, func() error { return cp.Append(rec(journal.TypeIntent)) }},
			{&outcomes, func() error { return cp.Append(rec(journal.TypeRefunded)) }},
			{&unlocks, func() error { unlock(); return nil }},
			{&releases, func() error { return cp.Release(ctx, cl.Batch, cl.Item) }},
		}
		for _, s := range steps {
			d, err := timed(s.f)
			if err != nil {
				return nil, fmt.Errorf("item %d: %w", i+1, err)
			}
			*s.ds = append(*s.ds, d)
		}
		whole = append(whole, time.Since(start))
	}
	fsync, err := b.fsyncLatency(b.sz.Fsyncs)
	if err != nil {
		return nil, err
	}
	ops := []struct {
		name string
		ds   []time.Duration
	}{
		{opClaim, claimOnly},
		{opClaimRelease, claimRelease},
		{opIntent, intents},
		{opOutcome, outcomes},
		{opLock, locks},
		{opUnlock, unlocks},
		{opRelease, releases},
		{opWhole, whole},
		{opFsync, fsync},
	}
	medians := map[string]float64{}
	r.detailf("| operation | median | p90 | min | rounds |")
	r.detailf("%s", tableRule(1, 4))
	for _, op := range ops {
		ms := durations(op.ds)
		medians[op.name] = median(ms)
		r.detailf("%s", opLine(op.name, ms))
	}
	r.detailf("")
	r.detailf("Load of the %d-item plan took %.1f ms.", items, float64(load.Microseconds())/1000)
	cr, ap, way, fs := medians[opClaimRelease], medians[opIntent], medians[opWhole], medians[opFsync]
	r.cand = fmt.Sprintf("Claim+Release %.2f ms, fenced Append %.2f ms, one item's whole way %.2f ms (medians)", cr, ap, way)
	r.base = fmt.Sprintf("one write+fsync of a journal line in the work dir: %.3f ms", fs)
	r.ratio = fmt.Sprintf("%.1fx and %.1fx a file fsync", cr/max(fs, 1e-9), ap/max(fs, 1e-9))
	r.verdict = reported
	return medians, nil
}

// The operations of checkpointOps, as its table names them.
const (
	opClaim        = "Claim(1), the claim alone"
	opClaimRelease = "Claim(1) + Release (given back unsettled)"
	opIntent       = "Append(1 record), fenced: an intent"
	opOutcome      = "Append(1 record), fenced: a refunded outcome"
	opLock         = "LockPayments(1 key): the payment's lock taken"
	opUnlock       = "the lock given up"
	opRelease      = "Release of the settled item"
	opWhole        = "one item's whole way: Claim(1), lock, intent, outcome, unlock, Release"
	opFsync        = "one write+fsync of a journal line in the work dir (the file journal's)"
)

// opLine is a line of the operations' table, in milliseconds.
func opLine(name string, ms []float64) string {
	if len(ms) == 0 {
		return fmt.Sprintf("| %s | | | | 0 |", name)
	}
	return fmt.Sprintf("| %s | %.3f ms | %.3f ms | %.3f ms | %d |", name, median(ms), percentile(ms, 90), slices.Min(ms), len(ms))
}
