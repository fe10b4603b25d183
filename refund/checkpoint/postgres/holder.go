package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// Holder returns the item whose records credit it with refund id, the
// first one to when, against the rule, several do: what every worker has
// committed, so that a refund one worker credited is never credited to
// another item by another.
func (c *Checkpoint) Holder(id string) (batch, item string, ok bool, err error) {
	if c.empty || id == "" {
		return "", "", false, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.Lease())
	defer cancel()
	err = c.retry(ctx, time.Now().Add(c.Lease()), func(ctx context.Context) error {
		return c.pool.QueryRow(ctx, `SELECT batch, item FROM refundkit.records
			WHERE rec::jsonb->>'type' = 'refunded' AND rec::jsonb->>'refund' = $1
			ORDER BY seq LIMIT 1`, id).Scan(&batch, &item)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", false, nil
	}
	if err != nil {
		return "", "", false, c.Wrap("holder", err)
	}
	return batch, item, true, nil
}
