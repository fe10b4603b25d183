package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

func init() { scriptCommands["audit"] = runAs(Audit) }

// TestAuditWillNotBackfillALockedJournal: a refund run holding the journal
// keeps audit from writing to it (exit 4), before any call to Stripe.
func TestAuditWillNotBackfillALockedJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	w, _, _, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var stdout, stderr bytes.Buffer
	env := Env{
		Args:   []string{"--stripe", "--backfill", path, path},
		Stdin:  strings.NewReader(""),
		Stdout: &stdout, Stderr: &stderr,
		Getenv: func(k string) string {
			return map[string]string{"STRIPE_API_KEY": scriptKey, "STRIPE_API_BASE": "http://127.0.0.1:1"}[k]
		},
	}
	if code := Audit(env); code != ExitLocked {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, ExitLocked, stderr.String())
	}
	if want := "audit: journal " + path + " is locked by another run\n"; stderr.String() != want || stdout.Len() != 0 {
		t.Errorf("stderr %q, want %q; stdout %q", stderr.String(), want, stdout.String())
	}
}

// TestAuditOfALiveRunSaysSo: audit of the journal a real refund run is
// writing, with calls held in flight at the simulator, says on stderr that
// a running refund holds it, and every in_doubt finding says the run is
// live, whether the journal is named or on stdin. The journal is left
// untouched; once the run is done, audit is clean and says nothing of it.
func TestAuditOfALiveRunSaysSo(t *testing.T) {
	const items, workers = 20, 4
	r := newCrashRig(t, items, stripesim.Faults{})
	path := filepath.Join(r.dir, "j.jsonl")
	held, release := holdCreates(t, r, workers)
	run, runErr := r.start(path, "-j", fmt.Sprint(workers))
	held() // every worker has journaled its intent and waits for Stripe

	bin, err := exec.LookPath("audit")
	if err != nil {
		t.Fatal(err)
	}
	audit := func(stdin string, args ...string) (code int, stdout, stderr string) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		if stdin != "" {
			f, err := os.Open(stdin)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			cmd.Stdin = f
		}
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		return crashrig.ExitCode(cmd.Run()), out.String(), errOut.String()
	}

	before := snapshot(t, path)
	for _, c := range []struct {
		name, stdin string
		args        []string
	}{
		{path, "", []string{path}},
		{"<stdin>", path, nil},
	} {
		code, stdout, stderr := audit(c.stdin, c.args...)
		if code != ExitFailed {
			t.Errorf("audit of %s during the run exited %d, want %d: %s", c.name, code, ExitFailed, stderr)
		}
		want := "audit: journal " + c.name + " is held by a running refund: items in flight show as in doubt; audit again when it has finished\n"
		if !strings.HasPrefix(stderr, want) {
			t.Errorf("audit of %s during the run: stderr does not start %q:\n%s", c.name, want, stderr)
		}
		if strings.Contains(stderr, "no findings") {
			t.Errorf("audit of %s during the run says no findings:\n%s", c.name, stderr)
		}
		doubts := 0
		for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
			var f struct{ Finding, Message, Remedy string }
			if err := json.Unmarshal([]byte(line), &f); err != nil {
				t.Fatalf("finding %q: %v", line, err)
			}
			if f.Finding != "in_doubt" {
				t.Errorf("finding during the run: %s", line)
				continue
			}
			doubts++
			if wantMsg := "journal " + c.name + " is held by a running refund: this item may be in flight now"; f.Message != wantMsg {
				t.Errorf("in_doubt message %q, want %q", f.Message, wantMsg)
			}
			if !strings.HasPrefix(f.Remedy, "audit again when the run has finished") {
				t.Errorf("in_doubt remedy %q does not start with waiting for the run", f.Remedy)
			}
		}
		if doubts < workers {
			t.Errorf("audit of %s during the run: %d in_doubt findings, want at least the %d calls in flight:\n%s", c.name, doubts, workers, stdout)
		}
	}
	before.check(t, path)

	release()
	if err := run.Wait(); err != nil {
		t.Fatalf("the run: %v: %s", err, runErr)
	}
	r.checkExactlyOnce(path, items)
	code, stdout, stderr := audit("", path)
	if code != ExitOK || stdout != "" || strings.Contains(stderr, "held") {
		t.Errorf("audit after the run: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
