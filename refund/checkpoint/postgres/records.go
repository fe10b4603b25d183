package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/checkpoint"
)

// Append writes recs, each of a held item, in one transaction, each line
// fenced by its claim's generation.
func (c *Checkpoint) Append(recs ...*journal.Record) error {
	if !c.Renewing() {
		return newError("append", fmt.Errorf("the checkpoint was opened for reading only"))
	}
	type write struct {
		k        key
		gen      int64
		lines    []string
		next     journal.ItemState
		payments int
	}
	var writes []*write
	c.Mu.Lock()
	for _, r := range recs {
		k := key{Batch: r.Batch, Item: r.Item}
		cl, err := c.HeldClaim(k)
		if err != nil {
			c.Mu.Unlock()
			return err
		}
		line, err := journal.MarshalLine(nil, r)
		if err != nil {
			c.Mu.Unlock()
			return newError("append", err)
		}
		i := slices.IndexFunc(writes, func(w *write) bool { return w.k == k })
		if i < 0 {
			i, writes = len(writes), append(writes, &write{k: k, gen: cl.gen, next: cl.State, payments: cl.payments})
		}
		w := writes[i]
		w.lines = append(w.lines, string(line[:len(line)-1]))
		w.next = journal.Next(w.next, r)
	}
	c.Mu.Unlock()

	// One statement per item: the fence (the claim still this run's, by
	// worker and generation) and the insert together, so a lost claim
	// writes nothing.
	const stmt = `WITH fence AS (
		UPDATE refundkit.items SET status = $5, held = $6,
			-- A settled item is no one's to claim: its claim ends with
			-- the record that settles it, whatever becomes of its holder.
			claimed_by = CASE WHEN $9 THEN NULL ELSE claimed_by END,
			lease_until = CASE WHEN $9 THEN NULL ELSE clock_timestamp() + $7::interval END
		-- The generation is the fence: no one else claimed the item since
		-- (a record that settled it may have ended the claim: more records
		-- of it, a second refund found, may follow).
		WHERE batch = $1 AND item = $2 AND claim_gen = $4 AND (claimed_by = $3 OR claimed_by IS NULL)
		  -- and the locks of its payment are still the writer's
		  AND $10 <= (SELECT count(*) FROM refundkit.payment_locks WHERE batch = $1 AND item = $2 AND worker = $3 AND claim_gen = $4)
		RETURNING 1
	), c AS (SELECT nextval('refundkit.commits') AS id FROM fence)
	INSERT INTO refundkit.records (commit_id, batch, item, claim_gen, worker, rec)
	SELECT c.id, $1, $2, $4, $3, r.line FROM c, unnest($8::text[]) WITH ORDINALITY AS r(line, n) ORDER BY r.n`
	// A write that cannot commit within a lease (a lock held elsewhere,
	// a database that stopped answering) halts the run, the item in doubt.
	ctx, cancel := context.WithTimeout(context.Background(), c.Lease())
	defer cancel()
	exec := func(ctx context.Context, q querier, w *write) error {
		status, held := statusOf(w.next)
		tag, err := q.Exec(ctx, stmt, w.k.Batch, w.k.Item, c.Worker, w.gen, status, held, c.Lease().String(), w.lines, settled(status, held), w.payments)
		if err == nil && tag.RowsAffected() != int64(len(w.lines)) {
			err = &refund.LostClaimError{Batch: w.k.Batch, Item: w.k.Item, Why: leaseTaken}
		}
		return err
	}
	send := func(ctx context.Context) error {
		if len(writes) == 1 {
			return exec(ctx, c.pool, writes[0]) // one statement commits by itself: one round trip
		}
		return pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
			for _, w := range writes {
				if err := exec(ctx, tx, w); err != nil {
					return err
				}
			}
			return nil
		})
	}
	// Through a restart of the database, sent again while the claims'
	// leases may last, fenced as ever. A write whose connection dropped
	// may have committed: its last line is looked for first.
	until := c.leaseEnd(writes[0].k)
	for _, w := range writes[1:] {
		if end := c.leaseEnd(w.k); end.Before(until) {
			until = end
		}
	}
	uncertain := false
	last := writes[len(writes)-1]
	err := c.retry(ctx, until, func(ctx context.Context) error {
		if uncertain {
			done, err := c.appended(ctx, last.k, last.gen, last.lines[len(last.lines)-1])
			if err != nil || done {
				return err
			}
			uncertain = false // not committed: sent again
		}
		err := send(ctx)
		uncertain = unreachable(err) && !pgconn.SafeToRetry(err)
		return err
	})
	if errors.Is(err, context.DeadlineExceeded) && len(writes) == 1 {
		// A lease went by with the write unfinished (a worker paused
		// mid-write, a lock held elsewhere): the claim may be another's.
		err = &refund.LostClaimError{Batch: writes[0].k.Batch, Item: writes[0].k.Item, Why: "a write of it did not finish within a lease (was this worker paused, or cut off from the database?)"}
	}
	var lost *refund.LostClaimError
	if errors.As(err, &lost) {
		c.Drop(key{Batch: lost.Batch, Item: lost.Item})
	}
	if err != nil {
		return c.Wrap("append", err)
	}
	c.Mu.Lock()
	for _, w := range writes {
		if cl := c.Held[w.k]; cl != nil && cl.gen == w.gen {
			cl.State, cl.Known, cl.wrote = w.next, true, true
		}
	}
	c.Written.Records += int64(len(recs))
	c.Written.Fsyncs++
	c.Mu.Unlock()
	return nil
}

