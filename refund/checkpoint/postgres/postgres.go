// Package postgres is a refund checkpoint in PostgreSQL that many refund
// runs, on many hosts, share (refund.Claims): the plan of a batch is loaded
// once, each item is claimed by one run at a time under a lease, and every
// record is written in the same journal lines a file journal holds, fenced
// by the writer's claim.
//
// The tables live in the schema refundkit, created and migrated by Open
// (schema.go; docs/postgres.md).
package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
)

// IsURL reports whether a --journal argument names a PostgreSQL
// checkpoint rather than a file: postgres:// or postgresql://, as libpq
// takes them. "postgres://" alone uses the PG* environment variables.
func IsURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// Options configure a Checkpoint.
type Options struct {
	// Lease is how long a claim stays the holder's without a renewal
	// (default 30 s). The holder renews it every third of it; a worker
	// that dies (or is paused, or cut off) loses its claims once it runs
	// out, and another takes them.
	Lease time.Duration
	// Worker names this run in claims and in audit (default host:pid:random).
	Worker string
	// Warn hears that the database stopped answering, and that it
	// answers again (outage.go).
	Warn func(msg string)
}

// Checkpoint is a refund.Claims in PostgreSQL. Open makes one; Close ends
// it.
type Checkpoint struct {
	pool    *pgxpool.Pool
	secrets []string // the password and passphrases, scrubbed from every error
	worker  string
	lease   time.Duration

	mu        sync.Mutex
	held      map[key]*claim // this run's live claims
	done      map[key]bool   // items this run released: not claimed again by it
	batches   []string       // the batches of the plan this run loaded
	stats     journal.WriterStats
	empty     bool      // read only, and the database holds no checkpoint
	startSnap string    // the snapshot this run took as it opened the checkpoint (pg_snapshot's text)
	started   time.Time // when this process registered its worker name

	states map[string]*journal.State // Lookup's: batches loaded, for reading
	budget *Budget                   // ShareBudget's, ended by Close

	stopRenew chan struct{}
	renewDone chan struct{}
	closeOnce sync.Once

	warn          func(msg string)
	outage        refund.Outage // said as it begins and ends (outage.go)
	relinked      chan struct{} // the database answers again: renewLoop renews now
	claimsFailing time.Time     // since when Claim has found the database away
}

type key struct{ batch, item string }

// claim is a claim this run holds: its generation fences its writes.
type claim struct {
	gen      int64
	deadline time.Time // by this host's monotonic clock: the lease is surely ours until then
	state    journal.ItemState
	known    bool // the checkpoint holds records of the item
	wrote    bool // this run appended records of it (the last ended the claim if it settled it)
	payments int  // payment locks held for it (LockPayments)
}

// Open connects to the checkpoint at connString (a libpq URL; PG* environment
// variables fill in what it leaves out), migrates its schema and, unless
// readOnly, registers this run as a worker and starts renewing its claims.
// Errors never hold the password.
func Open(ctx context.Context, connString string, opts Options, readOnly bool) (*Checkpoint, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		for _, pw := range passwordsIn(connString) {
			err = refund.Scrub(err, pw)
		}
		return nil, &ConfigError{URL: Redact(connString), Err: err}
	}
	secrets := secretsOf(cfg, connString)
	cfg.MaxConns = 16
	if opts.Lease <= 0 {
		opts.Lease = 30 * time.Second
	}
	// A row locked elsewhere (a psql session left open, an import) fails
	// a statement within half a lease instead of stalling the worker.
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = strconv.FormatInt(max(opts.Lease/2, time.Second).Milliseconds(), 10)
	cfg.ConnConfig.RuntimeParams["application_name"] = "refundkit"
	if opts.Worker == "" {
		opts.Worker = refund.DefaultWorker()
	}
	if opts.Warn == nil {
		opts.Warn = func(string) {}
	}
	c := &Checkpoint{secrets: secrets, worker: opts.Worker, lease: opts.Lease, held: map[key]*claim{}, done: map[key]bool{}, states: map[string]*journal.State{}, warn: opts.Warn,
		relinked: make(chan struct{}, 1),
		outage:   refund.Outage{Silent: "the database does not answer", Back: "the database answers again", Warn: opts.Warn}}
	c.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, c.wrap("connect", err)
	}
	if err := c.pool.Ping(ctx); err != nil {
		c.pool.Close()
		return nil, c.wrap("connect", err)
	}
	if readOnly {
		// A reader writes nothing, not even the schema: a database without
		// one is an empty checkpoint.
		v, err := schemaVersion(ctx, c.pool)
		switch {
		case err != nil:
			c.pool.Close()
			return nil, c.wrap("schema", err)
		case v > SchemaVersion:
			c.pool.Close()
			return nil, c.wrap("schema", fmt.Errorf("the checkpoint's schema is version %d, newer than this build's %d: use a newer refundkit", v, SchemaVersion))
		}
		c.empty = v == 0
		return c, nil
	}
	if err := migrate(ctx, c.pool); err != nil {
		c.pool.Close()
		return nil, c.wrap("schema", err)
	}
	host, _ := os.Hostname()
	// A name is one live worker's: a second would read the first's claims
	// as its own and mark it stopped when it ends.
	// started_at tells this process from an earlier one of its name.
	err = c.pool.QueryRow(ctx, `INSERT INTO refundkit.workers AS w (worker, host, pid) VALUES ($1, $2, $3)
		ON CONFLICT (worker) DO UPDATE SET host = EXCLUDED.host, pid = EXCLUDED.pid,
			started_at = clock_timestamp(), last_seen = clock_timestamp(), stopped_at = NULL, batches = NULL,
			account = NULL, lease = NULL, budget_share = NULL
		WHERE w.stopped_at IS NOT NULL OR w.last_seen < clock_timestamp() - $4::interval
		RETURNING started_at`, c.worker, host, os.Getpid(), opts.Lease.String()).Scan(&c.started)
	if errors.Is(err, pgx.ErrNoRows) {
		c.pool.Close()
		return nil, &refund.WorkerNameError{Worker: c.worker}
	}
	if err != nil {
		c.pool.Close()
		return nil, c.wrap("register worker", err)
	}
	// Records committed from now on are this run's time: a key another
	// worker burns from now on is not sent under a new key by this run.
	// Its start is a snapshot, not the highest sequence number: a record
	// that drew its number before another's and committed after this
	// start is of this run.
	if err := c.pool.QueryRow(ctx, `SELECT pg_current_snapshot()::text`).Scan(&c.startSnap); err != nil {
		c.pool.Close()
		return nil, c.wrap("open", err)
	}
	c.stopRenew, c.renewDone = make(chan struct{}), make(chan struct{})
	go c.renewLoop()
	return c, nil
}

