package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/refundkit/refundkit/refund/sim/stripesim"
)

// A pending refund the provider answers it does not have (a journal made
// against another account, imported) is no refund: the worker exits 1
// and does not say the batch is done (issue 20, case 5, on the shared
// checkpoint, whose tally counts a pending item as settled).
func TestPGPendingRefundTheProviderDoesNotHave(t *testing.T) {
	r := newBindRig(t, true)
	if err := r.twin.SetFaults(stripesim.Faults{RequiresActionShare: 1}); err != nil {
		t.Fatal(err)
	}
	plan := r.write("p.jsonl", bindItem("i1", "ch_bx", 500))
	j := filepath.Join(r.dir, "j.jsonl")
	r.want(r.run("refund", plan, r.onTwin(), "--journal", j, "--rate", "0"), ExitOK, "the run at the twin (another account): i1 pending")
	r.want(r.run("journal-merge", "", nil, "-o", r.url, j), ExitOK, "the import")
	p := r.worker(plan, "W", nil)
	r.want(p, ExitFailed, "the worker at the account that has no such refund")
	if msg := p.Stderr.String(); strings.Contains(msg, "the batch is done") || !strings.Contains(msg, "not settled since") {
		t.Errorf("the worker's closing words: %s", msg)
	}
	if out := p.Stdout.String(); !strings.Contains(out, `"status":"in_doubt"`) || !strings.Contains(out, `"code":"resource_missing"`) {
		t.Errorf("i1's result: %s", out)
	}
}
