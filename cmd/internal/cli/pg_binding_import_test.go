package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/refundkit/refundkit/refund/checkpoint/postgres"
)

// TestPGImportedItemBindsThePlan (issue 19, case 2): a file journal with
// i1 refunded on charge X for 5.00, imported; a plan where i1 names charge
// Y for 8.00 is refused (exit 2, at its line), as it is against the file
// journal, and nothing is sent or stored: the checkpoint does not count as
// done a refund on Y that was never made.
func TestPGImportedItemBindsThePlan(t *testing.T) {
	r := newBindRig(t, true)
	planA := r.write("a.jsonl", bindItem("i1", "ch_bx", 500), bindItem("i2", "ch_bz", 500))
	planB := r.write("b.jsonl", bindItem("i1", "ch_by", 800), bindItem("i2", "ch_bz", 500))
	j := filepath.Join(r.dir, "j.jsonl")
	r.want(r.run("refund", planA, nil, "--journal", j, "--rate", "0"), ExitOK, "plan A on a file journal")
	r.want(r.run("journal-merge", "", nil, "-o", r.url, j), ExitOK, "the import of the file journal")

	p := r.run("refund", planB, nil, "--journal", j, "--rate", "0")
	r.want(p, ExitUsage, "plan B on the file journal")
	creates := r.sim.Creates()
	records := r.records()
	for _, dry := range []bool{true, false} {
		what := "plan B on the checkpoint"
		var args []string
		if dry {
			what, args = "plan B on the checkpoint, dry run", []string{"--dry-run"}
		}
		p := r.worker(planB, "W", nil, args...)
		r.want(p, ExitUsage, what)
		wantIn(t, what+": stderr", p.Stderr.String(), "refund: <stdin>:1: ", `item "i1"`, `charge "ch_by"`, `charge "ch_bx"`)
		t.Logf("%s: %s", what, &p.Stderr)
		if strings.Contains(p.Stderr.String(), "2 refunded") {
			t.Errorf("%s: counts the batch done: %s", what, &p.Stderr)
		}
	}
	if n := r.sim.Creates(); n != creates {
		t.Errorf("plan B on the checkpoint made %d refund calls", n-creates)
	}
	if rs := r.refundsOn("ch_by"); len(rs) != 0 {
		t.Errorf("refunds on charge Y: %+v", rs)
	}
	if r.records() != records {
		t.Errorf("plan B on the checkpoint changed its records")
	}
	if n := r.storedPlans(); n != 0 {
		t.Errorf("the refused plan B was stored (%d batches)", n)
	}

	// The plan the journal was run with is the checkpoint's: nothing sent.
	p = r.worker(planA, "W", nil)
	r.want(p, ExitOK, "plan A on the checkpoint")
	if n := r.sim.Creates(); n != creates {
		t.Errorf("plan A on the checkpoint made %d refund calls", n-creates)
	}
	wantIn(t, "plan A on the checkpoint", p.Stderr.String(), "2 items (2 refunded)")
}

// TestPGStoredPlanBindsRecordsWrittenBefore (issue 19, case 2): a batch
// whose plan the checkpoint stores holds records of i1 that contradict it
// (an import by an earlier build, simulated here by rewriting them): the
// same plan again is refused at i1's line instead of counting i1 done.
func TestPGStoredPlanBindsRecordsWrittenBefore(t *testing.T) {
	r := newBindRig(t, true)
	planA := r.write("a.jsonl", bindItem("i1", "ch_bx", 500), bindItem("i2", "ch_bz", 500))
	planB := r.write("b.jsonl", bindItem("i2", "ch_bz", 500), bindItem("i1", "ch_by", 800))
	j := filepath.Join(r.dir, "j.jsonl")
	r.want(r.run("refund", planA, r.onTwin(), "--journal", j, "--rate", "0"), ExitOK, "plan A on a file journal (the twin)")
	r.want(r.worker(planB, "W", nil), ExitOK, "plan B on the checkpoint")

	ctx := context.Background()
	if _, err := r.db.Exec(ctx, `DELETE FROM refundkit.records WHERE batch = $1 AND item = 'i1'`, bindBatch); err != nil {
		t.Fatal(err)
	}
	for _, line := range recordLines(t, j, "i1") {
		if _, err := r.db.Exec(ctx, `INSERT INTO refundkit.records (commit_id, batch, item, claim_gen, worker, rec)
			VALUES (nextval('refundkit.commits'), $1, 'i1', 0, 'import:old', $2)`, bindBatch, line); err != nil {
			t.Fatal(err)
		}
	}
	creates := r.sim.Creates()
	p := r.worker(planB, "W2", nil)
	r.want(p, ExitUsage, "plan B again over records of i1 on charge X")
	wantIn(t, "the refusal", p.Stderr.String(), "refund: <stdin>:2: ", `item "i1"`, `charge "ch_bx"`)
	if n := r.sim.Creates(); n != creates {
		t.Errorf("%d refund calls", n-creates)
	}
}

