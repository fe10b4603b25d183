package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/checkpoint"
)

// Claim takes, in plan order, up to n open items of this run's batches (held
// ones too with retryHeld) not under another's live lease nor left by this run.
func (c *Checkpoint) Claim(ctx context.Context, n int, retryHeld bool) ([]refund.Claimed, time.Duration, error) {
	c.Mu.Lock()
	batches := c.batches
	// Not claimed again: what this run released, and what it holds (a
	// lease of its own that ran out is renewed by Holds, never retaken).
	var doneB, doneI []string
	for k := range c.Left {
		doneB, doneI = append(doneB, k.Batch), append(doneI, k.Item)
	}
	for k := range c.Held {
		doneB, doneI = append(doneB, k.Batch), append(doneI, k.Item)
	}
	c.Mu.Unlock()

	start := time.Now()
	var keys []key
	var gens []int64
	var k key
	var gen int64
	err := each(ctx, c.pool, `WITH picked AS (
		SELECT batch, item FROM refundkit.items
		WHERE batch = ANY($1) AND (status NOT IN ('refunded', 'duplicate', 'failed') OR held)
		  AND ($2 OR NOT held)
		  -- this run's own too: a claim whose commit a dropped connection
		  -- left unknown (what it holds and released is passed over)
		  AND (claimed_by IS NULL OR lease_until < clock_timestamp() OR claimed_by = $6)
		  AND (batch, item) NOT IN (SELECT * FROM unnest($3::text[], $4::text[]))
		ORDER BY batch, line
		LIMIT $5
		FOR UPDATE SKIP LOCKED
	)
	UPDATE refundkit.items i SET claimed_by = $6, claim_gen = i.claim_gen + 1,
		lease_until = clock_timestamp() + $7::interval
	FROM picked WHERE i.batch = picked.batch AND i.item = picked.item
	RETURNING i.batch, i.item, i.claim_gen`,
		[]any{batches, retryHeld, doneB, doneI, n, c.Worker, c.Lease().String()}, []any{&k.Batch, &k.Item, &gen}, func() error {
			keys, gens = append(keys, k), append(gens, gen)
			return nil
		})
	if unreachable(err) {
		return nil, c.PollWait(), c.ClaimsUnanswered(err)
	}
	if err != nil {
		return nil, 0, c.Wrap("claim", err)
	}
	c.ClaimsAnswered()
	deadline := start.Add(c.Margin())
	if len(keys) == 0 {
		var wait time.Duration
		err := c.retry(ctx, time.Now().Add(c.Margin()), func(ctx context.Context) (err error) {
			wait, err = c.waitForOthers(ctx, batches, retryHeld, doneB, doneI)
			return err
		})
		return nil, wait, c.Wrap("claim", err)
	}
	c.Mu.Lock()
	for i, k := range keys {
		c.Held[k] = &claim{Claim: checkpoint.Claim{Deadline: deadline}, gen: gens[i]}
	}
	c.Mu.Unlock()

	// The records are read by a second statement, after the claim
	// committed: its snapshot holds every record of an earlier holder,
	// whose later writes the new generation fences (FOR UPDATE reads the
	// newest row, not the newest records).
	var states map[key]journal.ItemState
	var burned map[key]int64
	var before map[int64]bool
	err = c.retry(ctx, deadline, func(ctx context.Context) (err error) {
		if states, burned, err = c.fold(ctx, keys); err != nil {
			return err
		}
		before, err = c.seenAtStart(ctx, burned)
		return err
	})
	if err != nil {
		return nil, 0, c.Wrap("claim", err)
	}
	out := make([]refund.Claimed, len(keys))
	c.Mu.Lock()
	for i, k := range keys {
		st, known := states[k]
		c.Held[k].State, c.Held[k].Known = st, known
		out[i] = refund.Claimed{Batch: k.Batch, Item: k.Item, State: st, Known: known,
			BurnedInRun: st.KeyBurned && !before[burned[k]]}
	}
	c.Mu.Unlock()
	return out, 0, nil
}

// seenAtStart says which key-burning records (by sequence) this run's start
// saw committed: the 500s --resend-after-500 may send anew.
func (c *Checkpoint) seenAtStart(ctx context.Context, burned map[key]int64) (map[int64]bool, error) {
	before := map[int64]bool{}
	if len(burned) == 0 {
		return before, nil
	}
	var seq int64
	err := each(ctx, c.pool, `SELECT seq FROM refundkit.records
		WHERE seq = ANY($1) AND (xact IS NULL OR pg_visible_in_snapshot(xact, $2::pg_snapshot))`, []any{slices.Collect(maps.Values(burned)), c.startSnap},
		[]any{&seq}, func() error {
			before[seq] = true
			return nil
		})
	return before, err
}

