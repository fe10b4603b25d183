package cli

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestPGAuditAuditsTheStoredPlan (issue 19, case 6): audit postgres://...
// audits the plan the checkpoint stores as audit --plan does: with 1 item
// of 4 refunded, the 3 not started are findings (exit 1); once all are
// refunded, no findings.
func TestPGAuditAuditsTheStoredPlan(t *testing.T) {
	r := newBindRig(t, false)
	lines := []string{bindItem("i1", "ch_bx", 500), bindItem("i2", "ch_by", 500), bindItem("i3", "ch_bz", 500), bindItem("i4", "ch_bw", 500)}
	plan := r.write("plan.jsonl", lines...)
	// A worker whose key the provider refuses stores the plan and sends
	// nothing.
	p := r.worker(plan, "W", []string{"STRIPE_API_KEY=sk_live_refusedBYTHEsimulator"}, "--live")
	r.want(p, ExitProvider, "a worker with a refused key")
	if n := r.storedPlans(); n != 1 {
		t.Fatalf("%d plans stored, want 1: %s", n, &p.Stderr)
	}
	// i1 is refunded elsewhere and imported.
	j := filepath.Join(r.dir, "j.jsonl")
	r.want(r.run("refund", r.write("one.jsonl", lines[0]), nil, "--journal", j, "--rate", "0"), ExitOK, "i1 on a file journal")
	r.want(r.run("journal-merge", "", nil, "-o", r.url, j), ExitOK, "the import")

	p = r.run("audit", "", nil, r.url)
	r.want(p, ExitFailed, "audit of 1 item refunded, 3 not started")
	wantIn(t, "audit's stderr", p.Stderr.String(), "4 items (1 refunded, 3 not started)")
	missing := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(p.Stdout.String()), "\n") {
		var f struct {
			Finding, Item string
		}
		if err := json.Unmarshal([]byte(line), &f); err != nil {
			t.Fatalf("audit's stdout: %q: %v", line, err)
		}
		if f.Finding == "missing" {
			missing[f.Item] = true
		}
	}
	if len(missing) != 3 || !missing["i2"] || !missing["i3"] || !missing["i4"] {
		t.Errorf("missing findings for %v, want i2, i3, i4: %s", missing, &p.Stdout)
	}
	// --batch names the batch: the same.
	r.want(r.run("audit", "", nil, "--batch", bindBatch, r.url), ExitFailed, "audit --batch")
	// A plan given is the one audited (not listed twice).
	r.want(r.run("audit", "", nil, "--plan", plan, r.url), ExitFailed, "audit --plan")

	r.want(r.worker(plan, "W", nil), ExitOK, "the plan with a good key")
	p = r.run("audit", "", nil, r.url)
	r.want(p, ExitOK, "audit of the batch done")
	wantIn(t, "audit's stderr", p.Stderr.String(), "no findings")

	// A batch imported whose plan the checkpoint does not store: its items
	// are in no plan it stores. Each batch alone is clean.
	o := filepath.Join(r.dir, "o.jsonl")
	r.want(r.run("refund", r.write("other.jsonl", `{"batch":"other","item":"o1","charge":"ch_bv","amount":100}`), nil, "--journal", o, "--rate", "0"), ExitOK, "another batch on a file journal")
	r.want(r.run("journal-merge", "", nil, "-o", r.url, o), ExitOK, "the import of the other batch")
	p = r.run("audit", "", nil, r.url)
	r.want(p, ExitFailed, "audit of both batches")
	wantIn(t, "audit's findings", p.Stdout.String(), `"finding":"not_in_plan","batch":"other","item":"o1"`)
	r.want(r.run("audit", "", nil, "--batch", bindBatch, r.url), ExitOK, "audit --batch "+bindBatch)
	r.want(r.run("audit", "", nil, "--batch", "other", r.url), ExitOK, "audit --batch other")
}
