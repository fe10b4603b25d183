package postgres

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/checkpoint/postgres/pgtest"
)

// journalOf is a file journal of recs, one commit.
func journalOf(t *testing.T, recs ...*journal.Record) []byte {
	t.Helper()
	var lines []byte
	for _, r := range recs {
		l, err := journal.MarshalLine(nil, r)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, l...)
	}
	return journal.AppendCommit(lines, lines, len(recs))
}

// elsewhere is it on another charge: what a journal of another plan holds.
func elsewhere(it *refund.Item) *refund.Item {
	o := *it
	o.Charge = "ch_elsewhere"
	return &o
}

func count(t *testing.T, c *Checkpoint, sql string) int {
	t.Helper()
	var n int
	if err := c.pool.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func wantInputError(t *testing.T, what string, err error, line int) {
	t.Helper()
	ie, ok := err.(*refund.InputError)
	if !ok {
		t.Fatalf("%s: %v (%T), want a *refund.InputError", what, err, err)
	}
	if ie.Line != line {
		t.Errorf("%s: at line %d, want %d: %v", what, ie.Line, line, err)
	}
}

// Records imported before the plan bind their items: a plan that names
// another charge for one is refused at its line, and not stored; read
// only (a dry run), the same.
func TestLoadChecksRecordsImportedBeforeThePlan(t *testing.T) {
	url := pgtest.NewDB(t)
	ctx := context.Background()
	c := open(t, url, "a", time.Minute)
	plan := planOf("b1", 3, 100)
	other := elsewhere(plan[1].Item)
	if _, _, err := c.Import(ctx, bytes.NewReader(journalOf(t, intent(other, 1), refunded(other, "re_1"))), "j.jsonl", 0); err != nil {
		t.Fatal(err)
	}
	ro, err := Open(ctx, url, Options{}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	wantInputError(t, "read-only load", ro.Load(ctx, plan), 2)
	wantInputError(t, "load", c.Load(ctx, plan), 2)
	if n := count(t, c, `SELECT count(*) FROM refundkit.batches`); n != 0 {
		t.Errorf("the refused plan was stored: %d batches", n)
	}
	plan[1].Item.Charge = other.Charge
	if err := c.Load(ctx, plan); err != nil {
		t.Fatalf("the plan the records were made with: %v", err)
	}
	if n := count(t, c, `SELECT count(*) FROM refundkit.items WHERE status = 'refunded'`); n != 1 {
		t.Errorf("%d items refunded after the load, want 1", n)
	}
}

// A stored plan is checked against its records on every load: records an
// earlier build let in that contradict it are refused, not counted done.
func TestLoadChecksRecordsOfAStoredPlan(t *testing.T) {
	url := pgtest.NewDB(t)
	ctx := context.Background()
	c := open(t, url, "a", time.Minute)
	plan := planOf("b1", 2, 100)
	if err := c.Load(ctx, plan); err != nil {
		t.Fatal(err)
	}
	if _, err := c.pool.Exec(ctx, `INSERT INTO refundkit.records (commit_id, batch, item, claim_gen, worker, rec)
		VALUES (nextval('refundkit.commits'), 'b1', 'i2', 0, 'import:old', $1)`, string(bytes.TrimSuffix(mustLine(t, refunded(elsewhere(plan[1].Item), "re_1")), []byte("\n")))); err != nil {
		t.Fatal(err)
	}
	wantInputError(t, "load again", c.Load(ctx, plan), 2)
	ro, err := Open(ctx, url, Options{}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	wantInputError(t, "read-only load", ro.Load(ctx, plan), 2)
}

func mustLine(t *testing.T, r *journal.Record) []byte {
	t.Helper()
	l, err := journal.MarshalLine(nil, r)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// An import whose records contradict the plan stored for their batch is
// refused, nothing imported; CheckJournal says so at the item's first
// record; records that agree go in.
func TestImportThatContradictsTheStoredPlanIsRefused(t *testing.T) {
	url := pgtest.NewDB(t)
	ctx := context.Background()
	c := open(t, url, "a", time.Minute)
	plan := planOf("b1", 2, 100)
	if err := c.Load(ctx, plan); err != nil {
		t.Fatal(err)
	}
	other := elsewhere(plan[1].Item)
	bad := journalOf(t, intent(plan[0].Item, 1), intent(other, 1), refunded(other, "re_1"))
	wantInputError(t, "check", c.CheckJournal(ctx, bytes.NewReader(bad), "j.jsonl"), 2)
	_, _, err := c.Import(ctx, bytes.NewReader(bad), "the merge", 0)
	wantInputError(t, "import", err, 0)
	if n := count(t, c, `SELECT count(*) FROM refundkit.records`); n != 0 {
		t.Errorf("the refused import wrote %d records", n)
	}
	// An amount other than the plan's is refused as well.
	more := *plan[1].Item
	more.Amount = 250
	_, _, err = c.Import(ctx, bytes.NewReader(journalOf(t, intent(&more, 1))), "the merge", 0)
	wantInputError(t, "import of another amount", err, 0)

	good := journalOf(t, intent(plan[1].Item, 1), refunded(plan[1].Item, "re_1"))
	if err := c.CheckJournal(ctx, bytes.NewReader(good), "k.jsonl"); err != nil {
		t.Fatalf("check of records that agree: %v", err)
	}
	if n, _, err := c.Import(ctx, bytes.NewReader(good), "the merge", 0); err != nil || n != 2 {
		t.Fatalf("import of records that agree: %d, %v", n, err)
	}
	if n := count(t, c, `SELECT count(*) FROM refundkit.items WHERE status = 'refunded'`); n != 1 {
		t.Errorf("%d items refunded after the import, want 1", n)
	}
}
