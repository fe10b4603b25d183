package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// verdict is how a row came out.
type verdict int

const (
	reported verdict = iota // no target: the figure is for scale
	met
	missed
	failed // a binary is missing or a check refused a run: no figure
)

// row is one line of the results table and its details.
type row struct {
	name     string
	what     string
	cand     string // refundkit's figure
	base     string // the baseline's figure
	ratio    string
	target   string
	verdict  verdict
	err      error
	commands []string // as the report shows them
	details  []string // markdown lines
}

// judge sets the verdict from whether the target was met.
func (r *row) judge(ok bool) {
	r.verdict = missed
	if ok {
		r.verdict = met
	}
}

func (r *row) detailf(format string, args ...any) {
	r.details = append(r.details, fmt.Sprintf(format, args...))
}

// rows are the measurements, in the order they run.
var rows = []struct {
	name string
	run  func(*bench, *row) error
}{
	{"restart", (*bench).restart},
	{"audit", (*bench).audit},
	{"refund", (*bench).refundFull},
	{"rate", (*bench).refundRate},
	{"lookup", (*bench).lookupCost},
	{"pacing", (*bench).pacing},
	{"merge", (*bench).merge},
	{"plan", (*bench).plan},
}

func rowNames() []string {
	var names []string
	for _, r := range rows {
		names = append(names, r.name)
	}
	return names
}

// restart times refund over a journal that already holds every item of
// the plan, against a dead API: each item must be skipped with no call.
func (b *bench) restart(r *row) error {
	n := b.sz.Big
	r.what = fmt.Sprintf("restart over a complete journal: %s-item plan, %s-record journal, zero API calls", num(n), num(n))
	r.target = "< 2 s wall, < 200 MB RSS"
	exe, err := b.tool("refund")
	if err != nil {
		return err
	}
	plan, journal, out := b.path("restart-plan.jsonl"), b.path("restart-journal.jsonl"), b.path("restart-out.jsonl")
	defer removeAll(plan, journal, out)
	if err := b.gen2(r, plan, "plan", n, "B"); err != nil {
		return err
	}
	if err := b.gen2(r, journal, "journal", n, "B"); err != nil {
		return err
	}
	dead, err := deadAPI()
	if err != nil {
		return err
	}
	cand := cmdSpec{argv: []string{exe, "--journal", journal, plan}, env: []string{"STRIPE_API_BASE=" + dead}}
	base := cmdSpec{argv: []string{"jq", "-c", ".", journal}}
	r.commands = append(r.commands, b.show(cand), b.show(base))
	check := func(res result) error {
		if res.exit != 0 {
			return fmt.Errorf("exit status %d, want 0", res.exit)
		}
		s, err := parseSummary(res.stderr)
		if err != nil {
			return err
		}
		if s.Skipped != int64(n) || s.Creates != 0 || s.Lists != 0 || s.Records != 0 {
			return fmt.Errorf("%d skipped, %d create and %d list calls, %d records written: want %d, 0, 0, 0", s.Skipped, s.Creates, s.Lists, s.Records, n)
		}
		return nil
	}
	before, err := os.Stat(journal)
	if err != nil {
		return err
	}
	// One untimed run of each warms the page cache, and the candidate's
	// result lines are kept to check that every item came back skipped.
	keep := cand
	keep.stdout = out
	if _, err := b.checked(keep, check)(); err != nil {
		return err
	}
	lines, skipped, err := countLines(out, `"status":"skipped"`)
	if err != nil {
		return err
	}
	if lines != n || skipped != n {
		return fmt.Errorf("refund wrote %d result lines, %d of them skipped: want %d of each", lines, skipped, n)
	}
	if _, err := b.checked(base, exitIs(0))(); err != nil {
		return err
	}
	b.logf("restart: %d rounds of refund and jq", b.sz.Fast)
	cs, bs, err := alternate(b.sz.Fast, b.checked(cand, check), b.checked(base, exitIs(0)))
	if err != nil {
		return err
	}
	after, err := os.Stat(journal)
	if err != nil {
		return err
	}
	if after.Size() != before.Size() {
		return fmt.Errorf("the journal grew from %d to %d bytes over runs that had nothing to do", before.Size(), after.Size())
	}
	wall, peak := median(seconds(cs)), slices.Max(rssMB(cs))
	r.cand = fmt.Sprintf("%.2f s (CPU %.2f s), %.0f MB RSS", wall, median(cpuSeconds(cs)), peak)
	r.base = fmt.Sprintf("%.2f s (CPU %.2f s), %.0f MB RSS", median(seconds(bs)), median(cpuSeconds(bs)), slices.Max(rssMB(bs)))
	r.ratio = fmt.Sprintf("%.1fx faster than jq", median(pairRatios(seconds(bs), seconds(cs))))
	r.judge(wall < 2 && peak < 200)
	r.detailf("Zero API calls: `STRIPE_API_BASE` names a loopback port where nothing listens, so any call would fail the run; every run exited 0 with `%s skipped ... 0 create and 0 list calls ... 0 journal records`, an untimed run wrote %s result lines all `skipped`, and the journal kept its size (%s bytes).", num(n), num(n), num(int(before.Size())))
	r.detailf("RSS is the peak over the runs (refund and jq alike); wall time the median.")
	r.details = append(r.details, runsTable("refund", cs, "jq", bs, false)...)
	return nil
}