// TestPGImportThatContradictsThePlanIsRefused (issue 19, case 2): a
// checkpoint that stores plan B (i1 on charge Y for 8.00) refuses the
// import of a file journal refunding i1 on charge X for 5.00: exit 2,
// naming the file, its line and the item, and nothing imported. An import
// that agrees with the plan goes in.
func TestPGImportThatContradictsThePlanIsRefused(t *testing.T) {
	r := newBindRig(t, true)
	planA := r.write("a.jsonl", bindItem("i1", "ch_bx", 500), bindItem("i2", "ch_bz", 500))
	planB := r.write("b.jsonl", bindItem("i1", "ch_by", 800), bindItem("i2", "ch_bz", 500))
	j := filepath.Join(r.dir, "j.jsonl")
	r.want(r.run("refund", planA, r.onTwin(), "--journal", j, "--rate", "0"), ExitOK, "plan A on a file journal (the twin)")
	r.want(r.worker(planB, "W", nil), ExitOK, "plan B on the checkpoint")

	records := r.records()
	p := r.run("journal-merge", "", nil, "-o", r.url, j)
	r.want(p, ExitUsage, "the import of plan A's journal")
	msg := p.Stderr.String()
	t.Logf("the refused import: %s", msg)
	wantIn(t, "the refusal", msg, "journal-merge: ", j+":", `item "i1"`, `charge "ch_by"`, `charge "ch_bx"`, "nothing was imported")
	if r.records() != records {
		t.Errorf("the refused import changed the checkpoint's records")
	}
	r.want(r.run("audit", "", nil, r.url), ExitOK, "audit after the refused import")

	// Records that agree with the plan go in: the checkpoint's own,
	// exported and imported again.
	p = r.run("journal-merge", "", nil, r.url)
	r.want(p, ExitOK, "the export")
	k := r.write("k.jsonl", strings.TrimSuffix(p.Stdout.String(), "\n"))
	p = r.run("journal-merge", "", nil, "-o", r.url, k)
	r.want(p, ExitOK, "the import of the export")
	wantIn(t, "the import", p.Stderr.String(), "imported")
	r.want(r.run("audit", "", nil, r.url), ExitOK, "audit after the import")
}

// TestPGImportConflictNamesTheCheckpoint: an import whose journal credits
// an item with another refund than the checkpoint does is imported with
// the conflict reported (exit 1), and the report names the checkpoint by
// its URL, never the temporary file it was exported to.
func TestPGImportConflictNamesTheCheckpoint(t *testing.T) {
	r := newBindRig(t, true)
	plan := r.write("plan.jsonl", bindItem("i1", "ch_bx", 500))
	r.want(r.worker(plan, "W", nil), ExitOK, "the plan on the checkpoint")
	// On the twin, a refund first, so that i1's there has another id.
	r.want(r.run("refund", r.write("other.jsonl", `{"batch":"other","item":"o1","charge":"ch_bv","amount":100}`), r.onTwin(),
		"--journal", filepath.Join(r.dir, "o.jsonl"), "--rate", "0"), ExitOK, "a refund on the twin")
	j := filepath.Join(r.dir, "j.jsonl")
	r.want(r.run("refund", plan, r.onTwin(), "--journal", j, "--rate", "0"), ExitOK, "the plan on a file journal (the twin)")
	p := r.run("journal-merge", "", nil, "-o", r.url, j)
	r.want(p, ExitFailed, "the import of another refund of i1")
	msg := p.Stderr.String()
	wantIn(t, "the conflict", msg, "journal-merge: conflict: ", postgres.Redact(r.url)+":", j+":")
	if strings.Contains(msg, "refundkit-export-") {
		t.Errorf("the report names the temporary export: %s", msg)
	}
}
