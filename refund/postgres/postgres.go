// Package postgres is a refund checkpoint in PostgreSQL that many refund
// runs, on many hosts, share (refund.Claims): the plan of a batch is loaded
// once, each item is claimed by one run at a time under a lease, and every
// record is written in the same journal lines a file journal holds, fenced
// by the writer's claim.
//
// The tables live in the schema refundkit, created and migrated by Open
// (schema.go; README, "The PostgreSQL checkpoint").
package postgres

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/refundkit/refundkit/journal"
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
}

// Checkpoint is a refund.Claims in PostgreSQL. Open makes one; Close ends
// it.
type Checkpoint struct {
	pool   *pgxpool.Pool
	secret string // the password, scrubbed from every error
	worker string
	lease  time.Duration

	mu      sync.Mutex
	held    map[key]*claim // this run's live claims
	done    map[key]bool   // items this run released: not claimed again by it
	batches []string       // the batches of the plan this run loaded
	stats   journal.WriterStats
	lost    error // set once a renewal found claims taken: Holds fails

	states map[string]*journal.State // Lookup's: batches loaded, for reading

	stopRenew chan struct{}
	renewDone chan struct{}
	closeOnce sync.Once
}

type key struct{ batch, item string }

// claim is a claim this run holds: its generation fences its writes.
type claim struct {
	gen      int64
	deadline time.Time // by this host's monotonic clock: the lease is surely ours until then
	state    journal.ItemState
	known    bool // the checkpoint holds records of the item
	wrote    bool // this run appended records of it (the last ended the claim if it settled it)
}

// Open connects to the checkpoint at connString (a libpq URL; PG* environment
// variables fill in what it leaves out), migrates its schema and, unless
// readOnly, registers this run as a worker and starts renewing its claims.
// Errors never hold the password.
func Open(ctx context.Context, connString string, opts Options, readOnly bool) (*Checkpoint, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		for _, pw := range passwordsIn(connString) {
			err = scrub(err, pw)
		}
		return nil, &Error{Op: "parse " + Redact(connString), Err: err}
	}
	secret := cfg.ConnConfig.Password
	cfg.MaxConns = 16
	if opts.Lease <= 0 {
		opts.Lease = 30 * time.Second
	}
	if opts.Worker == "" {
		opts.Worker = defaultWorker()
	}
	c := &Checkpoint{secret: secret, worker: opts.Worker, lease: opts.Lease, held: map[key]*claim{}, done: map[key]bool{}, states: map[string]*journal.State{}}
	c.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, c.wrap("connect", err)
	}
	if err := c.pool.Ping(ctx); err != nil {
		c.pool.Close()
		return nil, c.wrap("connect", err)
	}
	if err := migrate(ctx, c.pool); err != nil {
		c.pool.Close()
		return nil, c.wrap("schema", err)
	}
	if readOnly {
		return c, nil
	}
	host, _ := os.Hostname()
	if _, err := c.pool.Exec(ctx, `INSERT INTO refundkit.workers (worker, host, pid) VALUES ($1, $2, $3)
		ON CONFLICT (worker) DO UPDATE SET last_seen = clock_timestamp(), stopped_at = NULL`,
		c.worker, host, os.Getpid()); err != nil {
		c.pool.Close()
		return nil, c.wrap("register worker", err)
	}
	c.stopRenew, c.renewDone = make(chan struct{}), make(chan struct{})
	go c.renewLoop()
	return c, nil
}

// Worker is the name this run claims items under.
func (c *Checkpoint) Worker() string { return c.worker }

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
			c.pool.Exec(ctx, `UPDATE refundkit.items i SET claimed_by = NULL, lease_until = NULL
				FROM unnest($2::text[], $3::text[], $4::bigint[]) AS h(batch, item, gen)
				WHERE i.batch = h.batch AND i.item = h.item AND i.claimed_by = $1 AND i.claim_gen = h.gen`,
				c.worker, batches, items, gens)
		}
		c.pool.Exec(ctx, `UPDATE refundkit.workers SET stopped_at = clock_timestamp(), last_seen = clock_timestamp() WHERE worker = $1`, c.worker)
	}
	c.pool.Close()
}

func defaultWorker() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	return fmt.Sprintf("%s:%d:%x", host, os.Getpid(), b)
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
	var lost *LostClaimError
	if errors.As(err, &lost) {
		return err
	}
	return &Error{Op: op, Err: scrub(err, c.secret)}
}

// LostClaimError is a write or a call for an item whose claim this run no
// longer holds: its lease ran out (the run was paused, or cut off from the
// database) and another run may have taken the item. Nothing more is sent
// for it by this run.
type LostClaimError struct {
	Batch, Item string
	Why         string
}

func (e *LostClaimError) Error() string {
	return fmt.Sprintf("claim of item %q of batch %q lost: %s; another worker may hold it now, and this one sends nothing more", e.Item, e.Batch, e.Why)
}

// scrub removes secret from err's message, keeping err for errors.Is.
func scrub(err error, secret string) error {
	if err == nil || secret == "" || !strings.Contains(err.Error(), secret) {
		return err
	}
	return &scrubbed{msg: strings.ReplaceAll(err.Error(), secret, "xxxxx"), err: err}
}

type scrubbed struct {
	msg string
	err error
}

func (s *scrubbed) Error() string { return s.msg }
func (s *scrubbed) Unwrap() error { return s.err }

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
	if q := u.Query(); q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
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
	if pw := u.Query().Get("password"); pw != "" {
		pws = append(pws, pw, url.QueryEscape(pw))
	}
	return pws
}

// inTx runs fn in a transaction.
func (c *Checkpoint) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, c.pool, fn)
}
