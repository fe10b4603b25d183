package cli

// Which Stripe 500s a worker may send anew with --resend-after-500 (issue
// 19, suspected), through the real binary.

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/checkpoint/postgres"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// TestPGResendAfter500OnlyFor500sCommittedBeforeTheStart: a worker's
// --resend-after-500 is for 500s journaled before it started. Another
// worker's 500 for i1 draws its record's sequence number, then its commit
// waits (a slow disk, a paused writer mid-transaction); meanwhile a record
// with a higher number commits and the worker starts. Counting by numbers
// (max(seq) at the start), the 500 was earlier: the worker sent i1 under a
// new key while the call the 500 answered may still complete, a second
// refund. By commit, it is of this run: i1 stays in doubt, nothing is sent.
func TestPGResendAfter500OnlyFor500sCommittedBeforeTheStart(t *testing.T) {
	const items = 3
	r := newPGRig(t, items, stripesim.Faults{})
	ctx := context.Background()
	plan, err := os.ReadFile(r.plan)
	if err != nil {
		t.Fatal(err)
	}
	var lines []refund.PlanLine
	for i, l := range bytes.Split(bytes.TrimSpace(plan), []byte("\n")) {
		it, err := refund.ParseItem(l)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, refund.PlanLine{Item: &it, Line: i + 1})
	}
	x, z := lines[0].Item, lines[1].Item // i1: the slow 500; i2: a record numbered after it
	// Another worker, gone since, loaded the plan and sent i1 (its intent
	// is journaled; Stripe answered 500, and made nothing yet).
	ghost := func(name string, it *refund.Item) {
		t.Helper()
		cp, err := postgres.Open(ctx, r.url, postgres.Options{Worker: name, Lease: pgLease}, false)
		if err != nil {
			t.Fatal(err)
		}
		defer cp.Close() // gives its claim back: the item is in doubt
		if err := cp.Load(ctx, lines); err != nil {
			t.Fatal(err)
		}
		got, _, err := cp.Claim(ctx, 1, false)
		if err != nil || len(got) != 1 || got[0].Item != it.Item {
			t.Fatalf("%s claimed %+v (%v), want %s", name, got, err, it.Item)
		}
		if err := cp.Append(&journal.Record{V: journal.Version, Type: journal.TypeIntent, Time: time.Now().UTC(), Batch: it.Batch, Item: it.Item,
			Charge: it.Charge, Attempt: 1, Key: refund.IdempotencyKey(it.Batch, it.Item, 1)}); err != nil {
			t.Fatal(err)
		}
	}
	ghost("ghost1", x)
	// Its 500: inserted (its number drawn), not committed.
	line, err := journal.MarshalLine(nil, &journal.Record{V: journal.Version, Type: journal.TypeFailed, Time: time.Now().UTC(), Batch: x.Batch, Item: x.Item,
		Charge: x.Charge, Attempt: 1, Key: refund.IdempotencyKey(x.Batch, x.Item, 1), HTTPStatus: 500, Code: "api_error", Message: "an incident"})
	if err != nil {
		t.Fatal(err)
	}
	slow, err := r.db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Rollback(ctx)
	if _, err := slow.Exec(ctx, `WITH fence AS (
			UPDATE refundkit.items SET status = 'in_doubt' WHERE batch = $1 AND item = $2 RETURNING claim_gen
		)
		INSERT INTO refundkit.records (commit_id, batch, item, claim_gen, worker, rec)
		SELECT nextval('refundkit.commits'), $1, $2, claim_gen, 'ghost1', $3 FROM fence`, x.Batch, x.Item, string(line[:len(line)-1])); err != nil {
		t.Fatal(err)
	}
	// i2's intent, numbered after the 500, commits first.
	ghost("ghost2", z)

	// The worker starts with the 500 not committed; once it is at work
	// (it took i2 or i3: i1's row is locked by the slow writer), the 500
	// commits, and the worker claims i1 next.
	w := r.start("W", "-j", "1", "--resend-after-500")
	go w.Wait()
	for deadline := time.Now().Add(60 * time.Second); ; {
		var took int
		if err := r.db.QueryRow(ctx, `SELECT count(*) FROM refundkit.items WHERE batch = $1 AND item <> $2 AND (claimed_by = 'W' OR status = 'refunded')`,
			crashBatch, x.Item).Scan(&took); err != nil {
			t.Fatal(err)
		}
		if took > 0 {
			break
		}
		select {
		case <-w.Exited():
			t.Fatalf("W exited %d before it claimed an item: %s", w.Code, &w.Stderr)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("W claimed nothing within 60s: %s", &w.Stderr)
		}
	}
	if err := slow.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	waitExit(t, w, 60*time.Second)

	for _, k := range r.sim.Keys() {
		if _, item, _, ok := crashrig.ParseKey(k); ok && item == x.Item {
			t.Errorf("W sent %s for i1, whose 500 came during its run: Stripe may still complete the first call", k)
		}
	}
	if n := len(r.sim.BatchRefunds(crashBatch)[x.Item]); n != 0 {
		t.Errorf("i1 has %d refunds at the simulator, want none sent", n)
	}
	if w.Code != ExitFailed || !strings.Contains(w.Stdout.String(), `"item":"i1","charge":"ch_sim0000001","status":"in_doubt"`) ||
		!strings.Contains(w.Stdout.String(), "No new key in this run") {
		t.Errorf("W exited %d, want %d with i1 in doubt (no new key in this run): %s%s", w.Code, ExitFailed, &w.Stdout, &w.Stderr)
	}
	if _, _, status := r.claim(x.Item); status != "in_doubt" {
		t.Errorf("i1 is %s, want in_doubt", status)
	}
	for _, it := range []string{"i2", "i3"} {
		if _, _, status := r.claim(it); status != "refunded" {
			t.Errorf("%s is %s, want refunded", it, status)
		}
	}
}
