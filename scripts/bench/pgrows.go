package main

// The PostgreSQL checkpoint's rows: throughput of N refund processes
// sharing one database, beside the file journal's ways to use the same
// concurrency (one process, or N shards with a journal each), and what a
// claim and a fenced write cost against the real server.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/postgres"
	"github.com/refundkit/refundkit/refund/postgres/pgtest"
)

// pgJobs is each process's -j in the PostgreSQL rows: refund's default,
// as a worker is run in production.
const pgJobs = 8

// startPG starts a throwaway PostgreSQL server with fsync on (durable
// commits, as in production) for one row; the caller stops it.
func (b *bench) startPG() (*pgtest.Server, error) {
	srv, err := pgtest.Start(pgtest.Options{Fsync: true})
	if err != nil {
		return nil, fmt.Errorf("start PostgreSQL (pgtest, fsync on): %w", err)
	}
	return srv, nil
}

// freshDB creates an empty database for one run and returns its URL and a
// function that drops it.
func (b *bench) freshDB(srv *pgtest.Server) (string, func(), error) {
	name := fmt.Sprintf("bench_%d", b.runs.Add(1))
	url, err := srv.CreateDB(b.ctx, name)
	if err != nil {
		return "", nil, err
	}
	return url, func() { srv.DropDB(context.Background(), name) }, nil
}