// statusOf is what the items table keeps of an item's state: its status,
// and whether a failure is a hold that --allow-refunded-charges lifts.
func statusOf(st journal.ItemState) (string, bool) {
	return checkpoint.StatusName(st), st.Status == journal.StatusFailed && refund.IsHold(st.Code)
}

// Lookup returns what the checkpoint holds of an item: its claim's state
// when this run holds it, else what its records say now.
func (c *Checkpoint) Lookup(batch, item string) (journal.ItemState, bool, error) {
	if st, known, ok := c.HeldState(key{Batch: batch, Item: item}); ok {
		return st, known, nil
	}
	c.Mu.Lock()
	if c.empty {
		c.Mu.Unlock()
		return journal.ItemState{}, false, nil
	}
	if !c.Renewing() {
		// Read only (a dry run): the batch as it stands, loaded once.
		defer c.Mu.Unlock()
		state := c.states[batch]
		if state == nil {
			var err error
			if state, err = foldBatch(context.Background(), c.pool, batch); err != nil {
				return journal.ItemState{}, false, c.Wrap("lookup", err)
			}
			c.states[batch] = state
		}
		st, ok := state.Lookup(batch, item)
		return st, ok, nil
	}
	c.Mu.Unlock()
	// A worker asks of an item it does not hold (a sibling on its charge):
	// what the records say now.
	var states map[key]journal.ItemState
	err := c.retryLease(context.Background(), func(ctx context.Context) (err error) {
		states, _, err = c.fold(ctx, []key{{Batch: batch, Item: item}})
		return err
	})
	if err != nil {
		return journal.ItemState{}, false, c.Wrap("lookup", err)
	}
	st, ok := states[key{Batch: batch, Item: item}]
	return st, ok, nil
}

// foldBatch folds every record of batch into a journal.State: one query.
func foldBatch(ctx context.Context, q querier, batch string) (*journal.State, error) {
	state := journal.NewState()
	err := eachRecord(ctx, q, `SELECT seq, batch, item, rec FROM refundkit.records WHERE batch = $1 ORDER BY seq`, []any{batch},
		func(_ int64, _ key, rec *journal.Record) { state.Apply(rec) })
	return state, err
}

// fold reads the records of items and folds each item's into its state; items
// without records are absent.
func (c *Checkpoint) fold(ctx context.Context, items []key) (states map[key]journal.ItemState, burned map[key]int64, err error) {
	batches, names := make([]string, len(items)), make([]string, len(items))
	for i, k := range items {
		batches[i], names[i] = k.Batch, k.Item
	}
	states, burned = map[key]journal.ItemState{}, map[key]int64{}
	err = eachRecord(ctx, c.pool, `SELECT r.seq, r.batch, r.item, r.rec FROM refundkit.records r
		JOIN unnest($1::text[], $2::text[]) AS k(batch, item) ON r.batch = k.batch AND r.item = k.item
		ORDER BY r.seq`, []any{batches, names}, func(seq int64, k key, rec *journal.Record) {
		was := states[k]
		states[k] = journal.Next(was, rec)
		if states[k].KeyBurned && !was.KeyBurned {
			burned[k] = seq
		}
	})
	return states, burned, err
}

// eachRecord runs sql, whose rows are a number (a record's seq), a batch, an
// item and a record's line, and hands fn each row with its record decoded.
func eachRecord(ctx context.Context, q querier, sql string, args []any, fn func(seq int64, k key, rec *journal.Record)) error {
	var seq int64
	var k key
	var line string
	var rec journal.Record
	return each(ctx, q, sql, args, []any{&seq, &k.Batch, &k.Item, &line}, func() error {
		if err := journal.DecodeLine([]byte(line), line, &rec); err != nil {
			return &CorruptError{Batch: k.Batch, Item: k.Item, Err: err}
		}
		fn(seq, k, &rec)
		return nil
	})
}

// CorruptError is a record in the checkpoint that is not a valid journal
// line: something other than refundkit wrote it.
type CorruptError struct {
	Batch, Item string
	Err         error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("postgres checkpoint: a record of item %q of batch %q is corrupt: %v", e.Item, e.Batch, e.Err)
}
func (e *CorruptError) Unwrap() error { return e.Err }
