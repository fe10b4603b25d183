package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// shared is the server Main started for the package's tests.
var shared *Server

// Main runs a package's tests against one server shared by all of them;
// call it as the package's TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// It stops the server after the tests. When no server can start it says
// why on stderr and exits 1: the PostgreSQL tests fail, never skip, so
// `make test` cannot pass without them.
func Main(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	s, err := Start(Options{})
	if err != nil {
		if errors.Is(err, ErrNoServerBinary) {
			fmt.Fprintf(os.Stderr, "PostgreSQL tests need a PostgreSQL server binary: apt-get install postgresql (Debian) or set REFUNDKIT_PG_BIN\n%v\n", err)
		} else {
			fmt.Fprintf(os.Stderr, "PostgreSQL tests could not start a PostgreSQL server:\n%v\n", err)
		}
		return 1
	}
	shared = s
	code := m.Run()
	if err := s.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: stopping the shared server: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Shared is the server Main started. It panics when the package's
// TestMain does not call Main: a programming error, not a skip.
func Shared() *Server {
	if shared == nil {
		panic("pgtest.Shared: the package's TestMain must call pgtest.Main(m)")
	}
	return shared
}

// dbSeq keeps NewDB's names unique within the process.
var dbSeq atomic.Int64

// notIdent is what may not appear in NewDB's database names.
var notIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// NewDB creates a fresh database on the shared server for t, named after the
// test, and returns its URL.
func NewDB(t testing.TB) string {
	t.Helper()
	name := notIdent.ReplaceAllString(strings.ToLower(t.Name()), "_")
	suffix := "_" + strconv.FormatInt(dbSeq.Add(1), 10)
	if len(name) > 40 {
		name = name[:40]
	}
	name = "t_" + name + suffix
	s := Shared()
	u, err := s.CreateDB(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.DropDB(context.Background(), name); err != nil {
			t.Errorf("dropping the test's database: %v", err)
		}
	})
	return u
}
