// Package postgres is a refund checkpoint in PostgreSQL that many runs
// share (refund.Claims): each item claimed by one run at a time under a
// lease, its records the journal lines a file journal holds, fenced by the
// claim's generation. Schema refundkit, migrated by Open (docs/postgres.md).
package postgres

import (
	"context"
	"errors"
	"net/url"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/checkpoint"
)

// IsURL reports whether a --journal argument names a PostgreSQL checkpoint
// rather than a file: postgres:// or postgresql://, as libpq takes them.
func IsURL(s string) bool { return checkpoint.IsURL(s, "postgres://", "postgresql://") }

// Options configure a Checkpoint.
type Options = checkpoint.Options

// Checkpoint is a refund.Claims in PostgreSQL. Open makes one; Close ends
// it.
type Checkpoint struct {
	checkpoint.Base[*claim]
	pool      *pgxpool.Pool
	batches   []string                  // the batches of the plan this run loaded
	empty     bool                      // read only, and the database holds no checkpoint
	startSnap string                    // the snapshot this run took as it opened the checkpoint (pg_snapshot's text)
	started   time.Time                 // when this process registered its worker name
	states    map[string]*journal.State // Lookup's: batches loaded, for reading
	budget    *Budget                   // ShareBudget's, ended by Close
	closeOnce sync.Once
}

type key = checkpoint.Key

// claim is a claim this run holds: its generation fences its writes.
type claim struct {
	checkpoint.Claim
	gen      int64
	wrote    bool // this run appended records of it (the last ended the claim if it settled it)
	payments int  // payment locks held for it (LockPayments)
}

// Open connects to connString (a libpq URL, PG* filling gaps), migrates the
// schema and, unless readOnly, registers this worker and starts renewing.
func Open(ctx context.Context, connString string, opts Options, readOnly bool) (_ *Checkpoint, err error) {
	c, err := connect(ctx, connString, &opts, func(cfg *pgxpool.Config) {
		cfg.MaxConns = 16
		// A row locked elsewhere (a psql session left open, an import) fails
		// a statement within half a lease instead of stalling the worker.
		cfg.ConnConfig.RuntimeParams["lock_timeout"] = strconv.FormatInt(max(opts.Lease/2, time.Second).Milliseconds(), 10)
		cfg.ConnConfig.RuntimeParams["application_name"] = "refundkit"
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.pool.Close()
		}
	}()
	if readOnly {
		// A reader writes nothing, not even the schema: a database without
		// one is an empty checkpoint.
		v, err := schemaVersion(ctx, c.pool)
		if err != nil {
			return nil, c.Wrap("schema", err)
		}
		c.empty = v == 0
		return c, nil
	}
	if err := migrate(ctx, c.pool); err != nil {
		return nil, c.Wrap("schema", err)
	}
	host, _ := os.Hostname()
	// A name is one live worker's: a second would read the first's claims
	// as its own and mark it stopped when it ends.
	err = c.pool.QueryRow(ctx, `INSERT INTO refundkit.workers AS w (worker, host, pid) VALUES ($1, $2, $3)
		ON CONFLICT (worker) DO UPDATE SET host = EXCLUDED.host, pid = EXCLUDED.pid,
			started_at = clock_timestamp(), last_seen = clock_timestamp(), stopped_at = NULL, batches = NULL,
			account = NULL, lease = NULL, budget_share = NULL
		WHERE w.stopped_at IS NOT NULL OR w.last_seen < clock_timestamp() - $4::interval
		RETURNING started_at`, c.Worker, host, os.Getpid(), opts.Lease.String()).Scan(&c.started)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &refund.WorkerNameError{Worker: c.Worker}
	}
	if err != nil {
		return nil, c.Wrap("register worker", err)
	}
	// Records committed from now on are this run's time: a key another
	// worker burns from now on is not sent under a new key by this run.
	// A snapshot, not the highest sequence number: those are drawn at
	// insert, not in commit order.
	if err := c.pool.QueryRow(ctx, `SELECT pg_current_snapshot()::text`).Scan(&c.startSnap); err != nil {
		return nil, c.Wrap("open", err)
	}
	c.StartRenewing(func(bool) {
		ctx, cancel := context.WithTimeout(context.Background(), c.Lease()/3)
		c.renew(ctx)
		cancel()
	})
	return c, nil
}

