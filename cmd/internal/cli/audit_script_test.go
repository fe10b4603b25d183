package cli

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/refundkit/refundkit/journal"
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
