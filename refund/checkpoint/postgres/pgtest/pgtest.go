// Package pgtest runs throwaway PostgreSQL servers for tests, the chaos rig
// and scripts: each Server is a fresh cluster (initdb) in its own temp
// directory, reachable over a unix socket there (superuser postgres, no
// password) and over TCP on 127.0.0.1 (SCRAM), gone after Stop. As root the
// binaries run as the postgres user, who initdb requires. A package's tests
// share one server (Main, Shared) and take a fresh database each (NewDB).
//
// A server whose process dies without Stop is stopped and removed by its
// watchdog (its stdin pipe closes), or else by the next Start's sweep.
package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Options tune a server. The zero value is what tests want.
type Options struct {
	Fsync bool // keep fsync on, for the bench's durable writes
	// MaxConnections is the server's max_connections; 0 means 200.
	MaxConnections int
}

// Server is a running throwaway cluster, safe for concurrent use.
type Server struct {
	bin      string   // directory of initdb, pg_ctl, postgres
	owner    *account // the user the server runs as; nil: this process's user
	dir      string   // the temp dir: data/, server.log, the unix socket
	port     int      // TCP port on 127.0.0.1, also the socket's number
	opts     Options
	watchdog *watchdog

	mu      sync.Mutex
	running bool
	stopped bool // Stop was called: the directory is gone
}

const (
	dirPrefix = "refundkit-pg-" // then the owner's pid, for the sweep of leftovers
	portTries = 5               // another process may take a free port before the server binds it
)

// Start creates and starts a fresh cluster.
func Start(opts Options) (*Server, error) {
	if opts.MaxConnections == 0 {
		opts.MaxConnections = 200
	}
	bin, err := findBinDir()
	if err != nil {
		return nil, err
	}
	owner, err := serverAccount()
	if err != nil {
		return nil, err
	}
	sweepOrphans(bin, owner)

	dir, err := os.MkdirTemp("", dirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	// The socket's path must fit in a sockaddr_un (108 bytes with the NUL).
	if sock := filepath.Join(dir, ".s.PGSQL.65535.lock"); len(sock) > 107 {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgtest: socket path %s is too long for a unix socket: set TMPDIR to a shorter directory", sock)
	}
	s := &Server{bin: bin, owner: owner, dir: dir, opts: opts}
	if err := s.create(); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// create makes the cluster and starts it on a free port.
func (s *Server) create() error {
	// MkdirTemp's 0700 dir must belong to the server's user, who writes
	// the data dir, the log and the socket in it.
	if err := s.owner.chown(s.dir); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	if err := s.owner.canReach(s.dir); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	wd, err := startWatchdog(s)
	if err != nil {
		return err
	}
	s.watchdog = wd
	out, err := s.command("initdb", "-D", s.dataDir(), "-U", "postgres",
		"--auth-local=trust", "--auth-host=scram-sha-256",
		"-E", "UTF8", "--locale=C", "--no-instructions", "--no-sync").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgtest: initdb: %w\n%s", err, bytes.TrimSpace(out))
	}
	// Our settings live in their own file, rewritten for each port tried.
	conf, err := os.OpenFile(filepath.Join(s.dataDir(), "postgresql.conf"), os.O_WRONLY|os.O_APPEND, 0)
	if err == nil {
		_, err = conf.WriteString("\ninclude 'pgtest.conf'\n")
		err = errors.Join(err, conf.Close())
	}
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	for try := 1; ; try++ {
		if s.port, err = freePort(); err != nil {
			return err
		}
		if err = s.writeConfig(); err != nil {
			return err
		}
		s.mu.Lock()
		err = s.startLocked()
		s.mu.Unlock()
		if err == nil || try == portTries || !strings.Contains(s.logTail(), "could not bind") {
			return err
		}
	}
}

func (s *Server) writeConfig() error {
	fsync := "off"
	if s.opts.Fsync {
		fsync = "on"
	}
	conf := fmt.Sprintf(`# written by refundkit's pgtest
listen_addresses = '127.0.0.1'
port = %d
unix_socket_directories = %s
max_connections = %d
fsync = %s
`, s.port, confQuote(s.dir), s.opts.MaxConnections, fsync)
	path := filepath.Join(s.dataDir(), "pgtest.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	return s.owner.chown(path)
}

// confQuote quotes a postgresql.conf string value.
func confQuote(v string) string {
	return "'" + strings.ReplaceAll(v, "'", "''") + "'"
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtest: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }
func (s *Server) logPath() string { return filepath.Join(s.dir, "server.log") }

// command runs a server binary as the server's user, in the server's dir
// (root's working directory may be closed to that user), without the
// caller's PG* variables (PGPORT, PGDATA... would change what it does).
func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	cmd.Env = serverEnv()
	cmd.SysProcAttr = s.owner.sysProcAttr()
	return cmd
}

func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C")
}

func (s *Server) startLocked() error {
	out, err := s.command("pg_ctl", "start", "-w", "-t", "60", "-D", s.dataDir(), "-l", s.logPath()).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgtest: pg_ctl start: %w\n%s\nserver log (%s), last lines:\n%s",
			err, bytes.TrimSpace(out), s.logPath(), s.logTail())
	}
	s.running = true
	return nil
}

