package main

// The shared budget's row (issue 22): N refund workers on one PostgreSQL
// checkpoint with no --share and no --rate split the account's 0.8 among
// themselves, beside today's 0.8 each (an explicit --rate 20 per worker:
// the same limits, no budget), against the simulator enforcing Stripe's
// test-mode limits at 50 ms; and a worker killed mid-batch, the rate over
// time showing the others take up its part within a lease.

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/refundkit/refundkit/refund/checkpoint/postgres/pgtest"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
)

// budgetCounts are the worker counts of the budget row.
var budgetCounts = []int{1, 2, 4, 8}

// The account's limit in test mode, the default share, and what an item
// costs: a look-up (GET /v1/refunds) and a create (POST /v1/refunds).
const (
	budgetAccountRate = 25.0
	budgetShare       = 0.8
	budgetPerItem     = 2.0
	// budgetAllowed is the refunds/s the share allows the whole batch.
	budgetAllowed = budgetShare * budgetAccountRate / budgetPerItem
	// budgetOldRate is today's --share 0.8 of the account per worker, as
	// an explicit --rate: the same pacer, no budget.
	budgetOldRate = "20"
)

// budgetRun is one batch: its workers' wall time (first start to last
// exit), the simulator's counters, and samples over time.
type budgetRun struct {
	wall    time.Duration
	items   int64
	stats   stripesim.Stats
	samples []budgetSample
	killAt  time.Duration // since the start; 0: none killed
	tookUp  time.Duration // since the kill, until every survivor took 1/(N-1); 0: never
}

// budgetSample is the simulator's counters at t since the batch started,
// and the part each live worker records in the checkpoint.
type budgetSample struct {
	t                 time.Duration
	requests, refunds int64
	limited           int64
	minPart, maxPart  float64
}

func (r budgetRun) refundsPerSec() float64 { return float64(r.items) / r.wall.Seconds() }
func (r budgetRun) share429() float64 {
	return 100 * float64(r.stats.RateLimited) / float64(max(1, apiRequests(r.stats)))
}

