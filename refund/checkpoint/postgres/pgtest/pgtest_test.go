package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// helperEnv makes the test binary play a part for a test instead of
// running the tests: "orphan" starts a server and waits to be killed,
// "main" runs Main with what the environment gives it.
const helperEnv = "PGTEST_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "orphan":
		orphanHelper()
	case "main":
		Main(m)
	}
	Main(m)
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func queryString(t *testing.T, conn *pgx.Conn, sql string) string {
	t.Helper()
	var s string
	if err := conn.QueryRow(context.Background(), sql).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

func TestNewDBOverSocket(t *testing.T) {
	url := NewDB(t)
	if !strings.Contains(url, "host="+Shared().Dir()) {
		t.Errorf("URL %s is not over the socket in %s", url, Shared().Dir())
	}
	conn := connect(t, url)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, "CREATE TABLE t (v text); INSERT INTO t VALUES ('kept')"); err != nil {
		t.Fatal(err)
	}
	if got := queryString(t, conn, "SELECT v FROM t"); got != "kept" {
		t.Errorf("read back %q", got)
	}
	if got := queryString(t, conn, "SELECT current_user"); got != "postgres" {
		t.Errorf("current_user %q, want postgres", got)
	}
	if got := queryString(t, conn, "SHOW synchronous_commit"); got != "on" {
		t.Errorf("synchronous_commit %q, want on", got)
	}
	if got := queryString(t, conn, "SHOW fsync"); got != "off" {
		t.Errorf("fsync %q, want off by default", got)
	}
	if got := queryString(t, conn, "SHOW max_connections"); got != "200" {
		t.Errorf("max_connections %q, want 200", got)
	}
}

// Tests of one package create databases in parallel.
func TestCreateDBConcurrently(t *testing.T) {
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = Shared().CreateDB(context.Background(), fmt.Sprintf("Concurrent %d", i))
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("database %d: %v", i, err)
		}
	}
	// A quoted name with a space and capitals is a database of its own.
	conn := connect(t, Shared().URL("Concurrent 3"))
	if got := queryString(t, conn, "SELECT current_database()"); got != "Concurrent 3" {
		t.Errorf("current_database %q", got)
	}
	if _, err := Shared().CreateDB(context.Background(), "Concurrent 3"); err == nil {
		t.Error("creating an existing database succeeded")
	}
}

func TestTCPWithPassword(t *testing.T) {
	s := Shared()
	ctx := context.Background()
	db := strings.TrimPrefix(strings.SplitN(NewDB(t), "?", 2)[0], "postgres://postgres@/")
	password := "pw-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "'\\\"$"
	if err := s.CreateRole(ctx, "alice", password); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, s.TCPURL(db, "alice", password))
	if got := queryString(t, conn, "SELECT current_user"); got != "alice" {
		t.Errorf("current_user %q, want alice", got)
	}
	if got := queryString(t, conn, "SELECT inet_server_addr()::text"); got != "127.0.0.1/32" {
		t.Errorf("server address %q, want 127.0.0.1 (TCP)", got)
	}

	_, err := pgx.Connect(ctx, s.TCPURL(db, "alice", password+"x"))
	if err == nil {
		t.Fatal("a wrong password connected")
	}
	if !strings.Contains(err.Error(), "password authentication failed") {
		t.Errorf("wrong password: %v", err)
	}
	if strings.Contains(err.Error(), password) {
		t.Errorf("the error shows the password: %v", err)
	}
	// Neither the role's creation nor the failed login put the password
	// in the server's log.
	log, err := os.ReadFile(filepath.Join(s.Dir(), "server.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), `password authentication failed for user "alice"`) {
		t.Errorf("the log does not show the failed login:\n%s", log)
	}
	if strings.Contains(string(log), password) {
		t.Errorf("the server log shows the password")
	}

	// A failing CreateRole does not show the password either.
	err = s.CreateRole(ctx, "alice", password)
	if err == nil || strings.Contains(err.Error(), password) {
		t.Errorf("creating alice twice: %v", err)
	}
	if err := s.CreateRole(ctx, "bob", "pässword"); err == nil || strings.Contains(err.Error(), "pässword") {
		t.Errorf("a non-ASCII password: %v", err)
	}
}