// pgWorkers measures items/s with 1, 2, 4 and 8 refund processes on one
// PostgreSQL checkpoint (-j 8 each), beside the file journal with the same
// concurrency in one process (-j 8N) and in N shard processes (plan
// --shard K/N, a journal each), against the simulator at zero latency and
// at 100 ms.
func (b *bench) pgWorkers(r *row) error {
	fast, slow := b.sz.PGItems, b.sz.PGSlowItems
	r.what = fmt.Sprintf("N `refund` processes sharing one PostgreSQL checkpoint (`--journal postgres://...`, -j %d each; fsync on) against one file journal (one process, -j %d×N) and N file-journal shards (`plan --shard K/N`, -j %d each): %s items at zero latency, %s at `--latency 100ms`, `--rate 0`", pgJobs, pgJobs, pgJobs, num(fast), num(slow))
	r.target = "measured, no target"
	srv, err := b.startPG()
	if err != nil {
		return err
	}
	defer srv.Stop()

	type setting struct {
		name    string
		items   int
		plan    string
		shards  map[int][]string // plan --shard K/N, by N
		simArgs []string
	}
	var settings []*setting
	for _, s := range []struct {
		name  string
		items int
		extra []string
	}{{"zero latency", fast, nil}, {"100 ms latency", slow, []string{"--latency", "100ms"}}} {
		st := &setting{name: s.name, items: s.items, shards: map[int][]string{}, simArgs: b.simArgs(s.items, s.extra...)}
		tag := strings.Fields(s.name)[0]
		if st.plan, err = b.pgPlan(r, tag, s.items, st.shards); err != nil {
			return err
		}
		settings = append(settings, st)
	}
	defer func() {
		for _, st := range settings {
			removeAll(st.plan, b.path("pg-ids-"+strings.Fields(st.name)[0]+".txt"))
			for _, ps := range st.shards {
				removeAll(ps...)
			}
		}
	}()
	r.commands = append(r.commands,
		b.short("bin/stripe-sim --addr 127.0.0.1:0 --charges N [--latency 100ms] &   # a fresh simulator per run"),
		b.short(fmt.Sprintf("bin/refund --journal postgres://.../bench_K -j %d --rate 0 --api-base $SIM_URL PLAN > /dev/null   # N at once, a fresh database per run (pgtest, fsync on)", pgJobs)),
		b.short(fmt.Sprintf("bin/refund --journal $WORK/sim-journal.jsonl -j %d×N --rate 0 --api-base $SIM_URL PLAN > /dev/null", pgJobs)),
		b.short(fmt.Sprintf("bin/refund --journal $WORK/sim-journal-K.jsonl -j %d --rate 0 --api-base $SIM_URL SHARD_K_OF_N > /dev/null   # N at once", pgJobs)))

	type side struct {
		name string
		run  func(st *setting, n int) (simRun, error)
	}
	sides := []side{
		{"PostgreSQL, N processes", func(st *setting, n int) (simRun, error) { return b.pgOnSim(srv, st.items, st.plan, n, st.simArgs) }},
		{"file journal, 1 process -j 8×N", func(st *setting, n int) (simRun, error) {
			return b.refundOnSim(st.items, st.plan, st.simArgs, []string{"-j", strconv.Itoa(pgJobs * n), "--rate", "0"}, false)
		}},
		{"file journals, N shard processes", func(st *setting, n int) (simRun, error) {
			return b.refundsOnSim(st.items, st.shards[n], st.simArgs, []string{"-j", strconv.Itoa(pgJobs), "--rate", "0"})
		}},
	}
	r.detailf("%d rounds; in each, every side runs once per setting, the order rotated each round; a fresh simulator (and database, or journals) per run. items/s is the items over the wall time of the slowest process, start-up and plan load included.", b.sz.Slow)
	r.detailf("")
	r.detailf("| latency | N | PostgreSQL, N processes: items/s (median; runs) | file journal, 1 process -j 8×N | file journals, N shards | PostgreSQL / file 1 process | PostgreSQL / N shards | PostgreSQL commits per item |")
	r.detailf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	// medians[setting][side] are the median items/s by N, for the summary.
	medians := make([][][]string, len(settings))
	for si, st := range settings {
		medians[si] = make([][]string, len(sides))
		for _, n := range pgWorkerCounts {
			b.logf("pg-workers: %s, %d processes, %d rounds", st.name, n, b.sz.Slow)
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
			}
			cell := func(i int) string {
				return fmt.Sprintf("%.0f (%s)", median(rates[i]), joinFloats(rates[i], "%.0f"))
			}
			r.detailf("| %s | %d | %s | %s | %s | %.2fx | %.2fx | %.1f |", st.name, n, cell(0), cell(1), cell(2),
				median(pairRatios(rates[0], rates[1])), median(pairRatios(rates[0], rates[2])), median(mapRuns(runs[0], commitsPerItem)))
			for i := range sides {
				medians[si][i] = append(medians[si][i], fmt.Sprintf("%.0f", median(rates[i])))
			}
		}
	}
	r.detailf("")
	r.detailf("Every run refunded every item exactly once (the processes' summaries and the simulator's `refunds_created`; with PostgreSQL, every item refunded in the items table). A PostgreSQL worker writes each record in its own commit (fenced by its claim's generation); commits per item counts the records written over the items. A PostgreSQL worker that finds nothing left to claim while others still hold claims looks again after up to a quarter second (in case one of them dies), so a run's end can lag its last refund by that much. Each item also takes and gives up its payment's lock (one statement each), so that two items of one payment are never worked on at once by two workers.")
	byN := func(si, side int) string { return strings.Join(medians[si][side], " / ") }
	var ns []string
	for _, n := range pgWorkerCounts {
		ns = append(ns, strconv.Itoa(n))
	}
	counts := strings.Join(ns, " / ")
	r.cand = fmt.Sprintf("PostgreSQL, %s processes: %s items/s at zero latency, %s at 100 ms", counts, byN(0, 0), byN(1, 0))
	r.base = fmt.Sprintf("file journal, 1 process -j 8×N: %s and %s; N shards: %s and %s", byN(0, 1), byN(1, 1), byN(0, 2), byN(1, 2))
	r.ratio = "see the table"
	r.verdict = reported
	return nil
}

// pgWorkerCounts are the process counts of the pg-workers row.
var pgWorkerCounts = []int{1, 2, 4, 8}

// commitsPerItem is the records a run wrote over its items: a PostgreSQL
// worker commits each append on its own.
func commitsPerItem(r simRun) float64 { return float64(r.sum.Records) / float64(max(1, r.sum.Items)) }

