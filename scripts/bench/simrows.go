package main

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

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