// Migrate creates or migrates the schema at connString, nothing else: for a
// role allowed DDL preparing a database for workers without it.
func Migrate(ctx context.Context, connString string) error {
	c, err := connect(ctx, connString, &Options{}, func(*pgxpool.Config) {})
	if err != nil {
		return err
	}
	defer c.pool.Close()
	return c.Wrap("schema", migrate(ctx, c.pool))
}

// connect parses connString (an error is a *ConfigError), fills opts's
// defaults, and connects with the config as tune leaves it.
func connect(ctx context.Context, connString string, opts *Options, tune func(*pgxpool.Config)) (*Checkpoint, error) {
	cfg, err := parseConfig(connString)
	if err != nil {
		return nil, err
	}
	c := &Checkpoint{states: map[string]*journal.State{}}
	c.Init(opts, "the database does not answer", "the database answers again", newError, c.renewClaim)
	c.Secrets = secretsOf(cfg, connString)
	tune(cfg)
	if c.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, c.Wrap("connect", err)
	}
	if err := c.pool.Ping(ctx); err != nil {
		c.pool.Close()
		return nil, c.Wrap("connect", err)
	}
	return c, nil
}

// parseConfig parses connString; an error is a *ConfigError without its passwords.
func parseConfig(connString string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		for _, pw := range passwordsIn(connString) {
			err = refund.Scrub(err, pw)
		}
		return nil, &ConfigError{URL: Redact(connString), Err: err}
	}
	return cfg, nil
}

// secretsOf are the secrets of a connection, scrubbed from every error: its
// password, as the config and the URL hold it, and the passphrase of its key.
func secretsOf(cfg *pgxpool.Config, connString string) []string {
	return append([]string{cfg.ConnConfig.Password, os.Getenv("PGSSLPASSWORD")}, passwordsIn(connString)...)
}

// Close stops renewing, gives up the claims still held (their items go to the
// next run at once, not after their lease) and marks the worker stopped.
func (c *Checkpoint) Close() error {
	c.closeOnce.Do(c.close)
	return nil
}

func (c *Checkpoint) close() {
	if c.StopRenewing() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.Mu.Lock()
		batches, items, gens := c.heldArrays()
		c.Held = map[key]*claim{}
		c.Mu.Unlock()
		if len(items) > 0 {
			c.pool.Exec(ctx, `WITH unlocked AS (
				DELETE FROM refundkit.payment_locks l USING unnest($2::text[], $3::text[], $4::bigint[]) AS h(batch, item, gen)
				WHERE l.batch = h.batch AND l.item = h.item AND l.worker = $1 AND l.claim_gen = h.gen
			)
			UPDATE refundkit.items i SET claimed_by = NULL, lease_until = NULL
				FROM unnest($2::text[], $3::text[], $4::bigint[]) AS h(batch, item, gen)
				WHERE i.batch = h.batch AND i.item = h.item AND i.claimed_by = $1 AND i.claim_gen = h.gen`,
				c.Worker, batches, items, gens)
		}
		c.Mu.Lock()
		b := c.budget
		c.Mu.Unlock()
		b.end()
		// The workers sharing its account's budget take up its part at once.
		c.pool.Exec(ctx, `WITH w AS (
				UPDATE refundkit.workers SET stopped_at = clock_timestamp(), last_seen = clock_timestamp()
				WHERE worker = $1 AND started_at = $2 RETURNING account
			) SELECT pg_notify($3, account) FROM w WHERE account IS NOT NULL`, c.Worker, c.started, budgetChannel)
	}
	c.pool.Close()
}

// Error is a failure of the checkpoint database; BusyError an import refused.
type (
	Error     = checkpoint.Error
	BusyError = checkpoint.BusyError
)

func newError(op string, err error) error { return &Error{Backend: "postgres", Op: op, Err: err} }
func busy(why string) error               { return &BusyError{Backend: "postgres", Why: why} }

// wrapInput is Wrap, but a refused input (*refund.InputError, *BusyError)
// stays itself.
func (c *Checkpoint) wrapInput(op string, err error) error {
	switch err.(type) {
	case *BusyError, *refund.InputError:
		return err
	}
	return c.Wrap(op, err)
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