// budget is the row.
func (b *bench) budget(r *row) error {
	items := b.sz.PaceItems
	r.what = fmt.Sprintf("N `refund` workers (-j %d each) on one PostgreSQL checkpoint, no `--share` and no `--rate`, against the simulator enforcing Stripe's test-mode limits (`--rate-limits test`: 25 requests/s for the account, 25/s per endpoint), `--latency 50ms`, %s items; beside today's 0.8 of the account per worker (`--rate %s` each: the same limits, no shared budget); and one of 4 workers killed mid-batch", sharedJobs, num(items), budgetOldRate)
	r.target = fmt.Sprintf("every N: refunds/s >= 90%% of the share's %.0f (0.8 x 25 requests/s over 2 requests an item), 429s <= 1%% of requests; killed worker's part taken up within a lease", budgetAllowed)
	srv, err := b.startPG()
	if err != nil {
		return err
	}
	defer srv.Stop()
	plan := b.path("budget-plan.jsonl")
	defer removeAll(plan)
	if err := b.gen2(r, plan, "plan", items, "B"); err != nil {
		return err
	}
	simArgs := b.simArgs(items, "--latency", "50ms", "--rate-limits", "test")
	r.commands = append(r.commands,
		b.short("bin/stripe-sim "+strings.Join(simArgs, " ")+" &   # a fresh simulator per run"),
		b.short(fmt.Sprintf("bin/refund --journal postgres://.../bench_K --worker wK -j %d --api-base $SIM_URL %s > /dev/null   # N at once, a fresh database per run (pgtest, fsync on); today's: add --rate %s", sharedJobs, plan, budgetOldRate)))
	rounds := min(2, b.sz.Slow) // each run takes items/10 seconds
	type side struct {
		name  string
		flags []string
	}
	sides := []side{{"shared budget (no flags)", nil}, {"today's: 0.8 each (--rate " + budgetOldRate + ")", []string{"--rate", budgetOldRate}}}
	runs := map[int][][]budgetRun{}
	for _, n := range budgetCounts {
		runs[n] = make([][]budgetRun, len(sides))
		b.logf("budget: %d workers, %d rounds", n, rounds)
		for round := range rounds {
			for k := range sides {
				i := (k + round) % len(sides)
				run, err := b.budgetBatch(srv, items, plan, n, simArgs, sides[i].flags, 0, 0)
				if err != nil {
					return fmt.Errorf("%d workers, %s: %w", n, sides[i].name, err)
				}
				runs[n][i] = append(runs[n][i], run)
			}
		}
	}
	r.detailf("%d rounds; in each, both sides run once per N, the order rotated each round; a fresh simulator and database per run. refunds/s is the items over the wall time from the first worker's start to the last one's exit (start-up, plan load and the end's wait for the others included). The share allows %.1f refunds/s: 0.8 × 25 requests/s = 20 requests/s for the batch, and an item is a look-up and a create.", rounds, budgetAllowed)
	r.detailf("")
	r.detailf("| N | shared budget: refunds/s (median; runs) | %% of the share's %.0f | 429s, share of requests | today's 0.8 each: refunds/s | 429s |", budgetAllowed)
	r.detailf("| ---: | ---: | ---: | ---: | ---: | ---: |")
	ok := true
	var cand, base []string
	for _, n := range budgetCounts {
		s, o := runs[n][0], runs[n][1]
		rate, lim := median(mapRuns(s, budgetRun.refundsPerSec)), median(mapRuns(s, budgetRun.share429))
		worst429 := slices.Max(mapRuns(s, budgetRun.share429))
		worstRate := slices.Min(mapRuns(s, budgetRun.refundsPerSec))
		ok = ok && worstRate >= 0.9*budgetAllowed && worst429 <= 1
		r.detailf("| %d | %.2f (%s) | %.0f%% | %.2f%% (%s) | %.2f (%s) | %.1f%% (%s) |", n, rate, joinFloats(mapRuns(s, budgetRun.refundsPerSec), "%.2f"), 100*rate/budgetAllowed,
			lim, joinFloats(mapRuns(s, budgetRun.share429), "%.2f"),
			median(mapRuns(o, budgetRun.refundsPerSec)), joinFloats(mapRuns(o, budgetRun.refundsPerSec), "%.2f"),
			median(mapRuns(o, budgetRun.share429)), joinFloats(mapRuns(o, budgetRun.share429), "%.1f"))
		cand = append(cand, fmt.Sprintf("%.1f", rate))
		base = append(base, fmt.Sprintf("%.1f (%.0f%% 429s)", median(mapRuns(o, budgetRun.refundsPerSec)), median(mapRuns(o, budgetRun.share429))))
	}
	r.detailf("")
	r.detailf("Every run refunded every item exactly once (the workers' summaries, the simulator's `refunds_created`, the items table).")

	// One of four workers killed with SIGKILL once a quarter of the
	// batch is refunded, under a 10 s lease.
	killItems := 3 * items / 2
	killPlan := b.path("budget-kill-plan.jsonl")
	defer removeAll(killPlan)
	if err := b.gen2(r, killPlan, "plan", killItems, "B"); err != nil {
		return err
	}
	const killN, lease = 4, 10 * time.Second
	r.commands = append(r.commands, b.short(fmt.Sprintf("bin/refund --journal postgres://.../bench_K --worker wK -j %d --lease %s --api-base $SIM_URL %s > /dev/null   # 4 at once; kill -9 w1 once the simulator made %d refunds", sharedJobs, lease, killPlan, killItems/4)))
	b.logf("budget: %d workers, one killed", killN)
	kill, err := b.budgetBatch(srv, killItems, killPlan, killN, b.simArgs(killItems, "--latency", "50ms", "--rate-limits", "test"), []string{"--lease", lease.String()}, int64(killItems/4), lease)
	if err != nil {
		return fmt.Errorf("%d workers, one killed: %w", killN, err)
	}
	took := kill.tookUp > 0 && kill.tookUp <= lease
	r.detailf("")
	r.detailf("**A worker killed.** %d workers, `--lease %s`, %s items; the simulator's counters sampled every 500 ms; the worker w1 killed with SIGKILL at %.1f s, once %s refunds were made. The survivors' parts (workers.budget_share) went from 0.8/%d to 0.8/%d %.1f s after the kill (the lease is %s: its last_seen counts as stale after two thirds of it, and each worker counts every sixth). The whole batch: %.2f refunds/s, %.2f%% of requests answered 429.",
		killN, lease, num(killItems), kill.killAt.Seconds(), num(killItems/4), killN, killN-1, kill.tookUp.Seconds(), lease, kill.refundsPerSec(), kill.share429())
	r.detailf("")
	r.detailf("| t (s) | requests/s | refunds/s | 429s | live workers' part |")
	r.detailf("| ---: | ---: | ---: | ---: | --- |")
	const every = 2 // samples per table line: one line a second
	for i := every; i < len(kill.samples); i += every {
		a, z := kill.samples[i-every], kill.samples[i]
		dt := (z.t - a.t).Seconds()
		mark := ""
		if kill.killAt > a.t && kill.killAt <= z.t {
			mark = " ← w1 killed"
		}
		if kill.tookUp > 0 && kill.killAt+kill.tookUp > a.t && kill.killAt+kill.tookUp <= z.t {
			mark += " ← survivors take 1/3 each"
		}
		r.detailf("| %.0f | %.1f | %.1f | %d | %s%s |", z.t.Seconds(), float64(z.requests-a.requests)/dt, float64(z.refunds-a.refunds)/dt, z.limited-a.limited, partText(z), mark)
	}
	r.cand = "shared budget, " + strings.Join(strings.Fields(fmt.Sprint(budgetCounts)), " / ") + " workers: " + strings.Join(cand, " / ") + " refunds/s"
	r.base = "today's 0.8 each: " + strings.Join(base, " / ")
	r.ratio = fmt.Sprintf("of the share's %.0f refunds/s; a killed worker's part taken up %.1f s after (lease %s)", budgetAllowed, kill.tookUp.Seconds(), lease)
	r.judge(ok && took)
	return nil
}