// startOwn starts a server of the test's own, for tests that stop it.
func startOwn(t *testing.T, opts Options) *Server {
	t.Helper()
	s, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func TestRestartDownUpCrashKeepData(t *testing.T) {
	s := startOwn(t, Options{Fsync: true, MaxConnections: 20})
	ctx := context.Background()
	url, err := s.CreateDB(ctx, "keep")
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t, url)
	if got := queryString(t, conn, "SHOW fsync"); got != "on" {
		t.Errorf("fsync %q with Options.Fsync", got)
	}
	if got := queryString(t, conn, "SHOW max_connections"); got != "20" {
		t.Errorf("max_connections %q, want 20", got)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE t (v int); INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	port := s.Port()

	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	// The old connection was cut by the restart.
	if err := conn.Ping(ctx); err == nil {
		t.Error("a connection survived the restart")
	}
	if s.Port() != port {
		t.Errorf("port %d after restart, was %d", s.Port(), port)
	}
	conn = connect(t, url)
	if got := queryString(t, conn, "SELECT string_agg(v::text, ',') FROM t"); got != "1" {
		t.Errorf("after restart: %q", got)
	}

	if err := s.Down(); err != nil {
		t.Fatal(err)
	}
	if c, err := pgx.Connect(ctx, url); err == nil {
		c.Close(ctx)
		t.Fatal("connected while down")
	}
	if err := s.Down(); err != nil {
		t.Errorf("second Down: %v", err)
	}
	if err := s.Up(); err != nil {
		t.Fatal(err)
	}
	conn = connect(t, url)
	if _, err := conn.Exec(ctx, "INSERT INTO t VALUES (2)"); err != nil {
		t.Fatal(err)
	}

	// A crash keeps what was committed (WAL recovery).
	if err := s.Crash(); err != nil {
		t.Fatal(err)
	}
	if err := s.Up(); err != nil {
		t.Fatal(err)
	}
	conn = connect(t, url)
	if got := queryString(t, conn, "SELECT string_agg(v::text, ',' ORDER BY v) FROM t"); got != "1,2" {
		t.Errorf("after crash: %q", got)
	}
	// Over TCP too, on the same port.
	if err := s.CreateRole(ctx, "carol", "secret-carol"); err != nil {
		t.Fatal(err)
	}
	conn = connect(t, s.TCPURL("keep", "carol", "secret-carol"))
	if got := queryString(t, conn, "SELECT current_user"); got != "carol" {
		t.Errorf("current_user %q", got)
	}
}

func TestStopRemovesDir(t *testing.T) {
	s, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	url := s.URL("postgres")
	connect(t, url) // the server is up
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dir %s after Stop: %v", s.Dir(), err)
	}
	if c, err := pgx.Connect(context.Background(), s.TCPURL("postgres", "postgres", "x")); err == nil {
		c.Close(context.Background())
		t.Error("connected after Stop")
	}
	if err := s.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if err := s.Up(); err == nil {
		t.Error("Up after Stop succeeded")
	}
}

func TestNoBinaries(t *testing.T) {
	t.Setenv("REFUNDKIT_PG_BIN", t.TempDir())
	if _, err := Start(Options{}); !errors.Is(err, ErrNoServerBinary) {
		t.Errorf("Start with an empty REFUNDKIT_PG_BIN: %v", err)
	}
}

// Main must fail, not skip, when it cannot start a server.
func TestMainFailsWithoutBinaries(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=main", "REFUNDKIT_PG_BIN="+t.TempDir())
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("Main without binaries: %v, want exit 1\n%s", err, out)
	}
	want := "PostgreSQL tests need a PostgreSQL server binary: apt-get install postgresql (Debian) or set REFUNDKIT_PG_BIN\n"
	if !strings.HasPrefix(string(out), want) || !strings.Contains(string(out), "holds no initdb") {
		t.Errorf("Main's message:\n%s", out)
	}
}

// orphanHelper starts a server, tells the test where, and waits to be
// killed without a chance to stop it.
func orphanHelper() {
	s, err := Start(Options{})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println(s.Dir(), s.Port(), s.watchdog.cmd.Process.Pid)
	select {}
}

// The next Start removes directories whose process is gone.
func TestSweepRemovesOrphanDirs(t *testing.T) {
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", dirPrefix+strconv.Itoa(gone.Process.Pid)+"-")
	if err != nil {
		t.Fatal(err)
	}
	mine, err := os.MkdirTemp("", dirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(mine)
	sweepOrphans(Shared().bin, Shared().owner)
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("orphan dir %s after the sweep: %v", dir, err)
	}
	if _, err := os.Stat(mine); err != nil {
		t.Errorf("a live process's dir was swept: %v", err)
	}
}

// As root, a TMPDIR the postgres user cannot enter is named in the error.
func TestCanReach(t *testing.T) {
	other := &account{name: "someone", uid: os.Getuid() + 4242, gid: os.Getgid() + 4242}
	// Not t.TempDir: its parent is 0700 too.
	closed, err := os.MkdirTemp("", "pgtest-reach-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(closed)
	if err := other.canReach(closed); err != nil {
		t.Fatalf("the temp dir itself: %v", err)
	}
	if err := os.Chmod(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := other.canReach(filepath.Join(closed, "server")); err == nil || !strings.Contains(err.Error(), closed) {
		t.Errorf("a 0700 dir of another user: %v", err)
	}
	if err := os.Chmod(closed, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := other.canReach(filepath.Join(closed, "server")); err != nil {
		t.Errorf("a 0711 dir: %v", err)
	}
}
