package cli

// refund --dry-run over a PostgreSQL checkpoint looks up what the records
// do not settle, as over a journal file: nothing claimed, nothing
// written, nothing sent; the real run then does what it said.

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestPGDryRunLooksUp(t *testing.T) {
	r := newBindRig(t, true)
	// Another batch refunded charge X; this batch's item i2 was refunded
	// under a journal file since lost.
	other := r.write("other.jsonl", `{"batch":"other","item":"o1","charge":"ch_bx","amount":100}`)
	r.want(r.run("refund", other, nil, "--journal", filepath.Join(r.dir, "other-j.jsonl"), "--rate", "0"), ExitOK, "another batch on charge X")
	lost := r.write("lost.jsonl", bindItem("i2", "ch_by", 500))
	r.want(r.run("refund", lost, nil, "--journal", filepath.Join(r.dir, "lost-j.jsonl"), "--rate", "0"), ExitOK, "i2 under a journal since lost")

	plan := r.write("plan.jsonl", bindItem("i1", "ch_bx", 100), bindItem("i2", "ch_by", 500), bindItem("i3", "ch_bz", 300))
	creates, records := r.sim.Creates(), r.records()
	p := r.worker(plan, "D", nil, "--dry-run")
	r.want(p, ExitFailed, "the dry run (it would hold i1)")
	out := p.Stdout.String()
	for _, want := range []string{
		`"item":"i1","charge":"ch_bx","status":"would_hold"`,
		`"item":"i2","charge":"ch_by","status":"would_adopt"`,
		`"item":"i3","charge":"ch_bz","status":"would_refund","amount":300,"currency":"usd"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run: stdout lacks %s:\n%s", want, out)
		}
	}
	if n := r.sim.Creates(); n != creates {
		t.Errorf("the dry run made %d refund calls", n-creates)
	}
	if r.records() != records {
		t.Errorf("the dry run wrote records")
	}
	if n := r.storedPlans(); n != 0 {
		t.Errorf("the dry run stored the plan (%d batches)", n)
	}
	if !strings.Contains(p.Stderr.String(), "dry run, looked up at Stripe") {
		t.Errorf("dry run: stderr does not say what kind of dry run it was:\n%s", &p.Stderr)
	}

	p = r.worker(plan, "W", nil)
	r.want(p, ExitFailed, "the real run (it holds i1)")
	out = p.Stdout.String()
	for _, want := range []string{
		`"item":"i1","charge":"ch_bx","status":"failed"`,
		`"item":"i2","charge":"ch_by","status":"refunded"`,
		`"item":"i3","charge":"ch_bz","status":"refunded","refund":`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("real run: stdout lacks %s:\n%s", want, out)
		}
	}
	if n := r.sim.Creates() - creates; n != 1 {
		t.Errorf("the real run made %d refund calls, want the 1 the dry run said", n)
	}
}