// stopLocked stops the server; mode is pg_ctl's: fast (roll back open
// transactions, checkpoint) or immediate (a crash: recovery on next start).
func (s *Server) stopLocked(mode string) error {
	if !s.running {
		return nil
	}
	out, err := s.command("pg_ctl", "stop", "-w", "-t", "60", "-m", mode, "-D", s.dataDir()).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pgtest: pg_ctl stop -m %s: %w\n%s", mode, err, bytes.TrimSpace(out))
	}
	s.running = false
	return nil
}

// logTail is the end of the server log, for errors.
func (s *Server) logTail() string {
	b, err := os.ReadFile(s.logPath())
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}

// Dir is the server's directory: its data dir, log (server.log) and unix
// socket live there.
func (s *Server) Dir() string { return s.dir }

// Port is the server's TCP port on 127.0.0.1 (and its unix socket's number).
func (s *Server) Port() int { return s.port }

// URL is a libpq URL for database db over the unix socket, as the
// superuser postgres with no password (local connections are trusted).
func (s *Server) URL(db string) string {
	host := strings.ReplaceAll(url.QueryEscape(s.dir), "%2F", "/")
	return fmt.Sprintf("postgres://postgres@/%s?host=%s&port=%d&sslmode=disable", url.PathEscape(db), host, s.port)
}

// TCPURL is a URL for database db over TCP on 127.0.0.1 as user with
// password; the server asks for it (SCRAM), so a wrong one fails.
func (s *Server) TCPURL(db, user, password string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(user, password),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// exec runs one statement as the superuser in the postgres database, to
// op (create database...) name.
func (s *Server) exec(ctx context.Context, op, name, sql string) error {
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err == nil {
		defer conn.Close(context.Background())
		_, err = conn.Exec(ctx, sql)
	}
	if err != nil {
		return fmt.Errorf("pgtest: %s %q: %w", op, name, err)
	}
	return nil
}

// CreateDB creates an empty database and returns its URL (see URL).
func (s *Server) CreateDB(ctx context.Context, name string) (string, error) {
	if name == "" {
		return "", errors.New("pgtest: CreateDB: empty database name")
	}
	if err := s.exec(ctx, "create database", name, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", err
	}
	return s.URL(name), nil
}

// DropDB drops a database, closing its open connections.
func (s *Server) DropDB(ctx context.Context, name string) error {
	return s.exec(ctx, "drop database", name, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

// CreateRole creates a login role with a password (printable ASCII), for
// TCPURL.
func (s *Server) CreateRole(ctx context.Context, name, password string) error {
	verifier, err := scramVerifier(password)
	if err != nil {
		return fmt.Errorf("pgtest: create role %q: %w", name, err)
	}
	return s.exec(ctx, "create role", name, "CREATE ROLE "+pgx.Identifier{name}.Sanitize()+" LOGIN PASSWORD '"+verifier+"'")
}

// Restart is Down then Up: the "database restarted mid-batch" case.
func (s *Server) Restart() error {
	if err := s.Down(); err != nil {
		return err
	}
	return s.Up()
}

// Down stops the server (fast shutdown) but keeps its data, socket and
// port, unreachable until Up.
func (s *Server) Down() error { return s.halt("Down", "fast") }

// Crash stops the server as a crash would: committed work survives through
// WAL recovery on Up.
func (s *Server) Crash() error { return s.halt("Crash", "immediate") }

func (s *Server) halt(op, mode string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return errors.New("pgtest: " + op + " after Stop")
	}
	return s.stopLocked(mode)
}

// Up starts a server stopped by Down or Crash on the same data, socket and
// port (if another process took the port meanwhile, Up fails).
func (s *Server) Up() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return errors.New("pgtest: Up after Stop")
	}
	if s.running {
		return nil
	}
	return s.startLocked()
}

// Stop stops the server (fast shutdown) and removes its directory.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil
	}
	s.stopped = true
	err := s.stopLocked("fast")
	if err != nil {
		// Removing the data under a live server would leave it running
		// until the watchdog's immediate stop: do that now.
		err = errors.Join(err, s.stopLocked("immediate"))
	}
	if rerr := os.RemoveAll(s.dir); rerr != nil {
		err = errors.Join(err, fmt.Errorf("pgtest: %w", rerr))
	}
	if s.watchdog != nil {
		s.watchdog.release()
	}
	return err
}

var shared *Server // Main's

// Main, as a package's TestMain, runs its tests against one shared server.
// A server that cannot start fails the tests (exit 1), never skips them.
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

// Shared is the server Main started; it panics without Main.
func Shared() *Server {
	if shared == nil {
		panic("pgtest.Shared: the package's TestMain must call pgtest.Main(m)")
	}
	return shared
}

var (
	dbSeq    atomic.Int64 // NewDB's names unique in the process
	notIdent = regexp.MustCompile(`[^a-z0-9_]+`)
)

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
