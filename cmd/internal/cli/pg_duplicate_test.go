package cli

// A duplicate is said on every run by every worker of a shared checkpoint,
// as a rerun over a journal file says it (issue 20, case 6).

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
)

func TestPGDuplicateIsSaidOnEveryRun(t *testing.T) {
	r := newPGRig(t, 2, stripesim.Faults{})
	// Item dup's charge holds two refunds of its own, made by runs whose
	// journals were lost.
	own := stripesim.SeedRefund{Amount: 100, Metadata: map[string]string{refund.MetaBatch: crashBatch, refund.MetaItem: "dup", refund.MetaAttempt: "1"}}
	if err := r.sim.AddCharges(stripesim.Charge{ID: "ch_dup", Currency: "usd", Amount: 500, Refunds: []stripesim.SeedRefund{own, own}}); err != nil {
		t.Fatal(err)
	}
	plan := filepath.Join(r.dir, "dup.jsonl")
	if err := os.WriteFile(plan, []byte(`{"batch":"`+crashBatch+`","item":"dup","charge":"ch_dup","amount":100}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for run, worker := range []string{"A", "B"} {
		p := r.startPlan(plan, worker)
		go p.Wait()
		waitExit(t, p, 60*time.Second)
		msg := p.Stderr.String()
		if p.Code != ExitFailed || !strings.Contains(msg, "(1 refunded twice), by all workers") || !strings.Contains(msg, "refunded twice") {
			t.Errorf("run %d (worker %s): exit %d, want %d with the tally saying the item was refunded twice: %s", run+1, worker, p.Code, ExitFailed, msg)
		}
	}
	if n := r.sim.Creates(); n != 0 {
		t.Errorf("%d creates, want none", n)
	}
}
