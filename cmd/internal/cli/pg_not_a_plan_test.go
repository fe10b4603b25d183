package cli

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/refundkit/refundkit/scripts/crashrig"
)

// TestPGNotAPlanWritesNothing: refund --journal postgres://... fed a first
// line that is not a plan item (the charges themselves) exits 2 naming the
// line and plan, prints no summary, and writes nothing to the database:
// not even the schema a first worker creates.
func TestPGNotAPlanWritesNothing(t *testing.T) {
	_, dbURL := newPGDB(t, pgServer(t))
	bin, err := exec.LookPath("refund")
	if err != nil {
		t.Fatal(err)
	}
	for _, input := range []string{"ch_1\n", "charge,amount\nch_1,500\n", `{"batch":"b1","charge":"ch_1"}` + "\n"} {
		cmd := exec.Command(bin, "--journal", dbURL)
		cmd.Env = crashrig.Env(scriptKey, "http://127.0.0.1:1") // no API is reached
		cmd.Stdin = strings.NewReader(input)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		code := crashrig.ExitCode(cmd.Run())
		if code != ExitUsage || stdout.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q; want exit %d and no output: %s", input, code, stdout.String(), ExitUsage, &stderr)
		}
		msg := stderr.String()
		for _, want := range []string{"refund: <stdin>:1: ", "make plan items with: plan --batch BATCH FILE"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%q: stderr does not say %q: %s", input, want, msg)
			}
		}
		if strings.Contains(msg, "items:") || strings.Contains(msg, "checkpoint") {
			t.Errorf("%q: stderr has a summary or a checkpoint's message: %s", input, msg)
		}
	}
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var tables int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Errorf("%d tables in the database after refunds of no plan: want none", tables)
	}
}