// audit times an offline audit of a journal holding a few duplicate
// refunds against the jq pipeline that finds them; both must name the same
// charges.
func (b *bench) audit(r *row) error {
	n, dups := b.sz.Big, b.sz.Dups
	r.what = fmt.Sprintf("offline `audit` of a %s-record journal with %d duplicate refunds", num(n+dups), dups)
	r.target = ">= 10x faster than jq, same duplicates"
	exe, err := b.tool("audit")
	if err != nil {
		return err
	}
	journal, auditOut, jqOut := b.path("audit-journal.jsonl"), b.path("audit-findings.jsonl"), b.path("jq-duplicates.txt")
	defer removeAll(journal, auditOut, jqOut)
	if err := b.gen2(r, journal, "journal", n, "B", dups); err != nil {
		return err
	}
	cand := cmdSpec{argv: []string{exe, journal}, stdout: auditOut}
	script := fmt.Sprintf(`jq -c 'select(.type=="refunded")|.charge' %s | LC_ALL=C sort | uniq -d`, shellQuote(journal))
	base := cmdSpec{argv: []string{"bash", "-o", "pipefail", "-c", script}, stdout: jqOut}
	r.commands = append(r.commands, b.show(cand), b.short(script)+" > "+b.short(jqOut))
	var auditSet, jqSet []string
	checkAudit := func(res result) error {
		if res.exit != 1 {
			return fmt.Errorf("exit status %d, want 1 (findings)", res.exit)
		}
		var err error
		auditSet, err = duplicateCharges(auditOut)
		return err
	}
	checkJq := func(res result) error {
		if res.exit != 0 {
			return fmt.Errorf("exit status %d, want 0", res.exit)
		}
		data, err := os.ReadFile(jqOut)
		if err != nil {
			return err
		}
		jqSet = nil
		for _, l := range strings.Fields(string(data)) {
			c, err := strconv.Unquote(l)
			if err != nil {
				return fmt.Errorf("jq printed %q: %v", l, err)
			}
			jqSet = append(jqSet, c)
		}
		slices.Sort(jqSet)
		return nil
	}
	same := func() error {
		if len(auditSet) != dups || !slices.Equal(auditSet, jqSet) {
			return fmt.Errorf("audit found duplicates on %v, jq on %v: want the same %d charges", auditSet, jqSet, dups)
		}
		return nil
	}
	if _, err := b.checked(cand, checkAudit)(); err != nil {
		return err
	}
	if _, err := b.checked(base, checkJq)(); err != nil {
		return err
	}
	if err := same(); err != nil {
		return err
	}
	b.logf("audit: %d rounds of audit and jq", b.sz.Fast)
	// Every run's findings are compared, not only the first.
	candSame := b.checked(cand, func(res result) error {
		if err := checkAudit(res); err != nil {
			return err
		}
		return same()
	})
	baseSame := b.checked(base, func(res result) error {
		if err := checkJq(res); err != nil {
			return err
		}
		return same()
	})
	cs, bs, err := alternate(b.sz.Fast, candSame, baseSame)
	if err != nil {
		return err
	}
	ratio := median(pairRatios(seconds(bs), seconds(cs)))
	r.cand = fmt.Sprintf("%.2f s (CPU %.2f s), %.0f MB RSS", median(seconds(cs)), median(cpuSeconds(cs)), slices.Max(rssMB(cs)))
	r.base = fmt.Sprintf("%.2f s (CPU %.2f s), %.0f MB RSS", median(seconds(bs)), median(cpuSeconds(bs)), slices.Max(rssMB(bs)))
	r.ratio = fmt.Sprintf("%.1fx faster than jq", ratio)
	r.judge(ratio >= 10)
	r.detailf("Both found duplicate refunds on the same %d charges in every run: %s (audit's `duplicate` findings, exit 1; jq's `uniq -d`).", dups, strings.Join(auditSet, ", "))
	r.detailf("audit does more than the pipeline: it checks every record, folds each item's state and writes a finding with the refunds, amounts and a remedy.")
	r.details = append(r.details, runsTable("audit", cs, "jq pipeline", bs, false)...)
	return nil
}

// duplicateCharges reads audit's findings and returns the charges of its
// duplicate findings, sorted.
func duplicateCharges(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var charges []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for line := 1; sc.Scan(); line++ {
		var fd struct {
			Finding       string `json:"finding"`
			Charge        string `json:"charge"`
			PaymentIntent string `json:"payment_intent"`
		}
		if err := json.Unmarshal(sc.Bytes(), &fd); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", filepath.Base(path), line, err)
		}
		if fd.Finding == "duplicate" {
			charges = append(charges, fd.Charge+fd.PaymentIntent)
		}
	}
	slices.Sort(charges)
	return charges, sc.Err()
}

