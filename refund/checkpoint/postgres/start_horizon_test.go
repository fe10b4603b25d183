package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/checkpoint/postgres/pgtest"
)

func failed500(it *refund.Item, attempt int) *journal.Record {
	return &journal.Record{V: journal.Version, Type: journal.TypeFailed, Time: time.Now().UTC(), Batch: it.Batch, Item: it.Item,
		Charge: it.Charge, Attempt: attempt, Key: refund.IdempotencyKey(it.Batch, it.Item, attempt),
		HTTPStatus: 500, Code: "api_error", Message: "an incident"}
}

// TestBurnedInRunIsByCommitNotBySequence (issue 19, suspected):
// --resend-after-500 sends a new key only for a 500 journaled before the
// worker started. A record's sequence number is drawn when it is inserted,
// not when it commits: a 500 whose transaction drew its number before
// another record's and committed after the worker started was counted as
// earlier (its number at most max(seq) read at the start), and its item
// would have been sent under a new key while the 500's own call may still
// complete. What counts is whether the worker's start saw it committed.
func TestBurnedInRunIsByCommitNotBySequence(t *testing.T) {
	url := pgtest.NewDB(t)
	ctx := context.Background()
	a := open(t, url, "a", time.Minute)
	plan := planOf("b1", 4, 100)
	if err := a.Load(ctx, plan); err != nil {
		t.Fatal(err)
	}
	if got, _, err := a.Claim(ctx, 4, false); err != nil || len(got) != 4 {
		t.Fatalf("a claimed %d: %v", len(got), err)
	}
	i1, i2, i3, i4 := plan[0].Item, plan[1].Item, plan[2].Item, plan[3].Item
	appendOK := func(c *Checkpoint, recs ...*journal.Record) {
		t.Helper()
		if err := c.Append(recs...); err != nil {
			t.Fatal(err)
		}
	}
	// i1: its 500 committed before b starts: b may send it anew.
	appendOK(a, intent(i1, 1))
	appendOK(a, failed500(i1, 1))
	// i2: its 500 is written by a transaction that draws its sequence
	// number now and commits only after b has started, as a commit waiting
	// on a slow disk does; i3's intent, drawn and committed meanwhile,
	// carries a higher number.
	appendOK(a, intent(i2, 1))
	line, err := journal.MarshalLine(nil, failed500(i2, 1))
	if err != nil {
		t.Fatal(err)
	}
	_, gen, _ := claimOf(t, a, "b1", "i2")
	slow, err := a.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Rollback(ctx)
	if _, err := slow.Exec(ctx, `WITH fence AS (
			UPDATE refundkit.items SET status = 'in_doubt' WHERE batch = $1 AND item = $2 AND claimed_by = $3 AND claim_gen = $4 RETURNING 1
		)
		INSERT INTO refundkit.records (commit_id, batch, item, claim_gen, worker, rec)
		SELECT nextval('refundkit.commits'), $1, $2, $4, $3, $5 FROM fence`, "b1", "i2", "a", gen, string(line[:len(line)-1])); err != nil {
		t.Fatal(err)
	}
	var slowSeq int64
	if err := slow.QueryRow(ctx, `SELECT max(seq) FROM refundkit.records`).Scan(&slowSeq); err != nil {
		t.Fatal(err)
	}
	appendOK(a, intent(i3, 1))
	appendOK(a, intent(i4, 1))

	b := open(t, url, "b", time.Minute) // starts with i2's 500 not yet committed
	if err := slow.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// i4: its 500 committed after b started, with the highest number.
	appendOK(a, failed500(i4, 1))
	var later int64
	if err := a.pool.QueryRow(ctx, `SELECT count(*) FROM refundkit.records WHERE seq > $1`, slowSeq).Scan(&later); err != nil || later < 2 {
		t.Fatalf("records numbered after i2's 500: %d (%v): the test did not build the case", later, err)
	}

	expire(t, a) // a dies: its claims pass to b
	if err := b.Load(ctx, plan); err != nil {
		t.Fatal(err)
	}
	got, _, err := b.Claim(ctx, 4, false)
	if err != nil || len(got) != 4 {
		t.Fatalf("b claimed %d: %v", len(got), err)
	}
	want := map[string]struct{ burned, inRun bool }{
		"i1": {true, false}, // journaled before b started: --resend-after-500 may send it anew
		"i2": {true, true},  // committed after b started, numbered before
		"i3": {false, false},
		"i4": {true, true},
	}
	for _, cl := range got {
		w := want[cl.Item]
		if cl.State.KeyBurned != w.burned || cl.BurnedInRun != w.inRun {
			t.Errorf("item %s: key burned %v, in this run %v; want %v, %v", cl.Item, cl.State.KeyBurned, cl.BurnedInRun, w.burned, w.inRun)
		}
	}
}

// claimOf is who holds an item's claim, its generation and its status.
func claimOf(t *testing.T, c *Checkpoint, batch, item string) (holder string, gen int64, status string) {
	t.Helper()
	var h *string
	if err := c.pool.QueryRow(context.Background(), `SELECT claimed_by, claim_gen, status FROM refundkit.items WHERE batch = $1 AND item = $2`,
		batch, item).Scan(&h, &gen, &status); err != nil {
		t.Fatal(err)
	}
	if h != nil {
		holder = *h
	}
	return holder, gen, status
}
