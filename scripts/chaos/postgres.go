package main

// The PostgreSQL rows: many `refund` workers share one checkpoint
// (`--journal postgres://...`), each claiming items under a lease, while
// workers die, stop, come and go, and the database itself goes down
// (shared.go, sharedops.go: the same rows run on NATS JetStream).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/refundkit/refundkit/refund/checkpoint/postgres"
	"github.com/refundkit/refundkit/refund/checkpoint/postgres/pgtest"
)

// pgCluster is the one PostgreSQL server of a matrix, started by the first
// PostgreSQL row with fsync on (a commit costs what it costs in
// production); each row's seed gets a fresh database on it.
type pgCluster struct {
	once sync.Once
	srv  *pgtest.Server
	err  error
}

func (c *pgCluster) server() (*pgtest.Server, error) {
	c.once.Do(func() { c.srv, c.err = pgtest.Start(pgtest.Options{Fsync: true}) })
	return c.srv, c.err
}

func (c *pgCluster) stop() {
	if c.srv != nil {
		c.srv.Stop()
	}
}

// pgCheckpoint is a database of the matrix's server, and the rig's own
// connections to it.
type pgCheckpoint struct {
	srv  *pgtest.Server
	dsn  string
	pool *pgxpool.Pool
}

// onPG runs a shared row on PostgreSQL.
func onPG(run func(*rig, sizes)) func(*rig, sizes) { return onShared(openPG, run) }

// openPG makes a fresh database for the rig, named for its row, seed and
// name.
func openPG(r *rig, name string) sharedCheckpoint {
	srv, err := r.m.pg.server()
	if err != nil {
		if errors.Is(err, pgtest.ErrNoServerBinary) {
			r.fatalf("setup: the PostgreSQL rows need a PostgreSQL server: apt-get install postgresql, or set REFUNDKIT_PG_BIN: %v", err)
		}
		r.fatalf("setup: start PostgreSQL: %v", err)
	}
	ctx := context.Background()
	db := fmt.Sprintf("chaos_%s_%d_%s", strings.ReplaceAll(r.t.Name, "-", "_"), r.seed, name)
	url, err := srv.CreateDB(ctx, db)
	r.must(err)
	r.cleanup(func() { srv.DropDB(context.Background(), db) })
	// The schema, so the rig can read the tables before any worker has
	// run (readers make none).
	r.must(postgres.Migrate(ctx, url))
	pool, err := pgxpool.New(ctx, url)
	r.must(err)
	r.cleanup(pool.Close)
	return &pgCheckpoint{srv: srv, dsn: url, pool: pool}
}

func (c *pgCheckpoint) url() string { return c.dsn }

func (c *pgCheckpoint) claim(batch, item string) (itemClaim, error) {
	var name *string
	var cl itemClaim
	err := c.pool.QueryRow(context.Background(), `SELECT claimed_by, claim_gen FROM refundkit.items WHERE batch = $1 AND item = $2`, batch, item).Scan(&name, &cl.Gen)
	if name != nil {
		cl.Worker = *name
	}
	return cl, err
}

func (c *pgCheckpoint) unrefunded(batch string) (int, error) {
	var open int
	err := c.pool.QueryRow(context.Background(), `SELECT count(*) FROM refundkit.items WHERE batch = $1 AND status <> 'refunded'`, batch).Scan(&open)
	return open, err
}

