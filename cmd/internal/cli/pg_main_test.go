package cli

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/refundkit/refundkit/refund/checkpoint/postgres/pgtest"
)

// The PostgreSQL tests of this package share one throwaway server, started
// on first use (most runs of the package's tests never need it) and
// stopped after them by TestMain through stopPostgresAfter.

var sharedPG struct {
	once sync.Once
	srv  *pgtest.Server
	err  error
}

// pgServer is the package's PostgreSQL server, started on first use. A
// machine that cannot start one fails the test: the checkpoint's tests
// never skip.
func pgServer(t testing.TB) *pgtest.Server {
	t.Helper()
	sharedPG.once.Do(func() { sharedPG.srv, sharedPG.err = pgtest.Start(pgtest.Options{}) })
	if sharedPG.err != nil {
		t.Fatalf("the PostgreSQL tests need a PostgreSQL server (apt-get install postgresql, or set REFUNDKIT_PG_BIN): %v", sharedPG.err)
	}
	return sharedPG.srv
}

// stopPostgresAfter runs the package's tests, then stops the server if
// one was started; a failed stop fails the run.
type stopPostgresAfter struct{ m *testing.M }

func (s stopPostgresAfter) Run() int {
	code := s.m.Run()
	if sharedPG.srv != nil {
		if err := sharedPG.srv.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the PostgreSQL test server: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

var pgDBSeq atomic.Int64

// newPGDB creates a fresh database for t on srv and returns its name and
// URL (unix socket, superuser); it is dropped when t ends.
func newPGDB(t testing.TB, srv *pgtest.Server) (name, dbURL string) {
	t.Helper()
	name = regexp.MustCompile(`[^a-z0-9_]+`).ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(name) > 40 {
		name = name[:40]
	}
	name = "t_" + name + "_" + strconv.FormatInt(pgDBSeq.Add(1), 10)
	dbURL, err := srv.CreateDB(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.DropDB(context.Background(), name); err != nil {
			t.Errorf("dropping the test's database: %v", err)
		}
	})
	return name, dbURL
}
