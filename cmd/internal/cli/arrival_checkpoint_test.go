package cli

// Issue 31, RELIABILITY.md's table "Every way a record arrives", the rows
// of an import into PostgreSQL or NATS (journal-merge -o) and of the
// checkpoint read back (audit of it, refund over it, journal-merge from
// it): a record that fails a check (status not on the allow-list, a
// currency or amount not the plan's, one refund credited to two items, one
// refund journaled with two amounts) is never counted done on the way in
// or on the way back.

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// arrivalRecord is an intent and a refunded record of item (batch batch,
// on charge) as refundkit journals them, of refund id for amount in cur
// with status st; cur "" leaves the currency out of the refunded record.
func arrivalRecord(batch, item, charge, id, st string, amount int64, cur string) []string {
	k := fmt.Sprintf("refundkit:%s:%s:1", batch, item)
	curField := ""
	if cur != "" {
		curField = fmt.Sprintf(`,"currency":%q`, cur)
	}
	return []string{
		fmt.Sprintf(`{"v":1,"type":"intent","ts":"2026-11-29T12:00:00.000Z","batch":%q,"item":%q,"charge":%q,"attempt":1,"key":%q,"amount":1000,"currency":"usd"}`, batch, item, charge, k),
		fmt.Sprintf(`{"v":1,"type":"refunded","ts":"2026-11-29T12:00:01.000Z","batch":%q,"item":%q,"charge":%q,"attempt":1,"key":%q,"amount":%d%s,"refund":%q,"status":%q,"source":"api"}`, batch, item, charge, k, amount, curField, id, st),
	}
}

// arrivalCase is one attacked journal: the records of items a (on charge
// ca) and b (on cb) of batch, of which item bad is not done.
type arrivalCase struct {
	name string
	// journal is the attacked journal's lines.
	journal func(batch, ca, cb string) []string
	// bad is the item the records do not prove done.
	bad string
	// mergeExit is what journal-merge -o gives on PostgreSQL and on NATS
	// into a checkpoint that stores no plan: a check that needs no plan
	// refuses (2) or reports a conflict (1); a status not on the list is
	// kept as the record it is (0), as a merge keeps it.
	pgExit, natsExit int
	// refundExit is refund's over the checkpoint with the plan, when the
	// records went in: in doubt (1) or refused (2).
	refundExit int
	// finding is what audit of the checkpoint reports.
	finding string
	// backExit is journal-merge's from the checkpoint: 1 where it reports
	// a conflict.
	backExit int
}

var arrivalCases = []arrivalCase{
	{name: "status", bad: "a", pgExit: ExitOK, natsExit: ExitOK, refundExit: ExitFailed, finding: "refund_status_unknown",
		journal: func(b, ca, cb string) []string {
			return append(arrivalRecord(b, "a", ca, b+"_re_ua", "SUCCEEDED", 1000, "usd"), arrivalRecord(b, "b", cb, b+"_re_ub", "succeeded", 1000, "usd")...)
		}},
	{name: "currency", bad: "a", pgExit: ExitOK, natsExit: ExitOK, refundExit: ExitUsage, finding: "currency_mismatch",
		journal: func(b, ca, cb string) []string {
			return append(arrivalRecord(b, "a", ca, b+"_re_ua", "succeeded", 1000, "USD"), arrivalRecord(b, "b", cb, b+"_re_ub", "succeeded", 1000, "usd")...)
		}},
	{name: "amount", bad: "a", pgExit: ExitOK, natsExit: ExitOK, refundExit: ExitUsage, finding: "amount_mismatch",
		journal: func(b, ca, cb string) []string {
			return append(arrivalRecord(b, "a", ca, b+"_re_ua", "succeeded", 999, "usd"), arrivalRecord(b, "b", cb, b+"_re_ub", "succeeded", 1000, "usd")...)
		}},
	{name: "shared", bad: "b", pgExit: ExitUsage, natsExit: ExitUsage,
		journal: func(b, ca, cb string) []string {
			return append(arrivalRecord(b, "a", ca, b+"_re_ua", "succeeded", 1000, "usd"), arrivalRecord(b, "b", cb, b+"_re_ua", "succeeded", 1000, "usd")...)
		}},
	// The suspected hole: item b's record of a's refund in a status not on
	// the list.
	{name: "shared_unknown", bad: "b", pgExit: ExitUsage, natsExit: ExitUsage,
		journal: func(b, ca, cb string) []string {
			return append(arrivalRecord(b, "a", ca, b+"_re_ua", "succeeded", 1000, "usd"), arrivalRecord(b, "b", cb, b+"_re_ua", "weird", 1000, "usd")...)
		}},
	{name: "self", bad: "a", pgExit: ExitFailed, natsExit: ExitUsage, refundExit: ExitUsage, finding: "conflict", backExit: ExitFailed,
		journal: func(b, ca, cb string) []string {
			j := append(arrivalRecord(b, "a", ca, b+"_re_ua", "succeeded", 1000, "usd"), arrivalRecord(b, "b", cb, b+"_re_ub", "succeeded", 1000, "usd")...)
			return append(j, arrivalRecord(b, "a", ca, b+"_re_ua", "succeeded", 999, "usd")[1])
		}},
}