// refundFull refunds against a simulator with no latency and no rate
// limit, so the journal's fsyncs bound the run: first a few -j values,
// then the best one with group commit against one fsync per record.
func (b *bench) refundFull(r *row) error {
	items := b.sz.SimItems
	r.what = fmt.Sprintf("`refund` of %s items against the simulator: zero latency, `--rate 0`, real fsync", num(items))
	r.target = ">= 3,000 items/s"
	plan := b.path("sim-plan.jsonl")
	defer removeAll(plan, b.path("sim-journal.jsonl"))
	if err := b.gen2(r, plan, "plan", items, "B"); err != nil {
		return err
	}
	simArgs := b.simArgs(items)
	flags := func(jobs int, noGroup bool) []string {
		f := []string{"-j", strconv.Itoa(jobs), "--rate", "0"}
		if noGroup {
			f = append(f, "--no-group-commit")
		}
		return f
	}
	runOne := func(jobs int, noGroup bool) func() (simRun, error) {
		return func() (simRun, error) { return b.refundOnSim(items, plan, simArgs, flags(jobs, noGroup), false) }
	}
	r.commands = append(r.commands,
		b.short("bin/stripe-sim "+strings.Join(simArgs, " ")+" &   # a fresh simulator per run; its URL is read from the file"),
		b.short(fmt.Sprintf("bin/refund --journal %s -j J --rate 0 [--no-group-commit] --api-base $SIM_URL %s > /dev/null   # a new journal per run", b.path("sim-journal.jsonl"), plan)))

	// The -j sweep: rounds over every value, starting each round at the
	// next value, so no value always runs first.
	b.logf("refund: -j %v, %d rounds", b.sz.Jobs, b.sz.Slow)
	sweep := map[int][]simRun{}
	for round := range b.sz.Slow {
		for k := range b.sz.Jobs {
			jobs := b.sz.Jobs[(k+round)%len(b.sz.Jobs)]
			run, err := runOne(jobs, false)()
			if err != nil {
				return fmt.Errorf("-j %d: %w", jobs, err)
			}
			sweep[jobs] = append(sweep[jobs], run)
		}
	}
	best := b.sz.Jobs[0]
	r.details = append(r.details, fmt.Sprintf("**-j sweep** (group commit, %d runs each, a fresh simulator and journal per run):", b.sz.Slow), "",
		"| -j | items/s (median) | runs, items/s | records per fsync |", "| ---: | ---: | --- | ---: |")
	for _, jobs := range b.sz.Jobs {
		rate := median(mapRuns(sweep[jobs], simRun.itemsPerSec))
		if rate > median(mapRuns(sweep[best], simRun.itemsPerSec)) {
			best = jobs
		}
		r.detailf("| %d | %.0f | %s | %.1f |", jobs, rate, joinFloats(mapRuns(sweep[jobs], simRun.itemsPerSec), "%.0f"), median(mapRuns(sweep[jobs], recordsPerFsync)))
	}
	r.detailf("")

	b.logf("refund: -j %d, %d rounds of group commit and --no-group-commit", best, b.sz.Fast)
	cs, bs, err := alternate(b.sz.Fast, runOne(best, false), runOne(best, true))
	if err != nil {
		return err
	}
	rate, baseRate := median(mapRuns(cs, simRun.itemsPerSec)), median(mapRuns(bs, simRun.itemsPerSec))
	gain := median(pairRatios(mapRuns(cs, simRun.itemsPerSec), mapRuns(bs, simRun.itemsPerSec)))
	recs, perFsync := median(mapRuns(cs, recordsPerFsync)), median(mapRuns(cs, itemsPerFsync))
	r.cand = fmt.Sprintf("%.0f items/s at -j %d; %.1f records (%.1f refunds) per fsync", rate, best, recs, perFsync)
	r.base = fmt.Sprintf("`--no-group-commit`: %.0f items/s; %.1f record per fsync", baseRate, median(mapRuns(bs, recordsPerFsync)))
	r.ratio = fmt.Sprintf("%.2fx group-commit gain", gain)
	r.judge(rate >= 3000)
	r.detailf("**Group commit against one fsync per record**, -j %d, %d rounds, the order flipped each round:", best, b.sz.Fast)
	r.detailf("")
	r.detailf("| | items/s (median) | runs, items/s | wall (median) | journal records / fsyncs (median run) | records per fsync | refunds per fsync |")
	r.detailf("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
	for _, side := range []struct {
		name string
		runs []simRun
	}{{"group commit", cs}, {"`--no-group-commit`", bs}} {
		mid := side.runs[medianIndex(mapRuns(side.runs, simRun.itemsPerSec))]
		r.detailf("| %s | %.0f | %s | %.2f s | %s / %s | %.1f | %.2f |", side.name, median(mapRuns(side.runs, simRun.itemsPerSec)),
			joinFloats(mapRuns(side.runs, simRun.itemsPerSec), "%.0f"), median(mapRuns(side.runs, wallSeconds)),
			num(int(mid.sum.Records)), num(int(mid.sum.Fsyncs)), median(mapRuns(side.runs, recordsPerFsync)), median(mapRuns(side.runs, itemsPerFsync)))
	}
	r.detailf("")
	r.detailf("Each refund is two durable records, its intent (fsynced before the call) and its outcome, so one fsync per record costs two fsyncs per refund; group commit lets the records of all workers in flight share one. Every run refunded all %s items exactly once (refund's summary and the simulator's `refunds_created`). refund's peak RSS: %.0f MB.", num(items), slices.Max(mapRuns(cs, rssOf)))
	return nil
}

// refundRate refunds against a slow simulator under the rate limit: the
// run should go at the limit.
func (b *bench) refundRate(r *row) error {
	items, limit := b.sz.RateItems, b.sz.Rate
	r.what = fmt.Sprintf("`refund` of %s items against the simulator with `--latency 250ms`, `--rate %d -j 64`", num(items), limit)
	r.target = fmt.Sprintf(">= %d requests/s", limit*95/100)
	// Each item is two requests (the look-up before its first call, then the
	// create), so the limit is on requests, not items. --rate R is the
	// run's total; each endpoint keeps --share (0.8) of Stripe's 25/s, so R
	// is kept up to 40.
	plan := b.path("rate-plan.jsonl")
	defer removeAll(plan, b.path("sim-journal.jsonl"))
	if err := b.gen2(r, plan, "plan", items, "B"); err != nil {
		return err
	}
	simArgs := b.simArgs(items, "--latency", "250ms")
	flags := []string{"-j", "64", "--rate", strconv.Itoa(limit)}
	r.commands = append(r.commands,
		b.short("bin/stripe-sim "+strings.Join(simArgs, " ")+" &   # a fresh simulator per run"),
		b.short(fmt.Sprintf("bin/refund --journal %s %s --api-base $SIM_URL %s > /dev/null", b.path("sim-journal.jsonl"), strings.Join(flags, " "), plan)),
		"GET $SIM_URL/_sim/stats   # every 100 ms during the run, and at its end")
	b.logf("rate: %d runs of %d items at --rate %d", b.sz.Slow, items, limit)
	var runs []simRun
	for range b.sz.Slow {
		run, err := b.refundOnSim(items, plan, simArgs, flags, true)
		if err != nil {
			return err
		}
		runs = append(runs, run)
	}
	rate := median(mapRuns(runs, simRun.itemsPerSec))
	simRate := median(mapRuns(runs, func(x simRun) float64 { return float64(apiRequests(x.stats)) / x.wall.Seconds() }))
	steady := median(mapRuns(runs, func(x simRun) float64 { return x.sustained }))
	r.cand = fmt.Sprintf("%.1f requests/s over the run, %.1f sustained (%.1f items/s)", simRate, steady, rate)
	r.base = fmt.Sprintf("the limit: %d requests/s", limit)
	r.ratio = fmt.Sprintf("%.1f%% of the limit", 100*simRate/float64(limit))
	r.judge(simRate >= float64(limit)*0.95 && steady >= float64(limit)*0.95)
	r.detailf("| run | wall | items/s | API requests at the simulator | requests/s over the run | sustained requests/s (10%%-90%% of the requests) | 429s |")
	r.detailf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for i, x := range runs {
		r.detailf("| %d | %.2f s | %.1f | %s | %.1f | %.1f | %d |", i+1, x.wall.Seconds(), x.itemsPerSec(), num(int(apiRequests(x.stats))),
			float64(apiRequests(x.stats))/x.wall.Seconds(), x.sustained, x.stats.RateLimited)
	}
	r.detailf("")
	r.detailf("Over the whole run includes start-up, the first burst (the limiter holds %d tokens) and the last calls' 250 ms. Each run refunded all %s items exactly once.", max(1, limit/10), num(items))
	return nil
}

// lookupCost measures what the look-up before each item's first call costs:
// refund with it (the default) against --no-lookup, alternately, at full
// speed and under the rate limit with latency.
func (b *bench) lookupCost(r *row) error {
	items, slow, limit := b.sz.SimItems, b.sz.RateItems, b.sz.Rate
	r.what = fmt.Sprintf("the look-up before each first call: `refund` against `refund --no-lookup`, %s items at zero latency `--rate 0 -j 64`, and %s items at `--latency 250ms --rate %d -j 64`", num(items), num(slow), limit)
	r.target = "one read per item; measured, no target"
	plan, slowPlan := b.path("lookup-plan.jsonl"), b.path("lookup-slow-plan.jsonl")
	defer removeAll(plan, slowPlan, b.path("sim-journal.jsonl"))
	if err := b.gen2(r, plan, "plan", items, "B"); err != nil {
		return err
	}
	if err := b.gen2(r, slowPlan, "plan", slow, "B"); err != nil {
		return err
	}
	fast := []string{"-j", "64", "--rate", "0"}
	limited := []string{"-j", "64", "--rate", strconv.Itoa(limit)}
	runOne := func(n int, plan string, simArgs, flags []string, noLookup bool) func() (simRun, error) {
		if noLookup {
			flags = append(slices.Clone(flags), "--no-lookup")
		}
		return func() (simRun, error) { return b.refundOnSim(n, plan, simArgs, flags, false) }
	}
	r.commands = append(r.commands,
		b.short(fmt.Sprintf("bin/refund --journal %s -j 64 --rate 0 [--no-lookup] --api-base $SIM_URL %s > /dev/null   # a fresh simulator and journal per run", b.path("sim-journal.jsonl"), plan)),
		b.short(fmt.Sprintf("bin/refund --journal %s -j 64 --rate %d [--no-lookup] --api-base $SIM_URL %s > /dev/null   # simulator with --latency 250ms", b.path("sim-journal.jsonl"), limit, slowPlan)))
	b.logf("lookup: %d rounds at full speed, %d rounds rate-limited", b.sz.Fast, b.sz.Slow)
	fc, fb, err := alternate(b.sz.Fast, runOne(items, plan, b.simArgs(items), fast, false), runOne(items, plan, b.simArgs(items), fast, true))
	if err != nil {
		return err
	}
	slowSim := b.simArgs(slow, "--latency", "250ms")
	sc, sb, err := alternate(b.sz.Slow, runOne(slow, slowPlan, slowSim, limited, false), runOne(slow, slowPlan, slowSim, limited, true))
	if err != nil {
		return err
	}
	perItem := func(x simRun) float64 { return float64(apiRequests(x.stats)) / float64(max(1, x.sum.Items)) }
	fRate, fBase := median(mapRuns(fc, simRun.itemsPerSec)), median(mapRuns(fb, simRun.itemsPerSec))
	sRate, sBase := median(mapRuns(sc, simRun.itemsPerSec)), median(mapRuns(sb, simRun.itemsPerSec))
	r.cand = fmt.Sprintf("%.1f requests per item; %.0f items/s at full speed, %.1f items/s at `--rate %d`", median(mapRuns(fc, perItem)), fRate, sRate, limit)
	r.base = fmt.Sprintf("`--no-lookup`: %.1f requests per item; %.0f items/s, %.1f items/s", median(mapRuns(fb, perItem)), fBase, sBase)
	r.ratio = fmt.Sprintf("%.2fx and %.2fx the items/s of `--no-lookup`", median(pairRatios(mapRuns(fc, simRun.itemsPerSec), mapRuns(fb, simRun.itemsPerSec))),
		median(pairRatios(mapRuns(sc, simRun.itemsPerSec), mapRuns(sb, simRun.itemsPerSec))))
	r.judge(true)
	r.detailf("| setting | side | items/s (median) | runs, items/s | requests per item | API requests (median run) |")
	r.detailf("| --- | --- | ---: | --- | ---: | ---: |")
	for _, side := range []struct {
		setting, name string
		runs          []simRun
	}{{"zero latency, --rate 0", "look-up (default)", fc}, {"zero latency, --rate 0", "`--no-lookup`", fb},
		{fmt.Sprintf("250 ms, --rate %d", limit), "look-up (default)", sc}, {fmt.Sprintf("250 ms, --rate %d", limit), "`--no-lookup`", sb}} {
		mid := side.runs[medianIndex(mapRuns(side.runs, simRun.itemsPerSec))]
		r.detailf("| %s | %s | %.1f | %s | %.2f | %s |", side.setting, side.name, median(mapRuns(side.runs, simRun.itemsPerSec)),
			joinFloats(mapRuns(side.runs, simRun.itemsPerSec), "%.0f"), median(mapRuns(side.runs, perItem)), num(int(apiRequests(mid.stats))))
	}
	r.detailf("")
	r.detailf("The look-up is one `GET /v1/refunds?charge=` per item the journal has never seen, before its first `POST /v1/refunds`; under one rate limit for both, it halves the items per second. Stripe limits the two endpoints separately (25/s each by default), so pacing them apart is the way to win it back. Every run refunded every item exactly once.")
	return nil
}

// pacing refunds against the simulator enforcing Stripe's test-mode limits
// (25 requests/s for the account, 25/s per endpoint): one worker and four
// shard workers, each with the default pacing (--share) and with a fixed
// --rate, side by side.
func (b *bench) pacing(r *row) error {
	items := b.sz.PaceItems
	r.what = fmt.Sprintf("`refund` of %s items against the simulator enforcing Stripe's test-mode limits (`--rate-limits test`: 25 requests/s per account, 25/s per endpoint), `--latency 50ms`, `-j 16`", num(items))
	r.target = "default pacing: >= 90% of its share (0.8 x 25 requests/s, 2 requests an item: 10 items/s), 429s <= 2% of requests"
	plan := b.path("pace-plan.jsonl")
	var shards []string
	for k := 1; k <= 4; k++ {
		shards = append(shards, b.path(fmt.Sprintf("pace-shard%d.jsonl", k)))
	}
	defer removeAll(append(shards, plan)...)
	if err := b.gen2(r, plan, "plan", items, "B"); err != nil {
		return err
	}
	if err := b.shardPlan(plan, shards); err != nil {
		return err
	}
	simArgs := b.simArgs(items, "--latency", "50ms", "--rate-limits", "test")
	type setting struct {
		name  string
		plans []string
		flags []string
	}
	settings := []setting{
		{"1 worker, default pacing (--share 0.8)", []string{plan}, []string{"-j", "16"}},
		{"1 worker, fixed --rate 25", []string{plan}, []string{"-j", "16", "--rate", "25"}},
		{"4 shard workers, --share 0.2 each", shards, []string{"-j", "16", "--share", "0.2"}},
		{"4 shard workers, fixed --rate 25 each", shards, []string{"-j", "16", "--rate", "25"}},
	}
	r.commands = append(r.commands,
		b.short("bin/stripe-sim "+strings.Join(simArgs, " ")+" &   # a fresh simulator per run"),
		b.short(fmt.Sprintf("bin/refund --journal J -j 16 [--share S | --rate 25] --api-base $SIM_URL %s   # or 4 at once over plan --shard K/4", plan)))
	rounds := min(2, b.sz.Slow) // each run takes items/10 seconds at the default pace
	b.logf("pacing: %d settings, %d runs each", len(settings), rounds)
	runs := make([][]simRun, len(settings))
	for round := range rounds {
		for k := range settings {
			st := settings[(k+round)%len(settings)]
			run, err := b.refundsOnSim(items, st.plans, simArgs, st.flags)
			if err != nil {
				return fmt.Errorf("%s: %w", st.name, err)
			}
			i := (k + round) % len(settings)
			runs[i] = append(runs[i], run)
		}
	}
	share429 := func(x simRun) float64 {
		return 100 * float64(x.stats.RateLimited) / float64(max(1, apiRequests(x.stats)))
	}
	r.detailf("| setting | refunds/s (median) | runs | requests/s over the run | 429s, share of requests (median) |")
	r.detailf("| --- | ---: | --- | ---: | ---: |")
	for i, st := range settings {
		rs := runs[i]
		r.detailf("| %s | %.1f | %s | %.1f | %.1f%% |", st.name, median(mapRuns(rs, simRun.itemsPerSec)), joinFloats(mapRuns(rs, simRun.itemsPerSec), "%.1f"),
			median(mapRuns(rs, func(x simRun) float64 { return float64(apiRequests(x.stats)) / x.wall.Seconds() })), median(mapRuns(rs, share429)))
	}
	r.detailf("")
	r.detailf("Each item is two requests (the look-up, then the create), so the account's 25 requests/s allow 12.5 refunds/s; the default share leaves 20%% for the account's other traffic. A fixed `--rate 25` per process is what shard workers did before `--share`: four of them ask for four times the account's limit, and only the 429s slow them down. Every run refunded every item exactly once.")
	one, four := runs[0], runs[2]
	rate := min(median(mapRuns(one, simRun.itemsPerSec)), median(mapRuns(four, simRun.itemsPerSec)))
	worst429 := max(median(mapRuns(one, share429)), median(mapRuns(four, share429)))
	r.cand = fmt.Sprintf("default pacing: %.1f refunds/s with 1 worker, %.1f with 4 shard workers; 429s %.1f%% and %.1f%% of requests",
		median(mapRuns(one, simRun.itemsPerSec)), median(mapRuns(four, simRun.itemsPerSec)), median(mapRuns(one, share429)), median(mapRuns(four, share429)))
	r.base = fmt.Sprintf("fixed --rate 25: %.1f refunds/s with 1 worker, %.1f with 4; 429s %.1f%% and %.1f%%",
		median(mapRuns(runs[1], simRun.itemsPerSec)), median(mapRuns(runs[3], simRun.itemsPerSec)), median(mapRuns(runs[1], share429)), median(mapRuns(runs[3], share429)))
	r.ratio = fmt.Sprintf("%.0f%% of the share's 10 refunds/s", 10*rate)
	r.judge(rate >= 9 && worst429 <= 2)
	return nil
}

// shardPlan writes plan's lines round-robin into shards: the same items,
// split among workers.
func (b *bench) shardPlan(plan string, shards []string) error {
	data, err := os.ReadFile(plan)
	if err != nil {
		return err
	}
	outs := make([][]byte, len(shards))
	k := 0
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		outs[k%len(shards)] = append(outs[k%len(shards)], line...)
		k++
	}
	for i, path := range shards {
		if err := os.WriteFile(path, outs[i], 0o600); err != nil {
			return err
		}
	}
	return nil
}

