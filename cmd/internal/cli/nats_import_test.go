package cli

// journal-merge -o nats://... through the real binaries, against a real
// nats-server (natstest) and the crash rig's simulator: what an import
// settles is not sent again, a journal the checkpoint contradicts is
// refused at its line with nothing imported, an item a worker holds stops
// the import (exit 4), and no password is printed.

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/checkpoint/natsjs"
	"github.com/refundkit/refundkit/refund/checkpoint/natsjs/natstest"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// newNATSImportRig is a bindRig (simulator, twin, directory) whose
// checkpoint is a NATS one on a server of its own; its db is nil.
func newNATSImportRig(t *testing.T) (*bindRig, *natstest.Server) {
	t.Helper()
	srv, err := natstest.Start(natstest.Options{SyncAlways: true})
	if err != nil {
		t.Fatalf("the NATS tests need nats-server (make test installs it): %v", err)
	}
	t.Cleanup(func() { srv.Stop() })
	var charges []stripesim.Charge
	for i := 1; i <= 6; i++ {
		charges = append(charges, stripesim.Charge{ID: fmt.Sprintf("ch_n%d", i), PaymentIntent: fmt.Sprintf("pi_n%d", i), Currency: "usd", Amount: 10000})
	}
	sim, err := crashrig.StartSim(stripesim.Config{Charges: charges, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	twin, err := crashrig.StartSim(stripesim.Config{Charges: charges, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(twin.Close)
	return &bindRig{t: t, sim: sim, twin: twin, dir: t.TempDir(), url: srv.URL("imports") + "?monitor=" + srv.MonitorURL()}, srv
}

// natsItems are plan lines of the rig's batch: item nK on charge ch_nK,
// 5.00 each.
func natsItems(ks ...int) []string {
	var lines []string
	for _, k := range ks {
		lines = append(lines, bindItem(fmt.Sprintf("n%d", k), fmt.Sprintf("ch_n%d", k), 500))
	}
	return lines
}

// export is the checkpoint's records as journal-merge exports them.
func (r *bindRig) export() string {
	r.t.Helper()
	p := r.run("journal-merge", "", nil, r.url)
	r.want(p, ExitOK, "the export of the checkpoint")
	return p.Stdout.String()
}

// TestNATSImportWorkerJournals: the journals of two shard workers
// (journal files) imported into a new NATS checkpoint; the same import
// again adds nothing; refund over the checkpoint with the whole plan then
// sends only the item neither shard refunded, and audit of the checkpoint
// is clean.
func TestNATSImportWorkerJournals(t *testing.T) {
	r, _ := newNATSImportRig(t)
	a, b := filepath.Join(r.dir, "a.jsonl"), filepath.Join(r.dir, "b.jsonl")
	r.want(r.run("refund", r.write("plan-a.jsonl", natsItems(1, 2, 3)...), nil, "--journal", a, "--rate", "0"), ExitOK, "shard a")
	r.want(r.run("refund", r.write("plan-b.jsonl", natsItems(4, 5)...), nil, "--journal", b, "--rate", "0"), ExitOK, "shard b")
	creates := r.sim.Creates()

	p := r.run("journal-merge", "", nil, "-o", r.url, a, b)
	r.want(p, ExitOK, "the import of the shards' journals")
	t.Logf("the import: %s", &p.Stderr)
	wantIn(t, "the import", p.Stderr.String(), "imported 10 records of 1 batch (bind)", "10 records from 3 journals")
	exported := r.export()

	p = r.run("journal-merge", "", nil, "-o", r.url, a, b)
	r.want(p, ExitOK, "the same import again")
	t.Logf("the same import again: %s", &p.Stderr)
	wantIn(t, "the same import again", p.Stderr.String(), "nothing new imported", "10 identical records left out")
	if strings.Contains(p.Stderr.String(), "imported 10") {
		t.Errorf("the same import again says it imported records: %s", &p.Stderr)
	}
	if again := r.export(); again != exported {
		t.Errorf("the same import again changed the checkpoint:\n%s\nwas\n%s", again, exported)
	}

	p = r.worker(r.write("plan.jsonl", natsItems(1, 2, 3, 4, 5, 6)...), "W", nil)
	r.want(p, ExitOK, "the whole plan over the checkpoint")
	if n := r.sim.Creates() - creates; n != 1 {
		t.Errorf("the whole plan over the imported checkpoint made %d refund calls, want 1 (item n6)", n)
	}
	for k := 1; k <= 6; k++ {
		if rs := r.refundsOn(fmt.Sprintf("ch_n%d", k)); len(rs) != 1 {
			t.Errorf("charge ch_n%d: %d refunds at the simulator, want 1", k, len(rs))
		}
	}
	p = r.run("audit", "", nil, r.url)
	r.want(p, ExitOK, "audit of the checkpoint")
	wantIn(t, "audit", p.Stdout.String()+p.Stderr.String(), "no findings")
}

// TestNATSImportContradictionRefused: a journal whose item n1 was refunded
// on another charge for another amount (the twin's account) is refused by
// a checkpoint that stores the plan and n1's refund: exit 2, naming the
// journal, its line and the item, and nothing is imported.
func TestNATSImportContradictionRefused(t *testing.T) {
	r, _ := newNATSImportRig(t)
	r.want(r.worker(r.write("plan.jsonl", natsItems(1, 2)...), "W", nil), ExitOK, "the plan over the checkpoint")
	j := filepath.Join(r.dir, "j.jsonl")
	other := r.write("other.jsonl", bindItem("n1", "ch_n3", 800))
	r.want(r.run("refund", other, r.onTwin(), "--journal", j, "--rate", "0"), ExitOK, "the other plan on the twin")
	before := r.export()

	p := r.run("journal-merge", "", nil, "-o", r.url, j)
	r.want(p, ExitUsage, "the import of a journal the checkpoint contradicts")
	msg := p.Stderr.String()
	t.Logf("refused: %s", msg)
	if !regexp.MustCompile(regexp.QuoteMeta(j) + `:\d+: `).MatchString(msg) {
		t.Errorf("the refusal names no line of %s: %s", j, msg)
	}
	wantIn(t, "the refusal", msg, `item "n1"`, `charge "ch_n1"`, `charge "ch_n3"`, "nothing was imported")
	if after := r.export(); after != before {
		t.Errorf("the refused import changed the checkpoint:\n%s\nwas\n%s", after, before)
	}
	r.want(r.run("audit", "", nil, r.url), ExitOK, "audit after the refused import")
}

// TestNATSImportHeldItemRefused: an item a worker holds (claimed, not
// given back) stops the import of records for it: exit 4, nothing
// imported; given back, the same import goes in.
func TestNATSImportHeldItemRefused(t *testing.T) {
	r, _ := newNATSImportRig(t)
	j := filepath.Join(r.dir, "j.jsonl")
	r.want(r.run("refund", r.write("plan.jsonl", natsItems(1, 2)...), nil, "--journal", j, "--rate", "0"), ExitOK, "the plan on a file journal")

	ctx := context.Background()
	w, err := natsjs.Open(ctx, r.url, natsjs.Options{Worker: "holder"}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var plan []refund.PlanLine
	for i, line := range natsItems(1, 2) {
		it, err := refund.ParseItem([]byte(line))
		if err != nil {
			t.Fatal(err)
		}
		plan = append(plan, refund.PlanLine{Line: i + 1, Item: &it})
	}
	if err := w.Load(ctx, plan); err != nil {
		t.Fatal(err)
	}
	got, _, err := w.Claim(ctx, 1, false)
	if err != nil || len(got) != 1 {
		t.Fatalf("claim: %+v %v", got, err)
	}
	before := r.export()
	p := r.run("journal-merge", "", nil, "-o", r.url, j)
	r.want(p, ExitLocked, "the import over a held item")
	t.Logf("refused: %s", &p.Stderr)
	wantIn(t, "the refusal", p.Stderr.String(), "nats checkpoint busy", "holder", fmt.Sprintf("item %q", got[0].Item), "nothing was imported")
	if after := r.export(); after != before {
		t.Errorf("the refused import changed the checkpoint:\n%s", after)
	}
	if err := w.Release(ctx, got[0].Batch, got[0].Item); err != nil {
		t.Fatal(err)
	}
	p = r.run("journal-merge", "", nil, "-o", r.url, j)
	r.want(p, ExitOK, "the import once the item was given back")
	wantIn(t, "the import", p.Stderr.String(), "imported 4 records")
}

// TestNATSImportNeverPrintsThePassword: neither the checkpoint imported
// into nor one merged from prints its URL's password, whether the server
// answers or not.
func TestNATSImportNeverPrintsThePassword(t *testing.T) {
	const secret = "Imp0rt-SECRET-pw"
	r, srv := newNATSImportRig(t)
	j := filepath.Join(r.dir, "j.jsonl")
	r.want(r.run("refund", r.write("plan.jsonl", natsItems(1)...), nil, "--journal", j, "--rate", "0"), ExitOK, "the plan on a file journal")
	withPW := fmt.Sprintf("nats://admin:%s@127.0.0.1:%d/imports?monitor=%s", secret, srv.Port, srv.MonitorURL())
	closed := fmt.Sprintf("nats://admin:%s@127.0.0.1:1/imports", secret)
	for _, c := range []struct {
		what string
		code int
		args []string
	}{
		{"the import", ExitOK, []string{"-o", withPW, j}},
		{"the import into a server that does not answer", ExitJournal, []string{"-o", closed, j}},
		{"the merge of the checkpoint into a file", ExitOK, []string{"-o", filepath.Join(r.dir, "out.jsonl"), withPW, j}},
		{"the merge of a checkpoint that does not answer", ExitUsage, []string{closed}},
	} {
		p := r.run("journal-merge", "", nil, c.args...)
		r.want(p, c.code, c.what)
		t.Logf("%s: %s", c.what, &p.Stderr)
		if strings.Contains(p.Stderr.String()+p.Stdout.String(), secret) {
			t.Errorf("%s prints the password: %s", c.what, &p.Stderr)
		}
	}
}
