package main

// The PostgreSQL checkpoint's rows: throughput of N refund processes
// sharing one database, beside the file journal's ways to use the same
// concurrency (one process, or N shards with a journal each), and what a
// claim and a fenced write cost against the real server.

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/checkpoint/postgres"
	"github.com/refundkit/refundkit/refund/checkpoint/postgres/pgtest"
)

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
	head := fmt.Sprintf("N `refund` processes sharing one PostgreSQL checkpoint (`--journal postgres://...`, -j %d each; fsync on) against ", sharedJobs)
	if err := b.sharedWorkers(r, "pg", head, nil, []perItem{{"PostgreSQL commits per item", recordsPerItem}}); err != nil {
		return err
	}
	r.detailf("Every run refunded every item exactly once (the processes' summaries and the simulator's `refunds_created`; with PostgreSQL, every item refunded in the items table). %s", pgNote)
	return nil
}

// sharedWorkers runs a workers row: the sides first, then N processes on
// one PostgreSQL checkpoint (a server the row starts), then the file
// journal's; head is the row's what up to the file journal's sides.
func (b *bench) sharedWorkers(r *row, tag, head string, first []workerSide, cols []perItem) error {
	r.what = head + fmt.Sprintf("one file journal (one process, -j %d×N) and N file-journal shards (`plan --shard K/N`, -j %d each): %s items at zero latency, %s at `--latency 100ms`, `--rate 0`", sharedJobs, sharedJobs, num(b.sz.SharedItems), num(b.sz.SharedSlowItems))
	r.target = "measured, no target"
	pg, err := b.startPG()
	if err != nil {
		return err
	}
	defer pg.Stop()
	return b.workersRow(r, tag, append(append(first, b.pgSide(pg)), b.fileSides()...), cols)
}

// pgNote says what a PostgreSQL worker's item costs.
const pgNote = "A PostgreSQL worker writes each record in its own commit (fenced by its claim's generation); commits per item counts the records written over the items. A PostgreSQL worker that finds nothing left to claim while others still hold claims looks again after up to a quarter second (in case one of them dies), so a run's end can lag its last refund by that much. Each item also takes and gives up its payment's lock (one statement each), so that two items of one payment are never worked on at once by two workers."

// pgSide is N refund processes on one PostgreSQL checkpoint of srv, a
// fresh database per run.
func (b *bench) pgSide(srv *pgtest.Server) workerSide {
	return workerSide{"PostgreSQL, N processes", "PostgreSQL",
		[]string{b.short(fmt.Sprintf("bin/refund --journal postgres://.../bench_K --worker wK -j %d --rate 0 --api-base $SIM_URL PLAN > /dev/null   # N at once, a fresh database per run (pgtest, fsync on)", sharedJobs))},
		func(st *workerSetting, n int) (simRun, error) {
			return b.pgOnSim(srv, st.items, st.plan, n, st.simArgs)
		}}
}

// pgOnSim starts a simulator and a fresh database, runs n refund processes
// on the database at once over the same plan, checks every item was
// refunded exactly once (the summaries, the simulator, the items table),
// and drops both.
func (b *bench) pgOnSim(srv *pgtest.Server, items int, plan string, n int, simArgs []string) (simRun, error) {
	url, drop, err := b.freshDB(srv)
	if err != nil {
		return simRun{}, err
	}
	defer drop()
	run, err := b.workersOn(simArgs, items, url, plan, n)
	if err != nil {
		return run, err
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

// pgClaimCost times the checkpoint's operations against the real server
// (refund/checkpoint/postgres, fsync on), each a commit or none.
func (b *bench) pgClaimCost(r *row) error {
	med, err := b.claimCost(r, "the PostgreSQL checkpoint's operations (refund/checkpoint/postgres against a local server over its unix socket, fsync on)", func() (refund.Claims, func(), error) {
		srv, err := b.startPG()
		if err != nil {
			return nil, nil, err
		}
		url, drop, err := b.freshDB(srv)
		if err != nil {
			srv.Stop()
			return nil, nil, err
		}
		r.commands = append(r.commands, "go run ./scripts/bench -only pg-claim   # in-process: postgres.Open, Load, then each operation timed one by one")
		cp, err := postgres.Open(b.ctx, url, postgres.Options{Lease: 30 * time.Second, Worker: "bench"}, false)
		if err != nil {
			drop()
			srv.Stop()
			return nil, nil, err
		}
		return cp, func() { cp.Close(); drop(); srv.Stop() }, nil
	})
	if err != nil {
		return err
	}
	r.detailf("Each item a worker refunds costs a share of a Claim (it claims as many items as it has free slots), two fenced Appends (intent, outcome; the outcome that settles the item ends its claim, so its Release writes nothing) and its payment's lock taken and given up (one statement each): about %.1f ms of database round trips at these medians, spread over the worker's -j slots.", med[opWhole])
	return nil
}

// claimCost times the operations of the checkpoint open starts and opens
// (checkpointOps), and closes it; what names the checkpoint in the row.
func (b *bench) claimCost(r *row, what string, open func() (refund.Claims, func(), error)) (map[string]float64, error) {
	r.what = fmt.Sprintf("%s: Claim of 1 item + Release, fenced Appends of 1 record, one item's whole way; %d rounds each", what, b.sz.SharedRounds)
	r.target = "measured, no target"
	cp, closeAll, err := open()
	if err != nil {
		return nil, err
	}
	defer closeAll()
	return b.checkpointOps(r, cp)
}
