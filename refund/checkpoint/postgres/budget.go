package postgres

// The rate budget an account's live workers share in equal parts of --share,
// re-split when one joins, ends or dies.

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/refundkit/refundkit/refund/checkpoint"
)

// budgetChannel is where a worker that joins or ends NOTIFYs its account.
const budgetChannel = "refundkit_budget"

// Budget is this worker's part of its account's budget, until Close.
type Budget struct {
	checkpoint.Share // idle: its part is 0
	c                *Checkpoint
	account          string
	share            float64         // the whole batch's share of the account (--share)
	conn             *pgxpool.Conn   // LISTENs on budgetChannel, and counts
	ctx              context.Context // ends with end
	done             chan struct{}
	watching         sync.WaitGroup // watchIdle
}

// ShareBudget makes this worker one of account's live workers (an identity,
// never a secret) sharing share of its limits. apply hears their count now
// and at each change: at once when one starts or ends (NOTIFY), within
// 5/6 of a lease when one dies or pauses (its last_seen goes stale). A
// worker counts itself always. The budget ends with Close.
func (c *Checkpoint) ShareBudget(ctx context.Context, account string, share float64, apply func(workers int)) (*Budget, error) {
	if !c.Renewing() {
		return nil, errors.New("postgres checkpoint: a budget needs a worker (opened read only)")
	}
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return nil, c.Wrap("budget", err)
	}
	b := &Budget{c: c, account: account, share: share, conn: conn, done: make(chan struct{})}
	b.ctx = b.Begin(apply)
	fail := func(err error) (*Budget, error) {
		b.End(func() { drop(conn) })
		return nil, c.Wrap("budget", err)
	}
	// LISTEN before joining: a worker that joins after this one counted is
	// heard, one that joined before is counted.
	if _, err := conn.Exec(ctx, `LISTEN `+budgetChannel); err != nil {
		return fail(err)
	}
	if _, err := conn.Exec(ctx, `WITH me AS (
			UPDATE refundkit.workers SET account = $3, lease = $4::interval WHERE worker = $1 AND started_at = $2
		) SELECT pg_notify($5, $3)`, c.Worker, c.started, account, c.Lease().String(), budgetChannel); err != nil {
		return fail(err)
	}
	if err := b.recount(ctx); err != nil {
		return fail(err)
	}
	c.Mu.Lock()
	c.budget = b
	c.Mu.Unlock()
	b.watching.Add(1)
	go b.loop()
	go b.watchIdle()
	return b, nil
}

// watchIdle gives this worker's part to the others while it holds no
// claim (checkpoint.Idle): the last items' workers go at the whole share.
func (b *Budget) watchIdle() {
	defer b.watching.Done()
	t := time.NewTicker(checkpoint.IdleAfter / 5)
	defer t.Stop()
	var w checkpoint.Idle
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
		held, worked := b.c.Activity()
		idle := b.Idle()
		switch w.Step(time.Now(), held, worked, idle) {
		case checkpoint.Holding:
			if idle {
				b.setIdle(false)
			}
		case checkpoint.GoIdle:
			b.setIdle(true)
		}
	}
}

// setIdle records this worker idle (its part 0) or busy again (its part
// as counted) and tells the others, who count again.
func (b *Budget) setIdle(idle bool) {
	b.SetIdle(idle)
	part := b.share / float64(max(1, b.Workers()))
	if idle {
		part = 0
	}
	ctx, cancel := context.WithTimeout(b.ctx, b.c.budgetPoll())
	defer cancel()
	b.c.pool.Exec(ctx, `WITH me AS (
			UPDATE refundkit.workers SET budget_share = $3 WHERE worker = $1 AND started_at = $2
		) SELECT pg_notify($4, $5)`, b.c.Worker, b.c.started, part, budgetChannel, b.account)
}