// waitForOthers is how long to wait when nothing was claimable: 0 when no
// open item is left for any run, else 50 to 250 ms.
func (c *Checkpoint) waitForOthers(ctx context.Context, batches []string, retryHeld bool, doneB, doneI []string) (time.Duration, error) {
	var left bool
	err := c.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM refundkit.items
		WHERE batch = ANY($1) AND (status NOT IN ('refunded', 'duplicate', 'failed') OR held) AND ($2 OR NOT held)
		  AND (batch, item) NOT IN (SELECT * FROM unnest($3::text[], $4::text[])))
	OR EXISTS (SELECT 1 FROM refundkit.items i
		WHERE i.batch = ANY($1) AND i.status NOT IN ('refunded', 'duplicate', 'failed') AND NOT i.held
		  AND (i.claimed_by <> $5 AND i.lease_until > clock_timestamp()
		    OR EXISTS (SELECT 1 FROM refundkit.workers w
		      WHERE w.worker <> $5 AND w.stopped_at IS NULL AND w.last_seen > clock_timestamp() - $6::interval
		        AND i.batch = ANY(w.batches) AND NOT w.worker = ANY(i.released_by))))`,
		batches, retryHeld, doneB, doneI, c.Worker, c.Lease().String()).Scan(&left)
	if err != nil {
		return 0, err
	}
	if !left {
		return 0, nil
	}
	return c.PollWait(), nil
}

func (c *Checkpoint) renewClaim(ctx context.Context, k key, cl *claim) (start time.Time, lost string, err error) {
	c.Mu.Lock()
	gen, payments := cl.gen, cl.payments
	c.Mu.Unlock()
	until := c.LeaseEnd(cl)
	var claims, locks int
	for try := 0; ; try++ {
		start = time.Now()
		err := c.pool.QueryRow(ctx, `WITH locks AS (
			UPDATE refundkit.payment_locks SET lease_until = clock_timestamp() + $5::interval
			WHERE batch = $1 AND item = $2 AND worker = $3 AND claim_gen = $4 RETURNING 1
		), claim AS (
			UPDATE refundkit.items SET lease_until = clock_timestamp() + $5::interval
			WHERE batch = $1 AND item = $2 AND claimed_by = $3 AND claim_gen = $4 RETURNING 1
		)
		SELECT (SELECT count(*) FROM claim), (SELECT count(*) FROM locks)`, k.Batch, k.Item, c.Worker, gen, c.Lease().String()).Scan(&claims, &locks)
		if err == nil {
			c.answered()
			break
		}
		// The database away (a restart): asked again while the lease may
		// last; the renewal is fenced, and the same again changes nothing.
		if unreachable(err) && ctx.Err() == nil && time.Now().Before(until) {
			c.Unanswered(err)
			try--
			select {
			case <-time.After(min(c.PollWait(), time.Until(until))):
			case <-ctx.Done():
			}
			continue
		}
		// A deadlock with another worker taking payment locks, or a lock
		// held a moment: ask again, a few times, before halting.
		if !transient(err) || try >= 2 {
			return start, "", c.Wrap("renew claim", err)
		}
	}
	switch {
	case claims == 0:
		return start, leaseTaken, nil
	case locks < payments:
		return start, "the lease of its payment's lock ran out and another item of the payment took it (was this worker paused, or cut off from the database?)", nil
	}
	return start, "", nil
}

// LockPayments takes the locks of an item's payment keys, all or none, and
// waits while another item holds one; a lock whose lease ran out, or an
// earlier claim of the same item left, is taken over.
func (c *Checkpoint) LockPayments(ctx context.Context, batch, item string, keys []string) (func(), error) {
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	k := key{Batch: batch, Item: item}
	err := c.Await(ctx, func() error { return c.Holds(ctx, batch, item) }, func() (bool, error) {
		c.Mu.Lock()
		var gen int64
		if cl := c.Held[k]; cl != nil {
			gen = cl.gen
		}
		c.Mu.Unlock()
		got, err := c.tryPayments(ctx, k, gen, keys)
		if unreachable(err) && ctx.Err() == nil {
			// The database away: asked again while Holds says the
			// claim may last. Taking a lock again is the same lock.
			c.Unanswered(err)
			return false, nil
		}
		return got, c.Wrap("lock payment", err)
	})
	if err != nil {
		return nil, err
	}
	c.Mu.Lock()
	var gen int64
	if cl := c.Held[k]; cl != nil {
		cl.payments, gen = len(keys), cl.gen
	}
	c.Mu.Unlock()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.Lease())
		defer cancel()
		// A failure only leaves the locks to run out with their lease.
		c.pool.Exec(ctx, `DELETE FROM refundkit.payment_locks WHERE payment = ANY($1) AND batch = $2 AND item = $3 AND worker = $4 AND claim_gen = $5`,
			keys, batch, item, c.Worker, gen)
		c.Mu.Lock()
		if cl := c.Held[k]; cl != nil {
			cl.payments = 0
		}
		c.Mu.Unlock()
	}, nil
}

// tryPayments takes every lock of keys for k, or none.
func (c *Checkpoint) tryPayments(ctx context.Context, k key, gen int64, keys []string) (bool, error) {
	const take = `INSERT INTO refundkit.payment_locks AS l (payment, batch, item, worker, claim_gen, lease_until)
		SELECT p, $2, $3, $4, $6, clock_timestamp() + $5::interval FROM unnest($1::text[]) AS p
		ON CONFLICT (payment) DO UPDATE SET batch = EXCLUDED.batch, item = EXCLUDED.item,
			worker = EXCLUDED.worker, claim_gen = EXCLUDED.claim_gen, lease_until = EXCLUDED.lease_until
		WHERE l.lease_until < clock_timestamp()
		   OR (l.batch = EXCLUDED.batch AND l.item = EXCLUDED.item AND l.claim_gen <= EXCLUDED.claim_gen)`
	takeAll := func(q querier) (bool, error) {
		tag, err := q.Exec(ctx, take, keys, k.Batch, k.Item, c.Worker, c.Lease().String(), gen)
		return err == nil && tag.RowsAffected() == int64(len(keys)), err
	}
	if len(keys) == 1 {
		// One lock (a charge, a capture, a psp_reference): one statement is all or none,
		// in one round trip.
		got, err := takeAll(c.pool)
		if transient(err) {
			return false, nil
		}
		return got, err
	}
	got := false
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) (err error) {
		if got, err = takeAll(tx); err == nil && !got {
			return errNotAll // rolls back the ones taken
		}
		return err
	})
	if errors.Is(err, errNotAll) || transient(err) {
		return false, nil // not all free, a deadlock with another taker, or a lock wait too long: try again
	}
	return got, err
}

// transient reports a deadlock (40P01) or a lock wait past lock_timeout
// (55P03): the statement may well succeed if asked again.
func transient(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "55P03")
}

var errNotAll = errors.New("not every payment lock was free")

// leaseTaken is why a claim whose generation moved on is lost.
const leaseTaken = "its lease ran out and another worker took it (was this worker paused, or cut off from the database?)"

// Release ends this run's claim of an item, fenced by its generation, and
// keeps the item's status as its records say.
func (c *Checkpoint) Release(ctx context.Context, batch, item string) error {
	k := key{Batch: batch, Item: item}
	c.Mu.Lock()
	cl := c.Held[k]
	delete(c.Held, k)
	var status string
	var held bool
	if cl != nil {
		status, held = statusOf(cl.State)
	}
	if cl == nil || !settled(status, held) {
		// Settled items are no one's to claim; the rest only this run
		// leaves alone, so the list every claim sends stays short.
		c.Left[k] = 0
	}
	c.Mu.Unlock()
	if cl == nil || cl.wrote && settled(status, held) {
		return nil // its settling record ended the claim
	}
	// An item given back unsettled names its releaser: the other workers
	// of the batch wait for this one to take it only while it has not.
	err := c.retryLease(ctx, func(ctx context.Context) error {
		_, err := c.pool.Exec(ctx, `UPDATE refundkit.items SET claimed_by = NULL, lease_until = NULL, status = $5, held = $6,
			released_by = CASE WHEN $7 OR $3 = ANY(released_by) THEN released_by ELSE array_append(released_by, $3) END
		WHERE batch = $1 AND item = $2 AND claimed_by = $3 AND claim_gen = $4`, batch, item, c.Worker, cl.gen, status, held, settled(status, held))
		return err
	})
	return c.Wrap("release claim", err)
}

// heldArrays is this run's claims as a statement's unnest arrays; Mu held.
func (c *Checkpoint) heldArrays() (batches, items []string, gens []int64) {
	for k, cl := range c.Held {
		batches, items, gens = append(batches, k.Batch), append(items, k.Item), append(gens, cl.gen)
	}
	return batches, items, gens
}

// renew extends the leases of every claim this run holds, in one statement.
func (c *Checkpoint) renew(ctx context.Context) {
	c.Mu.Lock()
	batches, items, gens := c.heldArrays()
	c.Mu.Unlock()
	start := time.Now()
	// Only the claims this run holds, and their payments' locks: a lock
	// whose unlock failed, or a process of the same name's, is not kept
	// alive by this one.
	rows, err := c.pool.Query(ctx, `WITH alive AS (
		UPDATE refundkit.workers SET last_seen = clock_timestamp() WHERE worker = $1 AND started_at = $6
	), locks AS (
		UPDATE refundkit.payment_locks l SET lease_until = clock_timestamp() + $5::interval
		FROM unnest($2::text[], $3::text[], $4::bigint[]) AS h(batch, item, gen)
		WHERE l.batch = h.batch AND l.item = h.item AND l.worker = $1 AND l.claim_gen = h.gen
		RETURNING l.batch, l.item
	), claims AS (
		UPDATE refundkit.items i SET lease_until = clock_timestamp() + $5::interval
		FROM unnest($2::text[], $3::text[], $4::bigint[]) AS h(batch, item, gen)
		WHERE i.batch = h.batch AND i.item = h.item AND i.claimed_by = $1 AND i.claim_gen = h.gen
		RETURNING i.batch, i.item, i.claim_gen
	)
	SELECT c.batch, c.item, c.claim_gen, (SELECT count(*) FROM locks l WHERE l.batch = c.batch AND l.item = c.item)
	FROM claims c`, c.Worker, batches, items, gens, c.Lease().String(), c.started)
	if err != nil {
		return
	}
	type renewal struct {
		gen   int64
		locks int
	}
	renewed := map[key]renewal{}
	for rows.Next() {
		var k key
		var r renewal
		if rows.Scan(&k.Batch, &k.Item, &r.gen, &r.locks) == nil {
			renewed[k] = r
		}
	}
	if rows.Err() != nil {
		return
	}
	c.Mu.Lock()
	defer c.Mu.Unlock()
	for i := range items {
		k := key{Batch: batches[i], Item: items[i]}
		cl := c.Held[k]
		if cl == nil || cl.gen != gens[i] {
			continue // released meanwhile
		}
		if r, ok := renewed[k]; ok && r.gen == cl.gen && r.locks >= cl.payments {
			cl.Deadline = start.Add(c.Margin())
		} else {
			cl.Deadline = time.Time{} // lost: Holds asks the database, and fails
		}
	}
}

// Load binds the plan to the checkpoint, batch by batch, under a lock per
// batch so that workers starting together load it once.
func (c *Checkpoint) Load(ctx context.Context, plan []refund.PlanLine) error {
	order, err := checkpoint.LoadBatches(plan, func(b string, lines []refund.PlanLine) error { return c.loadBatch(ctx, b, lines) })
	if err != nil {
		return err
	}
	if c.Renewing() {
		// The batches this worker works on: the others of a batch wait
		// for it while it may still take an item they gave back.
		if _, err := c.pool.Exec(ctx, `UPDATE refundkit.workers SET batches = $3 WHERE worker = $1 AND started_at = $2`,
			c.Worker, c.started, order); err != nil {
			return c.Wrap("register worker", err)
		}
	}
	c.Mu.Lock()
	c.batches = order
	c.Mu.Unlock()
	return nil
}

// loadedPlan is what the checkpoint says of a batch's plan.
type loadedPlan struct {
	digest   []byte
	items    int64
	loadedAt time.Time
	loadedBy string
}

func (lp loadedPlan) String() string {
	return fmt.Sprintf("loaded %s by %s, %d items", lp.loadedAt.UTC().Format(time.RFC3339), lp.loadedBy, lp.items)
}

var _ refund.Claims = (*Checkpoint)(nil)

// settled reports a status the claim query passes over: an item refunded,
// or failed for good and not held.
func settled(status string, held bool) bool {
	return status == "refunded" || status == checkpoint.Duplicate || status == "failed" && !held
}