// merge times journal-merge of shard journals against sort -m of the same
// files, which also merges sorted lines but knows nothing of records.
func (b *bench) merge(r *row) error {
	n, k := b.sz.Big, b.sz.Shards
	r.what = fmt.Sprintf("`journal-merge` of %d shard journals, %s records in all", k, num(n))
	r.target = "within 2x of `sort -m`"
	exe, err := b.tool("journal-merge")
	if err != nil {
		return err
	}
	dir, merged, sorted := b.path("shards"), b.path("merged.jsonl"), b.path("sorted.jsonl")
	defer removeAll(dir, merged, sorted)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	shown, err := b.generate("", "shards", strconv.Itoa(n), "B", strconv.Itoa(k), dir)
	r.commands = append(r.commands, strings.TrimSuffix(shown, " > /dev/null"))
	if err != nil {
		return err
	}
	var files []string
	for i := 1; i <= k; i++ {
		files = append(files, filepath.Join(dir, fmt.Sprintf("shard-%d.jsonl", i)))
	}
	cand := cmdSpec{argv: append([]string{exe}, files...), stdout: merged}
	base := cmdSpec{argv: append([]string{"sort", "-m"}, files...), stdout: sorted}
	// Shown with brace expansion: the files are passed in shard order.
	all := strings.Join(files, " ")
	braced := filepath.Join(dir, fmt.Sprintf("shard-{1..%d}.jsonl", k))
	r.commands = append(r.commands, strings.Replace(b.show(cand), b.short(all), b.short(braced), 1),
		"LC_ALL=C "+strings.Replace(b.show(base), b.short(all), b.short(braced), 1))
	lines := func(path string) func(result) error {
		return func(res result) error {
			if res.exit != 0 {
				return fmt.Errorf("exit status %d, want 0", res.exit)
			}
			got, _, err := countLines(path, "")
			if err == nil && got != n {
				err = fmt.Errorf("wrote %d lines, want %d", got, n)
			}
			return err
		}
	}
	if _, err := b.checked(cand, lines(merged))(); err != nil {
		return err
	}
	if _, err := b.checked(base, lines(sorted))(); err != nil {
		return err
	}
	b.logf("merge: %d rounds of journal-merge and sort -m", b.sz.Fast)
	cs, bs, err := alternate(b.sz.Fast, b.checked(cand, lines(merged)), b.checked(base, lines(sorted)))
	if err != nil {
		return err
	}
	ratio := median(pairRatios(seconds(cs), seconds(bs)))
	r.cand = fmt.Sprintf("%.2f s (CPU %.2f s), %.0f MB RSS", median(seconds(cs)), median(cpuSeconds(cs)), slices.Max(rssMB(cs)))
	r.base = fmt.Sprintf("%.2f s (CPU %.2f s), %.0f MB RSS", median(seconds(bs)), median(cpuSeconds(bs)), slices.Max(rssMB(bs)))
	r.ratio = fmt.Sprintf("%.2fx the time of sort -m", ratio)
	r.judge(ratio <= 2)
	identical, err := sameFile(merged, sorted)
	if err != nil {
		return err
	}
	sameLines, err := sameLineSet(merged, sorted)
	if err != nil {
		return err
	}
	switch {
	case identical:
		r.detailf("journal-merge's output is byte for byte the output of `sort -m` here; journal-merge also parses and checks every record on the way.")
	case sameLines:
		r.detailf("Both wrote the same %s lines (an order-independent hash of the lines matches) in another order: journal-merge orders by timestamp, `sort -m` by bytes, and RFC 3339 timestamps drop the trailing zeros of their fraction (`.01Z` sorts after `.011Z`), so `sort -m`'s order is not time order. journal-merge also parses and checks every record.", num(n))
	default:
		r.detailf("journal-merge's output holds other lines than `sort -m`'s (both %s lines): it re-encodes records.", num(n))
	}
	r.detailf("Both write to a file in the temp dir; `journal-merge -o FILE` would add an fsync and a rename.")
	r.details = append(r.details, runsTable("journal-merge", cs, "sort -m", bs, true)...)
	return nil
}

