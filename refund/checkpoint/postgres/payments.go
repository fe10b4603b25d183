package postgres

import (
	"cmp"
	"context"
	"errors"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/refundkit/refundkit/journal"
)

// paymentOfRecord is the payment a record names, as migration 7's index
// records_payment keeps it: the query must say it the same way for the
// index to serve it.
const paymentOfRecord = `coalesce(rec::jsonb->>'charge', rec::jsonb->>'payment_intent', rec::jsonb->>'capture', rec::jsonb->>'psp_reference')`

// OnPayment returns the items of every batch whose records name a payment
// among keys, with their states, in commit order: another worker's item on
// the payment holds this one while the provider cannot show its refund.
func (c *Checkpoint) OnPayment(keys []string) ([]journal.PaymentItem, error) {
	if c.empty || len(keys) == 0 {
		return nil, nil
	}
	var out []journal.PaymentItem
	err := c.retryLease(context.Background(), func(ctx context.Context) (err error) {
		out, err = c.onPayment(ctx, keys)
		return err
	})
	return out, c.Wrap("items on payment", err)
}

func (c *Checkpoint) onPayment(ctx context.Context, keys []string) ([]journal.PaymentItem, error) {
	type folded struct {
		first int64
		item  journal.PaymentItem
	}
	byKey := map[key]*folded{}
	err := eachRecord(ctx, c.pool, `WITH on_payment AS (
			SELECT batch, item, min(seq) AS first FROM refundkit.records
			WHERE rec::jsonb->>'type' IN ('intent', 'refunded') AND `+paymentOfRecord+` = ANY($1)
			GROUP BY batch, item
		)
		SELECT p.first, r.batch, r.item, r.rec FROM refundkit.records r
		JOIN on_payment p ON r.batch = p.batch AND r.item = p.item
		ORDER BY r.seq`, []any{keys}, func(first int64, k key, rec *journal.Record) {
		f := byKey[k]
		if f == nil {
			f = &folded{first: first, item: journal.PaymentItem{Batch: k.Batch, Item: k.Item}}
			byKey[k] = f
		}
		f.item.State = journal.Next(f.item.State, rec)
	})
	if err != nil {
		return nil, err
	}
	all := make([]*folded, 0, len(byKey))
	for _, f := range byKey {
		all = append(all, f)
	}
	slices.SortFunc(all, func(a, b *folded) int { return cmp.Compare(a.first, b.first) })
	out := make([]journal.PaymentItem, len(all))
	for i, f := range all {
		out[i] = f.item
	}
	return out, nil
}

// Holder returns the (first) item whose records credit it with refund id,
// so that no worker credits it to another.
func (c *Checkpoint) Holder(id string) (batch, item string, ok bool, err error) {
	if c.empty || id == "" {
		return "", "", false, nil
	}
	err = c.retryLease(context.Background(), func(ctx context.Context) error {
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