// Migrate creates or migrates the checkpoint's schema at connString and
// does nothing else: for a rig, or a role allowed DDL preparing a database
// that workers without it use.
func Migrate(ctx context.Context, connString string) error {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		for _, pw := range passwordsIn(connString) {
			err = refund.Scrub(err, pw)
		}
		return &ConfigError{URL: Redact(connString), Err: err}
	}
	c := &Checkpoint{secrets: secretsOf(cfg, connString)} // for wrap's scrubbing
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return c.wrap("connect", err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil {
		return c.wrap("connect", err)
	}
	return c.wrap("schema", migrate(ctx, pool))
}

// secretsOf are the secrets of a connection, scrubbed from every error:
// its password, as the config and the URL hold it, and the passphrase of
// its key.
func secretsOf(cfg *pgxpool.Config, connString string) []string {
	return append([]string{cfg.ConnConfig.Password, os.Getenv("PGSSLPASSWORD")}, passwordsIn(connString)...)
}

// Close stops renewing, gives up the claims still held (their items go to
// the next run at once, not after their lease) and marks the worker
// stopped.
func (c *Checkpoint) Close() error {
	c.closeOnce.Do(c.close)
	return nil
}

func (c *Checkpoint) close() {
	if c.stopRenew != nil {
		close(c.stopRenew)
		<-c.renewDone
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.mu.Lock()
		var batches, items []string
		var gens []int64
		for k, cl := range c.held {
			batches, items, gens = append(batches, k.batch), append(items, k.item), append(gens, cl.gen)
		}
		c.held = map[key]*claim{}
		c.mu.Unlock()
		if len(items) > 0 {
			c.pool.Exec(ctx, `WITH unlocked AS (
				DELETE FROM refundkit.payment_locks l USING unnest($2::text[], $3::text[], $4::bigint[]) AS h(batch, item, gen)
				WHERE l.batch = h.batch AND l.item = h.item AND l.worker = $1 AND l.claim_gen = h.gen
			)
			UPDATE refundkit.items i SET claimed_by = NULL, lease_until = NULL
				FROM unnest($2::text[], $3::text[], $4::bigint[]) AS h(batch, item, gen)
				WHERE i.batch = h.batch AND i.item = h.item AND i.claimed_by = $1 AND i.claim_gen = h.gen`,
				c.worker, batches, items, gens)
		}
		c.mu.Lock()
		b := c.budget
		c.mu.Unlock()
		b.end()
		// The workers sharing its account's budget take up its part at once.
		c.pool.Exec(ctx, `WITH w AS (
				UPDATE refundkit.workers SET stopped_at = clock_timestamp(), last_seen = clock_timestamp()
				WHERE worker = $1 AND started_at = $2 RETURNING account
			) SELECT pg_notify($3, account) FROM w WHERE account IS NOT NULL`, c.worker, c.started, budgetChannel)
	}
	c.pool.Close()
}

// Error is a failure of the checkpoint database, named by what was being
// done; it never holds the password.
type Error struct {
	Op  string
	Err error
}

func (e *Error) Error() string { return "postgres checkpoint: " + e.Op + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func (c *Checkpoint) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	var lost *refund.LostClaimError
	if errors.As(err, &lost) {
		return err
	}
	err = refund.Scrub(err, c.secrets...)
	return &Error{Op: op, Err: err}
}

// ConfigError is a connection string that does not parse: a usage error.
type ConfigError struct {
	URL string // redacted
	Err error
}

func (e *ConfigError) Error() string { return "postgres checkpoint " + e.URL + ": " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// Redact is url with its password, if any, replaced by xxxxx: how a
// checkpoint is named in messages.
func Redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(a postgres URL that does not parse)"
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	q := u.Query()
	for _, p := range secretParams {
		if q.Has(p) {
			q.Set(p, "xxxxx")
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// passwordsIn are the forms a password takes in s, as given and decoded,
// for scrubbing from messages when s does not parse as a config.
func passwordsIn(s string) []string {
	u, err := url.Parse(s)
	if err != nil {
		return nil
	}
	var pws []string
	if pw, ok := u.User.Password(); ok && pw != "" {
		pws = append(pws, pw, url.PathEscape(pw), url.QueryEscape(pw))
	}
	for _, p := range secretParams {
		if pw := u.Query().Get(p); pw != "" {
			pws = append(pws, pw, url.QueryEscape(pw))
		}
	}
	return pws
}

// secretParams are the connection parameters that hold secrets: the
// password, and the passphrase of the client's key.
var secretParams = []string{"password", "sslpassword"}

// inTx runs fn in a transaction.
func (c *Checkpoint) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, c.pool, fn)
}