// plan times plan on a big CSV, with wc -l of the same file for scale.
func (b *bench) plan(r *row) error {
	n := b.sz.Big
	r.what = fmt.Sprintf("`plan` of a %s-row CSV", num(n))
	r.target = "report"
	exe, err := b.tool("plan")
	if err != nil {
		return err
	}
	csv, out := b.path("charges.csv"), b.path("plan-out.jsonl")
	defer removeAll(csv, out)
	if err := b.gen2(r, csv, "csv", n); err != nil {
		return err
	}
	cand := cmdSpec{argv: []string{exe, "--batch", "B", csv}}
	base := cmdSpec{argv: []string{"wc", "-l", csv}}
	r.commands = append(r.commands, b.show(cand), b.show(base))
	keep := cand
	keep.stdout = out
	if _, err := b.checked(keep, exitIs(0))(); err != nil {
		return err
	}
	if lines, items, err := countLines(out, `"charge":"ch_`); err != nil || lines != n || items != n {
		return fmt.Errorf("plan wrote %d lines, %d with a charge, want %d (%v)", lines, items, n, err)
	}
	b.logf("plan: %d rounds of plan and wc -l", b.sz.Fast)
	cs, bs, err := alternate(b.sz.Fast, b.checked(cand, exitIs(0)), b.checked(base, exitIs(0)))
	if err != nil {
		return err
	}
	wall := median(seconds(cs))
	r.cand = fmt.Sprintf("%.2f s (%.0f rows/s), %.0f MB RSS", wall, float64(n)/wall, slices.Max(rssMB(cs)))
	r.base = fmt.Sprintf("`wc -l`: %.3f s", median(seconds(bs)))
	r.ratio = fmt.Sprintf("%.0fx the time of wc -l", median(pairRatios(seconds(cs), seconds(bs))))
	r.verdict = reported
	r.detailf("plan validates every row and holds the whole plan (to refuse a charge listed twice) before it writes a line; an untimed run wrote %s plan items.", num(n))
	r.details = append(r.details, runsTable("plan", cs, "wc -l", bs, true)...)
	return nil
}

