package postgres

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund"

	"github.com/refundkit/refundkit/refund/checkpoint/postgres/pgtest"
)

// A refund one worker credited is found by another: refundkit never
// credits it to a second item (refund.Checkpoint.Holder).
func TestHolderFindsTheItemAnotherWorkerCredited(t *testing.T) {
	url := pgtest.NewDB(t)
	ctx := context.Background()
	a, b := open(t, url, "a", time.Minute), open(t, url, "b", time.Minute)
	plan := planOf("b1", 2, 100)
	for _, c := range []*Checkpoint{a, b} {
		if err := c.Load(ctx, plan); err != nil {
			t.Fatal(err)
		}
	}
	got, _, err := a.Claim(ctx, 1, false)
	if err != nil || len(got) != 1 {
		t.Fatalf("a's claim: %+v, %v", got, err)
	}
	if _, _, held, err := b.Holder("re_1"); err != nil || held {
		t.Fatalf("before any refund: held %v, %v", held, err)
	}
	if err := a.Append(intent(plan[0].Item, 1), refunded(plan[0].Item, "re_1")); err != nil {
		t.Fatal(err)
	}
	batch, item, held, err := b.Holder("re_1")
	if err != nil || !held || batch != "b1" || item != "i1" {
		t.Fatalf("b asks who holds re_1: %q %q %v %v; want b1 i1", batch, item, held, err)
	}
	if _, _, held, err := b.Holder("re_2"); err != nil || held {
		t.Fatalf("another refund: held %v, %v", held, err)
	}
	// The index the look-up uses exists, so that the question costs one
	// index probe, not a scan of every record.
	var def string
	if err := b.pool.QueryRow(ctx, `SELECT indexdef FROM pg_indexes WHERE schemaname = 'refundkit' AND indexname = 'records_refund'`).Scan(&def); err != nil {
		t.Fatalf("records_refund index: %v", err)
	}
}

// An import that credits an item with a refund the checkpoint credits to
// an item of another batch is refused, and imports nothing.
func TestImportOfARefundAnotherBatchHoldsIsRefused(t *testing.T) {
	url := pgtest.NewDB(t)
	c := open(t, url, "a", time.Minute)
	first := planOf("b1", 1, 100)[0].Item
	if _, _, err := c.Import(context.Background(), bytes.NewReader(journalOf(t, intent(first, 1), refunded(first, "re_1"))), "first", 0); err != nil {
		t.Fatal(err)
	}
	second := planOf("b2", 1, 100)[0].Item
	var last int64
	if err := c.pool.QueryRow(context.Background(), `SELECT max(seq) FROM refundkit.records`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	_, _, err := c.Import(context.Background(), bytes.NewReader(journalOf(t, intent(second, 1), refunded(second, "re_1"))), "second", last)
	var ie *refund.InputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), `which the checkpoint credits to item "i1" of batch "b1"`) {
		t.Fatalf("import of b2's item credited with b1's refund: %v", err)
	}
	if n := count(t, c, `SELECT count(*) FROM refundkit.records WHERE batch = 'b2'`); n != 0 {
		t.Errorf("the refused import wrote %d records", n)
	}
}

// An import whose records credit one refund to two items (the merge of
// the whole checkpoint that journal-merge -o imports) is refused, and
// imports nothing.
func TestImportCreditingOneRefundToTwoItemsIsRefused(t *testing.T) {
	url := pgtest.NewDB(t)
	c := open(t, url, "a", time.Minute)
	a, b := planOf("b1", 1, 100)[0].Item, planOf("b2", 1, 100)[0].Item
	_, _, err := c.Import(context.Background(), bytes.NewReader(journalOf(t, intent(a, 1), refunded(a, "re_1"), intent(b, 1), refunded(b, "re_1"))), "the merge", 0)
	var ie *refund.InputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "refund re_1 is credited to item") {
		t.Fatalf("import crediting re_1 to two items: %v", err)
	}
	if n := count(t, c, `SELECT count(*) FROM refundkit.records`); n != 0 {
		t.Errorf("the refused import wrote %d records", n)
	}
}