// pgPlan writes the plan of items charges the simulator generates (plan
// over their ids) and its shards for every N of pgWorkerCounts.
func (b *bench) pgPlan(r *row, tag string, items int, shards map[int][]string) (string, error) {
	gen := b.path("pg-gen-" + tag + ".jsonl")
	defer removeAll(gen)
	if err := b.gen2(r, gen, "plan", items, "B"); err != nil {
		return "", err
	}
	ids := b.path("pg-ids-" + tag + ".txt")
	if err := chargeIDs(gen, ids); err != nil {
		return "", err
	}
	plan := b.path("pg-plan-" + tag + ".jsonl")
	if err := b.planInto(r, plan, ids); err != nil {
		return "", err
	}
	for _, n := range pgWorkerCounts {
		for k := 1; k <= n; k++ {
			p := b.path(fmt.Sprintf("pg-plan-%s-%dof%d.jsonl", tag, k, n))
			if err := b.planInto(r, p, ids, "--shard", fmt.Sprintf("%d/%d", k, n)); err != nil {
				return "", err
			}
			shards[n] = append(shards[n], p)
		}
	}
	return plan, nil
}

// chargeIDs writes the charge ids of a plan, one a line: a charge list
// bin/plan reads.
func chargeIDs(plan, out string) error {
	f, err := os.Open(plan)
	if err != nil {
		return err
	}
	defer f.Close()
	var ids strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var it struct{ Charge string }
		if err := json.Unmarshal(sc.Bytes(), &it); err != nil {
			return err
		}
		ids.WriteString(it.Charge + "\n")
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return os.WriteFile(out, []byte(ids.String()), 0o600)
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

// pgOnSim starts a simulator and a fresh database, runs n refund processes
// on the database at once over the same plan, checks every item was
// refunded exactly once (the summaries, the simulator, the items table),
// and drops both. The run's wall time is the slowest process's; its summary
// sums theirs.
func (b *bench) pgOnSim(srv *pgtest.Server, items int, plan string, n int, simArgs []string) (simRun, error) {
	var run simRun
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
	results := make([]result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for k := range n {
		c := cmdSpec{argv: []string{exe, "--journal", url, "--worker", fmt.Sprintf("w%d", k+1), "-j", strconv.Itoa(pgJobs), "--rate", "0", "--api-base", s.url, plan}}
		wg.Go(func() { results[k], errs[k] = b.run(c) })
	}
	wg.Wait()
	for k, res := range results {
		if errs[k] != nil {
			return run, errs[k]
		}
		if res.exit != 0 {
			return run, fmt.Errorf("refund w%d: exit status %d%s", k+1, res.exit, quoteStderr(res.stderr))
		}
		sum, err := parseSummary(res.stderr)
		if err != nil {
			return run, err
		}
		run.wall = max(run.wall, res.wall)
		run.cpu += res.cpu
		run.rss = max(run.rss, res.rss)
		run.sum.Items += sum.Items
		run.sum.Refunded += sum.Refunded
		run.sum.Creates += sum.Creates
		run.sum.Lists += sum.Lists
		run.sum.Records += sum.Records
		run.sum.Fsyncs += sum.Fsyncs
	}
	if run.stats, err = s.stats(); err != nil {
		return run, err
	}
	if run.sum.Refunded != int64(items) || run.stats.RefundsCreated != int64(items) {
		return run, fmt.Errorf("the %d workers say %d refunded and the simulator created %d refunds, want %d of each", n, run.sum.Refunded, run.stats.RefundsCreated, items)
	}
	conn, err := pgx.Connect(b.ctx, url)
	if err != nil {
		return run, err
	}
	defer conn.Close(context.Background())
	var refunded int
	if err := conn.QueryRow(b.ctx, `SELECT count(*) FROM refundkit.items WHERE status = 'refunded'`).Scan(&refunded); err != nil {
		return run, err
	}
	if refunded != items {
		return run, fmt.Errorf("the items table says %d refunded, want %d", refunded, items)
	}
	return run, nil
}

// pgClaimCost times the checkpoint's round trips against the real server
// (refund/postgres, fsync on): a claim of one item and its release, and
// one fenced append of one record, each a commit. Every figure is the
// median of many rounds.
func (b *bench) pgClaimCost(r *row) error {
	rounds := b.sz.PGRounds
	r.what = fmt.Sprintf("the PostgreSQL checkpoint's round trips (refund/postgres against a local server over its unix socket, fsync on): Claim of 1 item + Release, and one fenced Append of 1 record; %d rounds each", rounds)
	r.target = "measured, no target"
	srv, err := b.startPG()
	if err != nil {
		return err
	}
	defer srv.Stop()
	url, drop, err := b.freshDB(srv)
	if err != nil {
		return err
	}
	defer drop()
	r.commands = append(r.commands, "go run ./scripts/bench -only pg-claim   # in-process: postgres.Open, Load, then Claim(1)+Release and Append(1 record), timed one by one")
	cp, err := postgres.Open(b.ctx, url, postgres.Options{Lease: 30 * time.Second, Worker: "bench"}, false)
	if err != nil {
		return err
	}
	defer cp.Close()
	items := rounds + 1 // each claimed item is released for good; one more to append to
	plan := make([]refund.PlanLine, items)
	for i := range plan {
		plan[i] = refund.PlanLine{Item: &refund.Item{Batch: "B", Item: fmt.Sprintf("it%d", i+1), Charge: fmt.Sprintf("ch_sim%07d", i+1)}, Line: i + 1}
	}
	start := time.Now()
	if err := cp.Load(b.ctx, plan); err != nil {
		return err
	}
	load := time.Since(start)

	b.logf("pg-claim: %d rounds of Claim+Release", rounds)
	var claimRelease, claimOnly []time.Duration
	for range rounds - 1 {
		start := time.Now()
		got, _, err := cp.Claim(b.ctx, 1, false)
		if err != nil {
			return err
		}
		mid := time.Since(start)
		if len(got) != 1 {
			return fmt.Errorf("claim: got %d items, want 1", len(got))
		}
		if err := cp.Release(b.ctx, got[0].Batch, got[0].Item); err != nil {
			return err
		}
		claimRelease = append(claimRelease, time.Since(start))
		claimOnly = append(claimOnly, mid)
	}
	got, _, err := cp.Claim(b.ctx, 1, false)
	if err != nil {
		return err
	}
	if len(got) != 1 {
		return errors.New("claim: no item left to append to")
	}
	b.logf("pg-claim: %d rounds of Append", rounds)
	var appends []time.Duration
	for i := range rounds {
		rec := &journal.Record{V: 1, Type: journal.TypeIntent, Time: time.Now().UTC(), Batch: got[0].Batch, Item: got[0].Item,
			Charge: fmt.Sprintf("ch_sim%07d", items), Attempt: 1, Key: refund.IdempotencyKey(got[0].Batch, got[0].Item, 1)}
		start := time.Now()
		if err := cp.Append(rec); err != nil {
			return fmt.Errorf("append %d: %w", i+1, err)
		}
		appends = append(appends, time.Since(start))
	}
	ms := durations // milliseconds
	cr, ap := ms(claimRelease), ms(appends)
	fsync, err := b.fsyncLatency(b.sz.Fsyncs)
	if err != nil {
		return err
	}
	fs := ms(fsync)
	r.cand = fmt.Sprintf("Claim+Release %.2f ms, fenced Append %.2f ms (medians)", median(cr), median(ap))
	r.base = fmt.Sprintf("one write+fsync of a journal line in the work dir: %.3f ms", median(fs))
	r.ratio = fmt.Sprintf("%.1fx and %.1fx a file fsync", median(cr)/max(median(fs), 1e-9), median(ap)/max(median(fs), 1e-9))
	r.verdict = reported
	r.detailf("| operation | median | p90 | min | rounds |")
	r.detailf("| --- | ---: | ---: | ---: | ---: |")
	for _, op := range []struct {
		name string
		ms   []float64
	}{{"Claim(1), the claim alone", ms(claimOnly)}, {"Claim(1) + Release", ms(claimRelease)}, {"Append(1 record), fenced", ms(appends)}} {
		r.detailf("| %s | %.3f ms | %.3f ms | %.3f ms | %d |", op.name, median(op.ms), percentile(op.ms, 90), slices.Min(op.ms), len(op.ms))
	}
	r.detailf("")
	r.detailf("Load of the %d-item plan took %.1f ms. Each item a worker refunds costs a share of a Claim (it claims as many items as it has free slots), two fenced Appends (intent, outcome; the outcome that settles the item ends its claim, so no Release follows) and its payment's lock taken and given up (one statement each, not timed here): about %.1f ms of database round trips at these medians before the lock's, spread over the worker's -j slots.",
		items, float64(load.Microseconds())/1000, median(ms(claimOnly))+2*median(ms(appends)))
	return nil
}