// gen2 generates an input with gen and records the command in the row.
func (b *bench) gen2(r *row, path, kind string, args ...any) error {
	argv := []string{kind}
	for _, a := range args {
		argv = append(argv, fmt.Sprint(a))
	}
	shown, err := b.generate(path, argv...)
	r.commands = append(r.commands, shown)
	return err
}

// fsyncLatency times rounds of appending one journal-sized line to a file
// in the work dir and fsyncing it: the floor under one durable write.
func (b *bench) fsyncLatency(rounds int) ([]time.Duration, error) {
	path := b.path("fsync-probe.jsonl")
	defer os.Remove(path)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	line := []byte(`{"v":1,"type":"intent","ts":"2026-11-01T00:00:00.001Z","batch":"B","item":"it1","charge":"ch_sim0000001","attempt":1,"key":"refundkit:B:it1:1"}` + "\n")
	var ds []time.Duration
	for range rounds {
		start := time.Now()
		if _, err := f.Write(line); err != nil {
			return nil, err
		}
		if err := f.Sync(); err != nil {
			return nil, err
		}
		ds = append(ds, time.Since(start))
	}
	return ds, nil
}

// runsTable lists every run of both sides, in the order they ran in
// pairs, with each pair's ratio: the baseline's time over refundkit's
// (speed-up), or with slowdown refundkit's over the baseline's.
func runsTable(candName string, cs []result, baseName string, bs []result, slowdown bool) []string {
	out := []string{"", "| round | " + candName + " | " + baseName + " | ratio |", "| ---: | ---: | ---: | ---: |"}
	cell := func(r result) string {
		return fmt.Sprintf("%.3f s (CPU %.2f s), %.0f MB", r.wall.Seconds(), r.cpu.Seconds(), float64(r.rss)/1e6)
	}
	for i := range min(len(cs), len(bs)) {
		ratio := bs[i].wall.Seconds() / cs[i].wall.Seconds()
		if slowdown {
			ratio = 1 / ratio
		}
		out = append(out, fmt.Sprintf("| %d | %s | %s | %.2f |", i+1, cell(cs[i]), cell(bs[i]), ratio))
	}
	what := "baseline time / refundkit time"
	if slowdown {
		what = "refundkit time / baseline time"
	}
	return append(out, "", "Ratio: "+what+" (wall). In odd rounds refundkit ran first, in even rounds the baseline. CPU is user + system time (above the wall time when it runs on both cores); MB is the peak resident set (GNU time's %M).")
}