// arrivalPlan is the plan of items a and b, 10.00 USD each.
func arrivalPlan(batch, ca, cb string) []string {
	return []string{
		fmt.Sprintf(`{"batch":%q,"item":"a","charge":%q,"amount":1000,"currency":"usd"}`, batch, ca),
		fmt.Sprintf(`{"batch":%q,"item":"b","charge":%q,"amount":1000,"currency":"usd"}`, batch, cb),
	}
}

// checkArrivals imports each case's journal into the rig's checkpoint
// (which stores no plan of its batch) and reads it back: the import
// refuses what it can judge without a plan; what went in, refund over the
// checkpoint does not count done (nothing sent), audit of the checkpoint
// reports, and journal-merge from it gives back as it is (a file journal
// judged the same).
func checkArrivals(t *testing.T, r *bindRig, pgsql bool, ca, cb string) {
	defer func() { r.t = t }()
	for _, c := range arrivalCases {
		t.Run(c.name, func(t *testing.T) {
			r.t = t
			batch := "arr_" + c.name
			j := r.write(batch+".jsonl", c.journal(batch, ca, cb)...)
			plan := r.write(batch+"-plan.jsonl", arrivalPlan(batch, ca, cb)...)
			code := c.natsExit
			if pgsql {
				code = c.pgExit
			}
			p := r.run("journal-merge", "", nil, "-o", r.url, j)
			r.want(p, code, "the import")
			t.Logf("the import: %s", &p.Stderr)
			if code == ExitUsage {
				wantIn(t, "the refusal", p.Stderr.String(), "nothing")
				if strings.Contains(r.export(), `"batch":"`+batch+`"`) {
					t.Errorf("the refused import wrote records of the batch")
				}
				return
			}
			creates := r.sim.Creates()
			p = r.worker(plan, "W", nil)
			r.want(p, c.refundExit, "refund over the checkpoint")
			t.Logf("refund over the checkpoint: %s%s", &p.Stdout, &p.Stderr)
			if n := r.sim.Creates() - creates; n != 0 {
				t.Errorf("refund over the checkpoint made %d refund calls", n)
			}
			for _, line := range strings.Split(p.Stdout.String(), "\n") {
				if strings.Contains(line, `"item":"`+c.bad+`"`) && (strings.Contains(line, `"status":"skipped"`) || strings.Contains(line, `"status":"refunded"`)) {
					t.Errorf("refund over the checkpoint counts item %s done: %s", c.bad, line)
				}
			}
			if strings.Contains(p.Stderr.String(), "2 refunded") {
				t.Errorf("refund over the checkpoint counts the batch done: %s", &p.Stderr)
			}
			if c.finding != "" {
				p = r.run("audit", "", nil, "--plan", plan, r.url)
				r.want(p, ExitFailed, "audit of the checkpoint")
				wantIn(t, "audit of the checkpoint", p.Stdout.String(), c.finding)
			}
			// Read back into a file: the same records, judged the same.
			p = r.run("journal-merge", "", nil, r.url)
			r.want(p, c.backExit, "journal-merge from the checkpoint")
			back := r.write(batch+"-back.jsonl", strings.TrimSuffix(p.Stdout.String(), "\n"))
			p = r.run("refund", plan, nil, "--journal", back, "--rate", "0")
			if p.Code == ExitOK {
				t.Errorf("refund over the export exits 0: %s%s", &p.Stdout, &p.Stderr)
			}
			if n := r.sim.Creates() - creates; n != 0 {
				t.Errorf("refund over the export made %d refund calls", n)
			}
		})
	}
}

// TestPGArrivalImport: the rows of an import into PostgreSQL and of a
// PostgreSQL checkpoint read back.
func TestPGArrivalImport(t *testing.T) {
	r := newBindRig(t, true)
	checkArrivals(t, r, true, "ch_bx", "ch_bz")
}

// TestPGArrivalStoredPlan: imports into PostgreSQL that the plan it
// stores refuses.
func TestPGArrivalStoredPlan(t *testing.T) {
	checkStoredPlanImports(t, newBindRig(t, true), "ch_bx", "ch_bz")
}

// TestNATSArrivalImport: the same through a NATS checkpoint.
func TestNATSArrivalImport(t *testing.T) {
	r, _ := newNATSImportRig(t)
	checkArrivals(t, r, false, "ch_n1", "ch_n2")
}

