package cli

// Written by a review of the shared checkpoint, failing on the defect its
// comment describes (as found); it now guards the fix.

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestAuditOfTheWrongDatabaseWritesNothing: audit aimed at a database that
// holds no checkpoint (a typo that hits another database) rightly says
// "nothing to audit" (exit 2), but it has created the refundkit schema
// there: Open migrates even when opened read-only (postgres.go:107).
func TestAuditOfTheWrongDatabaseWritesNothing(t *testing.T) {
	_, url := newPGDB(t, pgServer(t))
	var out, errb bytes.Buffer
	code := Audit(Env{Args: []string{url}, Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }})
	if code != ExitUsage || !strings.Contains(errb.String(), "nothing to audit") {
		t.Errorf("exit %d, want %d with nothing to audit: %s", code, ExitUsage, &errb)
	}
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var tables int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM information_schema.tables WHERE table_schema = 'refundkit'`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Errorf("audit, a reader, created %d refundkit tables in the database it was aimed at", tables)
	}
}