// budgetPoll is how often a worker counts unasked: a dead worker's part
// is taken up within a lease.
func (c *Checkpoint) budgetPoll() time.Duration { return max(c.Lease()/6, 100*time.Millisecond) }

// loop counts again at each notification of the account, or the poll; a
// worker woken late (paused, starved) tells the others it is back.
func (b *Budget) loop() {
	defer close(b.done)
	poll := b.c.budgetPoll()
	last := time.Now()
	for {
		// The poll is due a poll after the last count, however many
		// notifications of other accounts come meanwhile.
		ctx, cancel := context.WithDeadline(b.ctx, last.Add(poll))
		n, err := b.conn.Conn().WaitForNotification(ctx)
		cancel()
		if b.ctx.Err() != nil {
			return
		}
		if err == nil && n.Payload != b.account {
			continue // another account's news
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && !pgconn.Timeout(err) && !b.reconnect() {
			continue
		}
		ctx, cancel = context.WithTimeout(b.ctx, poll)
		if time.Since(last) > 2*poll {
			// This worker was paused or starved past its poll: the others
			// may have taken its part. They count it again now.
			b.conn.Exec(ctx, `WITH me AS (
					UPDATE refundkit.workers SET last_seen = clock_timestamp() WHERE worker = $1 AND started_at = $2
				) SELECT pg_notify($3, $4)`, b.c.Worker, b.c.started, budgetChannel, b.account)
		}
		b.recount(ctx)
		cancel()
		last = time.Now()
	}
}

// reconnect replaces a listening connection the database dropped; false
// when it cannot (the part stays; the next poll tries again).
func (b *Budget) reconnect() bool {
	if !b.conn.Conn().PgConn().IsClosed() {
		return true
	}
	ctx, cancel := context.WithTimeout(b.ctx, b.c.budgetPoll())
	defer cancel()
	conn, err := b.c.pool.Acquire(ctx)
	if err == nil {
		_, err = conn.Exec(ctx, `LISTEN `+budgetChannel)
	}
	if err != nil {
		if conn != nil {
			drop(conn)
		}
		select {
		case <-b.ctx.Done():
		case <-time.After(b.c.budgetPoll()):
		}
		return false
	}
	drop(b.conn)
	b.conn = conn
	return true
}

// liveWorkersSQL counts account $1's workers, $2 (lease $3) included, not
// stopped, not idle (part 0) and seen within 2/3 of their own lease.
const liveWorkersSQL = `SELECT 1 + count(*) FROM refundkit.workers
	WHERE account = $1 AND worker <> $2 AND stopped_at IS NULL AND coalesce(budget_share, 1) > 0
	  AND last_seen > clock_timestamp() - coalesce(lease, $3::interval) * 2 / 3`

// recount counts the account's live workers and, when that changed,
// applies it and records this worker's part (workers.budget_share).
func (b *Budget) recount(ctx context.Context) error {
	c := b.c
	var n int
	err := b.conn.QueryRow(ctx, liveWorkersSQL, b.account, c.Worker, c.Lease().String()).Scan(&n)
	if err != nil {
		return err
	}
	if !b.Counted(n) {
		return nil
	}
	// An idle worker's part stays 0: watchIdle alone moves it from or to 0.
	_, err = b.conn.Exec(ctx, `UPDATE refundkit.workers SET budget_share = CASE WHEN budget_share = 0 THEN 0 ELSE $3::double precision END
		WHERE worker = $1 AND started_at = $2`, c.Worker, c.started, b.share/float64(n))
	return err
}

// end stops the loop and gives the connection back; Close then marks the
// worker stopped and tells the others.
func (b *Budget) end() {
	if b == nil {
		return
	}
	b.End(func() {
		<-b.done
		b.watching.Wait()
		drop(b.conn)
	})
}

// drop closes a listening connection rather than give it back to the
// pool, where it would keep gathering notifications no one reads.
func drop(conn *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn.Conn().Close(ctx)
	conn.Release() // a closed connection is destroyed, not pooled
}
