package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
)

// loadBatch stores the plan of one batch, or checks it against the one
// stored; either way every line whose item the checkpoint holds records of
// is checked against the state they fold to (checkLines): records imported
// before the plan, or written under it by an earlier build, bind their
// items as a file journal's do.
func (c *Checkpoint) loadBatch(ctx context.Context, batch string, lines []refund.PlanLine) error {
	docs, digest, err := refund.PlanDocs(lines)
	if err != nil {
		return err
	}
	if c.stopRenew == nil {
		// Read only (a dry run): compare with the plan stored, if any.
		if c.empty {
			return nil
		}
		var lp loadedPlan
		err := c.pool.QueryRow(ctx, `SELECT plan_digest, items, loaded_at, loaded_by FROM refundkit.batches WHERE batch = $1`, batch).
			Scan(&lp.digest, &lp.items, &lp.loadedAt, &lp.loadedBy)
		switch {
		case errors.Is(err, pgx.ErrNoRows), err == nil && bytes.Equal(lp.digest, digest):
			return c.checkStored(ctx, batch, lines)
		case err != nil:
			return c.wrap("check plan of batch "+batch, err)
		}
		err = planDiffers(ctx, c.pool, batch, lines, docs, lp)
		if _, ok := err.(*refund.InputError); ok {
			return err
		}
		return c.wrap("check plan of batch "+batch, err)
	}
	stored := false // the plan was stored before: checked outside the batch's lock
	err = c.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "refundkit.batch:"+batch); err != nil {
			return err
		}
		var lp loadedPlan
		err := tx.QueryRow(ctx, `SELECT plan_digest, items, loaded_at, loaded_by FROM refundkit.batches WHERE batch = $1`, batch).
			Scan(&lp.digest, &lp.items, &lp.loadedAt, &lp.loadedBy)
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
				batch, digest, len(lines), c.worker); err != nil {
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
	if _, ok := err.(*refund.InputError); ok {
		return err
	}
	return c.wrap("load plan of batch "+batch, err)
}

// checkStored checks lines of batch against the records the checkpoint
// holds of them (checkLines), in one query. A read-only checkpoint keeps
// the state for Lookup.
func (c *Checkpoint) checkStored(ctx context.Context, batch string, lines []refund.PlanLine) error {
	state, err := foldBatch(ctx, c.pool, batch)
	if err != nil {
		return c.wrap("check plan of batch "+batch, err)
	}
	if c.stopRenew == nil {
		c.mu.Lock()
		c.states[batch] = state
		c.mu.Unlock()
	}
	return checkLines(batch, lines, state)
}

// checkLines checks every plan line of batch whose item state holds
// records of against what they bind it to, with refund.CheckBinding (the
// one check, as the engine makes it of a file journal's items): the first
// that differs, in plan order, is an *refund.InputError at its line.
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

// planDiffers finds what differs between lines and the plan stored for
// batch, and says so as an *InputError at the line of the item.
func planDiffers(ctx context.Context, tx querier, batch string, lines []refund.PlanLine, docs []string, lp loadedPlan) error {
	rows, err := tx.Query(ctx, `SELECT item, line, plan FROM refundkit.items WHERE batch = $1`, batch)
	if err != nil {
		return err
	}
	type stored struct {
		line int64
		plan string
	}
	have := map[string]stored{}
	for rows.Next() {
		var item string
		var s stored
		if err := rows.Scan(&item, &s.line, &s.plan); err != nil {
			rows.Close()
			return err
		}
		have[item] = s
	}
	if err := rows.Err(); err != nil {
		return err
	}
	const hint = "; the checkpoint holds one plan per batch: feed every worker the same plan, or plan the change under a new batch name"
	for i, pl := range lines {
		s, ok := have[pl.Item.Item]
		if !ok {
			return &refund.InputError{Line: pl.Line, Err: fmt.Errorf("item %q is not in the plan of batch %q in the checkpoint (%s)%s", pl.Item.Item, batch, lp, hint)}
		}
		if s.plan != docs[i] {
			return &refund.InputError{Line: pl.Line, Err: fmt.Errorf("item %q of batch %q differs from the plan in the checkpoint (%s): %s%s", pl.Item.Item, batch, lp, refund.FieldsDiffer(pl.Item, s.plan), hint)}
		}
		delete(have, pl.Item.Item)
	}
	missing := slices.SortedFunc(maps.Keys(have), func(a, b string) int { return int(have[a].line - have[b].line) })
	if len(missing) > 0 {
		return &refund.InputError{Err: fmt.Errorf("item %q of batch %q (line %d of the plan in the checkpoint, %s) is missing from this plan, and %d more%s", missing[0], batch, have[missing[0]].line, lp, len(missing)-1, hint)}
	}
	return fmt.Errorf("plan of batch %q: the digest differs but every item is the same (a checkpoint written by another build?)", batch)
}

// querier is a pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}