func partText(s budgetSample) string {
	if s.minPart == 0 {
		return "-"
	}
	if s.minPart == s.maxPart {
		return fmt.Sprintf("%.3f", s.minPart)
	}
	return fmt.Sprintf("%.3f to %.3f", s.minPart, s.maxPart)
}

// budgetBatch starts a simulator and a fresh database, runs n workers on
// it at once over the plan with flags, and checks every item was refunded
// exactly once. With killAfter > 0, it samples the simulator and the
// workers table every 500 ms, kills worker w1 with SIGKILL once the
// simulator made killAfter refunds, and times how long the others take to
// record their larger part (for at most 3 leases); the killed worker's
// items are refunded by the others.
func (b *bench) budgetBatch(srv *pgtest.Server, items int, plan string, n int, simArgs, flags []string, killAfter int64, lease time.Duration) (budgetRun, error) {
	var run budgetRun
	exe, err := b.tool("refund")
	if err != nil {
		return run, err
	}
	url, drop, err := b.freshDB(srv)
	if err != nil {
		return run, err
	}
	defer drop()
	s, err := b.startSim(simArgs)
	if err != nil {
		return run, err
	}
	defer s.stop()
	type worker struct {
		cmd    *exec.Cmd
		stderr bytes.Buffer
		err    error
	}
	ws := make([]*worker, n)
	var wg sync.WaitGroup
	start := time.Now()
	for k := range n {
		w := &worker{cmd: exec.CommandContext(b.ctx, exe, append([]string{"--journal", url, "--worker", fmt.Sprintf("w%d", k+1), "-j", strconv.Itoa(sharedJobs), "--api-base", s.url, plan}, flags...)...)}
		w.cmd.Env = b.env
		w.cmd.Stderr = &w.stderr
		if err := w.cmd.Start(); err != nil {
			return run, err
		}
		ws[k] = w
		wg.Go(func() { w.err = w.cmd.Wait() })
	}
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()
	if killAfter > 0 {
		conn, err := pgx.Connect(b.ctx, url)
		if err != nil {
			return run, err
		}
		defer conn.Close(context.Background())
		var killed time.Time
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
	sampling:
		for {
			select {
			case <-allDone:
				break sampling
			case <-b.ctx.Done():
				return run, b.ctx.Err()
			case <-tick.C:
			}
			st, err := s.stats()
			if err != nil {
				return run, err
			}
			smp := budgetSample{t: time.Since(start), requests: apiRequests(st), refunds: st.RefundsCreated, limited: st.RateLimited}
			conn.QueryRow(b.ctx, `SELECT coalesce(min(budget_share), 0), coalesce(max(budget_share), 0) FROM refundkit.workers
				WHERE stopped_at IS NULL AND worker <> 'w1' AND budget_share > 0`).Scan(&smp.minPart, &smp.maxPart)
			run.samples = append(run.samples, smp)
			switch {
			case killed.IsZero() && st.RefundsCreated >= killAfter:
				ws[0].cmd.Process.Signal(syscall.SIGKILL)
				killed = time.Now()
				run.killAt = killed.Sub(start)
			case !killed.IsZero() && run.tookUp == 0 && smp.minPart >= budgetShare/float64(n-1)-1e-9:
				run.tookUp = time.Since(killed)
			}
		}
	}
	<-allDone
	run.wall = time.Since(start)
	for k, w := range ws {
		if k == 0 && killAfter > 0 {
			continue
		}
		if w.err != nil {
			return run, fmt.Errorf("refund w%d: %v%s", k+1, w.err, quoteStderr(w.stderr.String()))
		}
		if _, err := parseSummary(w.stderr.String()); err != nil {
			return run, fmt.Errorf("refund w%d: %w", k+1, err)
		}
	}
	if run.stats, err = s.stats(); err != nil {
		return run, err
	}
	conn, err := pgx.Connect(b.ctx, url)
	if err != nil {
		return run, err
	}
	defer conn.Close(context.Background())
	var refunded int64
	if err := conn.QueryRow(b.ctx, `SELECT count(*) FROM refundkit.items WHERE status = 'refunded'`).Scan(&refunded); err != nil {
		return run, err
	}
	if refunded != int64(items) || run.stats.RefundsCreated != int64(items) {
		return run, fmt.Errorf("the items table says %d refunded and the simulator created %d refunds, want %d of each", refunded, run.stats.RefundsCreated, items)
	}
	run.items = refunded // the killed worker's summary is lost with it
	return run, nil
}