// snapshot names each record by its sequence number.
func (c *pgCheckpoint) snapshot() (recordSnapshot, error) {
	rows, err := c.pool.Query(context.Background(), `SELECT seq, rec FROM refundkit.records`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	s := recordSnapshot{}
	for rows.Next() {
		var seq int64
		var rec string
		if err := rows.Scan(&seq, &rec); err != nil {
			return nil, err
		}
		s[strconv.FormatInt(seq, 10)] = rec
	}
	return s, rows.Err()
}

// export writes the database's records as a journal file holds them
// (postgres.Export).
func (c *pgCheckpoint) export(path string, batches ...string) error {
	ctx := context.Background()
	cp, err := postgres.Open(ctx, c.dsn, postgres.Options{}, true)
	if err != nil {
		return err
	}
	defer cp.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, _, err := cp.Export(ctx, f, batches); err != nil {
		return err
	}
	return f.Close()
}

// down crashes the database (pg_ctl stop -m immediate: WAL recovery on
// start) or shuts it down fast.
func (c *pgCheckpoint) down(crash bool) error {
	if crash {
		return c.srv.Crash()
	}
	return c.srv.Down()
}

func (c *pgCheckpoint) up() error {
	err := c.srv.Up()
	c.pool.Reset()
	return err
}

// pgDown is how pg-dbrestart takes the database down; a worker whose
// checkpoint write or claim fails halts with exit 3.
var pgDown = serverDown{crash: "database crashes (immediate stop)", stop: "database fast shutdowns", again: []int{exitJournal}}

const whatPGKill9 = "Four `refund -j 8` workers share one PostgreSQL checkpoint (`--journal postgres://... --lease 3s`; the database has fsync on) and are killed with SIGKILL again and again, each killed one replaced by a new worker until every worker has exited 0. " +
	"Half the kills come from inside the simulator's create hook: the worker whose claim the database shows for the item being refunded is killed with its call in flight, and the simulator commits the refund after it is gone; the other half hit a random live worker at a random time. " +
	"The dead worker's items pass to the others once its lease runs out, and each is looked up before anything is sent. Before each kill the database's records are snapshotted and must all be there, unchanged, after; at the end the database, exported as journal lines, must account for every refund at the simulator."

const whatPGSigstop = "Three `refund -j 4` workers on one PostgreSQL checkpoint (`--lease 2s`). Inside the simulator's create hook, the worker holding the item's claim is stopped with SIGSTOP, its call in flight (the simulator commits the refund; the answer waits for a stopped process). " +
	"The rig waits until the database shows the item taken by another worker (so the stop lasted longer than the lease), then resumes the worker with SIGCONT: it must find its claim lost and halt with exit 3 (saying the claim was lost), writing and sending nothing more; a new worker replaces it. " +
	"The item's new holder looks it up and finds the refund, so nothing is refunded twice."

const whatPGDBRestart = "Four `refund -j 8` workers on one PostgreSQL checkpoint (`--lease 2s`); inside the simulator's create hook, with calls in flight, the database goes down: a crash (`pg_ctl stop -m immediate`, no checkpoint: WAL recovery on start) and a fast shutdown, in turn. " +
	"It stays down for 0.2 to 1.5 s, then starts again on the same data. A worker whose checkpoint write or claim fails halts with exit 3, having sent nothing after the failed write; one that was waiting may go on. Halted workers are replaced once the database is up, until every worker has exited 0. " +
	"Every record the database held when it went down must be there after it came back, and at the end every refund at the simulator recorded as refunded."

const whatPGFaults = "Four `refund -j 8` workers on one PostgreSQL checkpoint against a simulator that answers a share of refund creations 500 without a refund (0.1), 500 after committing it (0.1), commits and drops the answer (0.1), answers a gateway's 504 at once while the request goes on behind it (0.1), and answers a fifth of all requests 429. " +
	"Rounds of four workers run until one round ends with every worker at exit 0 (exit 1, items left in doubt, and exit 6, the provider not answering, are accepted on the way); the simulator forgets every idempotency key after each round, so items left in doubt are found by their look-up, not by a replay. Then the faults stop, a round runs, and if items Stripe answered its own 500 for are still in doubt (exit 1), a round with `--resend-after-500` must end them all at exit 0."

const whatPGReshard = "Workers come and go on one PostgreSQL checkpoint (`--lease 3s`, `-j 8` each): one worker starts the batch; at a fifth of the refund calls three more join it; at half, one of those is stopped with SIGTERM (it must finish its calls in flight, give its claims back and exit 143) and another is killed with SIGKILL (its items pass to the others when its lease runs out). " +
	"The two left must finish the batch with exit 0, and a worker started after them must find nothing left and exit 0."
