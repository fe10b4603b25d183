package main

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/refundkit/refundkit/refund/checkpoint/postgres"
)

// TestPGCheckKeptCountsLostRecords: the PostgreSQL rows' record check
// counts a record deleted and a record rewritten since the snapshot as
// lost, and records added since as nothing, so a clean row means
// something.
func TestPGCheckKeptCountsLostRecords(t *testing.T) {
	m := &matrix{opts: options{Log: testWriter{t}}, work: t.TempDir()}
	defer m.pg.stop()
	srv, err := m.pg.server()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	url, err := srv.CreateDB(ctx, "chaos_checkkept")
	if err != nil {
		t.Fatal(err)
	}
	if err := postgres.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	insert := func(item, rec string) {
		t.Helper()
		if _, err := pool.Exec(ctx, `INSERT INTO refundkit.records (commit_id, batch, item, claim_gen, worker, rec) VALUES (1, 'b', $1, 1, 'w1', $2)`, item, rec); err != nil {
			t.Fatal(err)
		}
	}
	for _, item := range []string{"a", "b", "c"} {
		insert(item, `{"item":"`+item+`"}`)
	}

	tl := &tally{Name: "test"}
	r, err := m.newRig(tl, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	b := &sharedBatch{r: r, cp: &pgCheckpoint{pool: pool}}
	snap, err := b.cp.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	b.checkKept(snap, "untouched")
	if tl.Lost != 0 || tl.ProblemCount != 0 {
		t.Fatalf("nothing changed, yet %d records lost, %d problems: %q", tl.Lost, tl.ProblemCount, tl.Problems)
	}
	insert("d", `{"item":"d"}`) // added: not lost
	if _, err := pool.Exec(ctx, `DELETE FROM refundkit.records WHERE item = 'a'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE refundkit.records SET rec = '{"item":"x"}' WHERE item = 'b'`); err != nil {
		t.Fatal(err)
	}
	b.checkKept(snap, "after the edits")
	if tl.Lost != 2 || tl.ProblemCount != 1 || !strings.Contains(strings.Join(tl.Problems, ""), "lost 2 of the 3 records") {
		t.Errorf("one record deleted and one rewritten: %d lost, %d problems %q; want 2 lost in 1 problem", tl.Lost, tl.ProblemCount, tl.Problems)
	}
}