func mapRuns[T any](xs []T, f func(T) float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

func recordsPerFsync(r simRun) float64 { return float64(r.sum.Records) / float64(max(1, r.sum.Fsyncs)) }
func itemsPerFsync(r simRun) float64   { return float64(r.sum.Items) / float64(max(1, r.sum.Fsyncs)) }
func wallSeconds(r simRun) float64     { return r.wall.Seconds() }
func rssOf(r simRun) float64           { return float64(r.rss) / 1e6 }

// medianIndex is the index of a middle value of xs (the lower middle for
// an even count).
func medianIndex(xs []float64) int {
	idx := make([]int, len(xs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case xs[a] < xs[b]:
			return -1
		case xs[a] > xs[b]:
			return 1
		}
		return 0
	})
	return idx[(len(idx)-1)/2]
}

func joinFloats(xs []float64, format string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf(format, x)
	}
	return strings.Join(parts, ", ")
}

// num writes n with thousands separators: 1,000,000.
func num(n int) string {
	s := strconv.Itoa(n)
	if n < 0 {
		return "-" + num(-n)
	}
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

func shellQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " '\"\\|*?$&;()<>`!#~{}[]") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// sameFile tells whether two files hold the same bytes.
func sameFile(a, b string) (bool, error) {
	fa, err := os.Open(a)
	if err != nil {
		return false, err
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return false, err
	}
	defer fb.Close()
	ra, rb := bufio.NewReaderSize(fa, 1<<20), bufio.NewReaderSize(fb, 1<<20)
	bufA, bufB := make([]byte, 1<<16), make([]byte, 1<<16)
	for {
		na, errA := io.ReadFull(ra, bufA)
		nb, errB := io.ReadFull(rb, bufB)
		if na != nb || !bytes.Equal(bufA[:na], bufB[:nb]) {
			return false, nil
		}
		endA := errors.Is(errA, io.EOF) || errors.Is(errA, io.ErrUnexpectedEOF)
		endB := errors.Is(errB, io.EOF) || errors.Is(errB, io.ErrUnexpectedEOF)
		if errA != nil && !endA {
			return false, errA
		}
		if errB != nil && !endB {
			return false, errB
		}
		if endA || endB {
			return endA && endB, nil
		}
	}
}

// sameLineSet tells whether two files hold the same lines, whatever their
// order, by comparing an order-independent hash: the sum of the lines'
// FNV-1a hashes.
func sameLineSet(a, b string) (bool, error) {
	ha, err := lineSetHash(a)
	if err != nil {
		return false, err
	}
	hb, err := lineSetHash(b)
	return err == nil && ha == hb, err
}

func lineSetHash(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var sum uint64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		h := fnv.New64a()
		h.Write(sc.Bytes())
		sum += h.Sum64()
	}
	return sum, sc.Err()
}

func removeAll(paths ...string) {
	for _, p := range paths {
		os.RemoveAll(p)
	}
}