// TestNATSArrivalStoredPlan: the same into NATS.
func TestNATSArrivalStoredPlan(t *testing.T) {
	r, _ := newNATSImportRig(t)
	checkStoredPlanImports(t, r, "ch_n1", "ch_n2")
}

// checkStoredPlanImports: a checkpoint that refunded the plan of batch
// "stored" (so stores it) refuses, with nothing imported, the import of a
// journal crediting its item a with a refund in another currency, of
// another amount, or its own refund with another amount, or crediting
// item b with a's refund in a status not on the list.
func checkStoredPlanImports(t *testing.T, r *bindRig, ca, cb string) {
	const batch = "stored"
	defer func() { r.t = t }()
	plan := r.write("stored-plan.jsonl", arrivalPlan(batch, ca, cb)...)
	r.want(r.worker(plan, "W", nil), ExitOK, "the plan over the checkpoint")
	var real string
	for _, line := range strings.Split(r.export(), "\n") {
		if strings.Contains(line, `"type":"refunded"`) && strings.Contains(line, `"item":"a"`) && strings.Contains(line, `"batch":"stored"`) {
			_, after, _ := strings.Cut(line, `"refund":"`)
			real, _, _ = strings.Cut(after, `"`)
		}
	}
	if real == "" {
		t.Fatalf("no refund of item a in the checkpoint: %s", r.export())
	}
	own := real
	for _, c := range []struct {
		name  string
		lines []string
	}{
		{"currency", arrivalRecord(batch, "a", ca, "re_other_"+batch, "succeeded", 1000, "USD")},
		{"amount", arrivalRecord(batch, "a", ca, "re_other_"+batch, "succeeded", 999, "usd")},
		{"self", arrivalRecord(batch, "a", ca, own, "succeeded", 999, "usd")},
		{"shared_unknown", arrivalRecord(batch, "b", cb, own, "weird", 1000, "usd")},
	} {
		t.Run("stored_"+c.name, func(t *testing.T) {
			r.t = t
			before := r.export()
			p := r.run("journal-merge", "", nil, "-o", r.url, r.write("stored-"+c.name+".jsonl", c.lines...))
			r.want(p, ExitUsage, "the import")
			t.Logf("the import: %s", &p.Stderr)
			wantIn(t, "the refusal", p.Stderr.String(), "nothing was imported")
			if after := r.export(); after != before {
				t.Errorf("the refused import changed the checkpoint:\n%s\nwas\n%s", after, before)
			}
		})
	}
}

// TestPGArrivalSharedReadBack: records that credit one refund to two items
// got into a PostgreSQL checkpoint (an import by an earlier build,
// simulated by writing them), read back: refund over the checkpoint does
// not count the second item done and sends nothing, audit of it reports
// the shared refund, and journal-merge from it says the conflict.
func TestPGArrivalSharedReadBack(t *testing.T) {
	r := newBindRig(t, true)
	const batch = "old"
	lines := append(arrivalRecord(batch, "a", "ch_bx", "re_old", "succeeded", 1000, "usd"), arrivalRecord(batch, "b", "ch_bz", "re_old", "succeeded", 1000, "usd")...)
	for i, line := range lines {
		if _, err := r.db.Exec(context.Background(), `INSERT INTO refundkit.records (commit_id, batch, item, claim_gen, worker, rec)
			VALUES (nextval('refundkit.commits'), $1, $2, 0, 'import:old', $3)`, batch, []string{"a", "a", "b", "b"}[i], line); err != nil {
			t.Fatal(err)
		}
	}
	plan := r.write("plan.jsonl", arrivalPlan(batch, "ch_bx", "ch_bz")...)
	p := r.worker(plan, "W", nil)
	t.Logf("refund over the checkpoint: %s%s", &p.Stdout, &p.Stderr)
	if p.Code == ExitOK {
		t.Errorf("refund over the checkpoint exits 0")
	}
	if n := r.sim.Creates(); n != 0 {
		t.Errorf("refund over the checkpoint made %d refund calls", n)
	}
	wantIn(t, "refund over the checkpoint", p.Stderr.String(), `item "b" of batch "old": the checkpoint credits refund re_old to it and, first, to item "a"`)
	p = r.run("audit", "", nil, "--plan", plan, r.url)
	r.want(p, ExitFailed, "audit of the checkpoint")
	wantIn(t, "audit of the checkpoint", p.Stdout.String(), "shared_refund")
	p = r.run("journal-merge", "", nil, r.url)
	r.want(p, ExitFailed, "journal-merge from the checkpoint")
	wantIn(t, "journal-merge from the checkpoint", p.Stderr.String(), "which is the refund of item a")
}
