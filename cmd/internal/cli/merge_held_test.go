package cli

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// TestMergeOfAHeldJournalIsRefused: two shard workers, one finished, one a
// real refund run with calls held in flight at the simulator. Merging the
// live one's journal is refused (exit 4) naming it, with nothing written:
// merged, the half-done batch would read as a finished one. With
// --allow-held the merge is written and says it is a snapshot of a batch
// in progress; audit with the plan finds the items not yet started, and
// audit without it does not say the batch is done. Once the run has
// finished, the merge is plain and the audit clean.
func TestMergeOfAHeldJournalIsRefused(t *testing.T) {
	const items, workers = 20, 4
	r := newCrashRig(t, items, stripesim.Faults{})
	one, two := filepath.Join(r.dir, "shard1.jsonl"), filepath.Join(r.dir, "shard2.jsonl")
	all := filepath.Join(r.dir, "all.jsonl")
	run := func(bin string, args ...string) (code int, stdout, stderr string) {
		t.Helper()
		path, err := exec.LookPath(bin)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(path, args...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		return crashrig.ExitCode(cmd.Run()), out.String(), errOut.String()
	}

	done, doneErr := r.start(two, "--shard", "2/2")
	if err := done.Wait(); err != nil {
		t.Fatalf("shard 2: %v: %s", err, doneErr)
	}
	// The next workers creates are held: shard 2's came before.
	hold := crashrig.NewHold(r.sim.Creates()+1, workers)
	t.Cleanup(hold.Free) // before the simulator closes: it waits for its hook
	r.sim.OnCreate(hold.Park)
	release := hold.Free
	held := func() {
		t.Helper()
		select {
		case <-hold.Held():
		case <-time.After(30 * time.Second):
			t.Fatalf("fewer than %d refund calls in flight after 30 s", workers)
		}
	}
	live, liveErr := r.start(one, "--shard", "1/2", "-j", fmt.Sprint(workers))
	held() // every worker has journaled its intent and waits for Stripe

	before := snapshot(t, one)
	for _, args := range [][]string{{one, two}, {"-o", all, one, two}, {"--compact", "-o", all, two, one}} {
		code, stdout, stderr := run("journal-merge", args...)
		if code != ExitLocked || stdout != "" {
			t.Errorf("journal-merge %q during the run: exit %d, stdout %d bytes; want exit %d and none", args, code, len(stdout), ExitLocked)
		}
		want := "journal-merge: journal " + one + " is held by a running refund: its batch is not done, and a merge of it would read as if it were\n" +
			"journal-merge: nothing merged: merge when the run has finished, or give --allow-held for a snapshot of the batch as it stands\n"
		if stderr != want {
			t.Errorf("journal-merge %q during the run: stderr\n%s\nwant\n%s", args, stderr, want)
		}
		if _, err := os.Stat(all); !os.IsNotExist(err) {
			t.Errorf("journal-merge %q during the run left %s behind (%v)", args, all, err)
		}
	}

	code, _, stderr := run("journal-merge", "--allow-held", "-o", all, one, two)
	if code != ExitOK {
		t.Fatalf("journal-merge --allow-held exited %d: %s", code, stderr)
	}
	for _, want := range []string{
		"journal-merge: journal " + one + " was held by a running refund: merged as it stood\n",
		"journal-merge: the merge is a snapshot of a batch in progress, not a finished batch",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("journal-merge --allow-held: stderr does not say %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, two+" was held") {
		t.Errorf("journal-merge --allow-held names the finished shard as held:\n%s", stderr)
	}
	// The snapshot's audit: with the plan, the items not started are
	// missing; without it, the verdict is never "the batch is done".
	code, stdout, stderr := run("audit", "--plan", r.plan, all)
	if code != ExitFailed || !strings.Contains(stdout, `"finding":"missing"`) || !strings.Contains(stdout, `"finding":"in_doubt"`) {
		t.Errorf("audit --plan of the snapshot: exit %d, want %d with missing and in_doubt findings: %s\n%s", code, ExitFailed, stdout, stderr)
	}
	code, _, stderr = run("audit", all)
	if code == ExitOK || strings.Contains(stderr, "no findings") {
		t.Errorf("audit of the snapshot without --plan: exit %d, stderr %s", code, stderr)
	}
	before.check(t, one)

	release()
	if err := live.Wait(); err != nil {
		t.Fatalf("shard 1: %v: %s", err, liveErr)
	}
	code, _, stderr = run("journal-merge", "-o", all, one, two)
	if code != ExitOK || strings.Contains(stderr, "held") || strings.Contains(stderr, "snapshot") {
		t.Errorf("journal-merge after the run: exit %d, stderr %s", code, stderr)
	}
	r.checkExactlyOnce(all, items)
	code, stdout, stderr = run("audit", "--plan", r.plan, all)
	if code != ExitOK || stdout != "" || !strings.Contains(stderr, "audit: no findings: every audited item has exactly one refund\n") {
		t.Errorf("audit --plan after the run: exit %d, stdout %q, stderr %s", code, stdout, stderr)
	}
}

// TestAuditWithoutPlanSaysWhatItCannotKnow: a clean audit without --plan
// of a batch half done (the merge of a finished shard alone) says its
// verdict is of the items the journals name, and how to know the batch
// is done; with the plan, the items never started are missing.
func TestAuditWithoutPlanSaysWhatItCannotKnow(t *testing.T) {
	const items = 10
	r := newCrashRig(t, items, stripesim.Faults{})
	two := filepath.Join(r.dir, "shard2.jsonl")
	p, pErr := r.start(two, "--shard", "2/2")
	if err := p.Wait(); err != nil {
		t.Fatalf("shard 2: %v: %s", err, pErr)
	}
	bin, err := exec.LookPath("audit")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, two)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	code := crashrig.ExitCode(cmd.Run())
	want := "audit: no findings: every audited item has exactly one refund (without --plan, only the items the journals name: audit --plan PLAN to know the batch is done)\n"
	if code != ExitOK || !strings.HasSuffix(stderr.String(), want) {
		t.Errorf("audit of one shard without --plan: exit %d, stderr\n%s\nwant it to end\n%s", code, &stderr, want)
	}
	cmd = exec.Command(bin, "--plan", r.plan, two)
	stdout.Reset()
	stderr.Reset()
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if code := crashrig.ExitCode(cmd.Run()); code != ExitFailed || !strings.Contains(stdout.String(), `"finding":"missing"`) {
		t.Errorf("audit --plan of one shard: exit %d, stdout %s, stderr %s", code, &stdout, &stderr)
	}
}
