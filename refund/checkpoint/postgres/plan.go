package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/checkpoint"
)

// loadBatch stores a batch's plan or checks it against the one stored, and
// checks its lines against the records held of them (checkLines), which
// bind their items as a file journal's do.
func (c *Checkpoint) loadBatch(ctx context.Context, batch string, lines []refund.PlanLine) error {
	docs, digest, err := refund.PlanDocs(lines)
	if err != nil {
		return err
	}
	if !c.Renewing() {
		// Read only (a dry run): compare with the plan stored, if any.
		if c.empty {
			return nil
		}
		lp, err := storedPlan(ctx, c.pool, batch)
		switch {
		case errors.Is(err, pgx.ErrNoRows), err == nil && bytes.Equal(lp.digest, digest):
			return c.checkStored(ctx, batch, lines)
		case err != nil:
			return c.Wrap("check plan of batch "+batch, err)
		}
		return c.wrapInput("check plan of batch "+batch, planDiffers(ctx, c.pool, batch, lines, docs, lp))
	}
	stored := false // the plan was stored before: checked outside the batch's lock
	err = pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "refundkit.batch:"+batch); err != nil {
			return err
		}
		lp, err := storedPlan(ctx, tx, batch)
		if errors.Is(err, pgx.ErrNoRows) {
			// Records imported before the plan (journal-merge -o) must
			// agree with it, and give their items a status now.
			state, err := foldBatch(ctx, tx, batch)
			if err != nil {
				return err
			}
			if err := checkLines(batch, lines, state); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO refundkit.batches (batch, plan_digest, items, loaded_by) VALUES ($1, $2, $3, $4)`,
				batch, digest, len(lines), c.Worker); err != nil {
				return err
			}
			_, err = tx.CopyFrom(ctx, pgx.Identifier{"refundkit", "items"}, []string{"batch", "item", "line", "plan"},
				pgx.CopyFromSlice(len(lines), func(i int) ([]any, error) {
					return []any{batch, lines[i].Item.Item, int64(lines[i].Line), docs[i]}, nil
				}))
			if err != nil {
				return err
			}
			return restatus(ctx, tx, []string{batch}, state)
		}
		if err != nil {
			return err
		}
		if bytes.Equal(lp.digest, digest) {
			stored = true // the same plan: loaded already
			return nil
		}
		return planDiffers(ctx, tx, batch, lines, docs, lp)
	})
	if err == nil && stored {
		// Its records were checked when they went in (by the engine as
		// each item was claimed, by Import) unless an earlier build wrote
		// them: checked again, without holding up the workers starting.
		return c.checkStored(ctx, batch, lines)
	}
	return c.wrapInput("load plan of batch "+batch, err)
}

// storedPlan is what the checkpoint says of batch's plan.
func storedPlan(ctx context.Context, q querier, batch string) (lp loadedPlan, err error) {
	err = q.QueryRow(ctx, `SELECT plan_digest, items, loaded_at, loaded_by FROM refundkit.batches WHERE batch = $1`, batch).
		Scan(&lp.digest, &lp.items, &lp.loadedAt, &lp.loadedBy)
	return lp, err
}

// checkStored checks lines of batch against the records the checkpoint holds
// of them (checkLines), in one query.
func (c *Checkpoint) checkStored(ctx context.Context, batch string, lines []refund.PlanLine) error {
	state, err := foldBatch(ctx, c.pool, batch)
	if err != nil {
		return c.Wrap("check plan of batch "+batch, err)
	}
	if !c.Renewing() {
		c.Mu.Lock()
		c.states[batch] = state
		c.Mu.Unlock()
	}
	return checkLines(batch, lines, state)
}

// checkLines checks each line of batch against its item's records
// (refund.CheckBinding): the first that differs is an *refund.InputError.
func checkLines(batch string, lines []refund.PlanLine, state *journal.State) error {
	for _, pl := range lines {
		st, ok := state.Lookup(batch, pl.Item.Item)
		if !ok {
			continue
		}
		if err := refund.CheckBinding(pl.Item, st); err != nil {
			return &refund.InputError{Line: pl.Line, Err: err}
		}
		// One refund credited to two items of the batch (records an
		// earlier build imported): the later is not done, whatever its
		// records say, and nothing is sent for it.
		if fb, fi, shared := state.SharedRefund(st.Refund, batch, pl.Item.Item); shared && st.Refund != "" {
			return &refund.InputError{Line: pl.Line, Err: fmt.Errorf("item %q of batch %q: the checkpoint credits refund %s to it and, first, to item %q of batch %q: one refund refunds one item at most, so the records cannot all be true; nothing is sent for it until a person checks the refund at the provider (audit shows both)", pl.Item.Item, batch, st.Refund, fi, fb)}
		}
	}
	return nil
}

// checkPlans checks, in one query, the items state holds records of against
// their stored plan lines (refund.CheckBinding): the first that differs is
// an *refund.InputError at the line lines gives (none when nil).
func checkPlans(ctx context.Context, q querier, batches []string, state *journal.State, name string, lines map[key]int) error {
	var batch, item, doc string
	var planLine int64
	return each(ctx, q, `SELECT batch, item, line, plan FROM refundkit.items WHERE batch = ANY($1) ORDER BY batch, line`, []any{batches},
		[]any{&batch, &item, &planLine, &doc}, func() error {
			st, ok := state.Lookup(batch, item)
			if !ok {
				return nil
			}
			var it refund.Item
			if err := json.Unmarshal([]byte(doc), &it); err != nil {
				return fmt.Errorf("item %q of batch %q: the plan stored does not decode: %w", item, batch, err)
			}
			if err := refund.CheckBinding(&it, st); err != nil {
				return &refund.InputError{Name: name, Line: lines[key{Batch: batch, Item: item}],
					Err: fmt.Errorf("these records disagree with line %d of the plan the checkpoint stores for batch %q: %w", planLine, batch, err)}
			}
			return nil
		})
}

// planDiffers finds what differs between lines and the plan stored for
// batch, and says so as an *InputError at the line of the item.
func planDiffers(ctx context.Context, tx querier, batch string, lines []refund.PlanLine, docs []string, lp loadedPlan) error {
	have := map[string]checkpoint.Stored{}
	var item string
	var st checkpoint.Stored
	if err := each(ctx, tx, `SELECT item, line, plan FROM refundkit.items WHERE batch = $1`, []any{batch}, []any{&item, &st.Line, &st.Plan}, func() error {
		have[item] = st
		return nil
	}); err != nil {
		return err
	}
	if err := checkpoint.PlanDiffers(batch, lines, docs, lp, have); err != nil {
		return err
	}
	return fmt.Errorf("plan of batch %q: the digest differs but every item is the same (a checkpoint written by another build?)", batch)
}

// each runs sql and calls fn with each row scanned into scans.
func each(ctx context.Context, q querier, sql string, args, scans []any, fn func() error) error {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	_, err = pgx.ForEachRow(rows, scans, fn)
	return err
}

// querier is a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}
