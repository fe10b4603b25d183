package postgres

// Riding out a restart of the database: a statement that met a dropped
// connection, or a server that is starting, is sent again (the pool connects
// anew) for as long as the claim it is for lasts by this run's clock
// (docs/postgres.md, "A restart of the database").

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// unreachable reports an error that says the database did not answer: a
// connection dropped or refused, a server shutting down or starting.
func unreachable(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// 08: connection exceptions; 57P01-57P05: shut down, crashed,
		// starting (57014, a statement cancelled, is an answer).
		return strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "57P")
	}
	var connErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connErr) || errors.As(err, &netErr) || pgconn.SafeToRetry(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ENOENT) // a unix socket gone while the server is down
}

// retry runs try until it succeeds, fails with an answer of the database, ctx
// ends, or until passes with the database away; it is run once at least.
func (c *Checkpoint) retry(ctx context.Context, until time.Time, try func(ctx context.Context) error) error {
	for {
		err := try(ctx)
		if !unreachable(err) || ctx.Err() != nil {
			if err == nil {
				c.answered()
			}
			return err
		}
		c.Unanswered(err)
		wait := min(c.PollWait(), time.Until(until))
		if wait <= 0 {
			return err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return err
		}
	}
}

// answered ends an outage, and renews at once the claims it held.
func (c *Checkpoint) answered() {
	if c.Answered() {
		c.Relink()
	}
}

// leaseEnd is when this run's claim of k may run out in the database, by
// this host's clock (the zero time once it holds none).
func (c *Checkpoint) leaseEnd(k key) time.Time {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	if cl := c.Held[k]; cl != nil {
		return cl.Deadline.Add(c.Lease() / 10)
	}
	return time.Time{}
}

// appended reports whether w's records are committed: a write whose
// connection dropped before its answer may have been.
func (c *Checkpoint) appended(ctx context.Context, k key, gen int64, line string) (bool, error) {
	var n int
	err := c.pool.QueryRow(ctx, `SELECT count(*) FROM refundkit.records
		WHERE batch = $1 AND item = $2 AND claim_gen = $3 AND worker = $4 AND rec = $5`,
		k.Batch, k.Item, gen, c.Worker, line).Scan(&n)
	return n > 0, err
}

// retryLease is retry for at most a lease from now, under parent.
func (c *Checkpoint) retryLease(parent context.Context, try func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(parent, c.Lease())
	defer cancel()
	return c.retry(ctx, time.Now().Add(c.Lease()), try)
}
