package pgtest

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrNoServerBinary means no PostgreSQL server binaries (initdb, pg_ctl)
// were found: the message Main prints tells how to install them.
var ErrNoServerBinary = errors.New("no PostgreSQL server binaries (initdb, pg_ctl) found")

// findBinDir returns the directory holding initdb and pg_ctl:
// $REFUNDKIT_PG_BIN when set (and nothing else, so a wrong setting is an
// error, not a silent fallback), else `pg_config --bindir` when that holds
// them (libpq-dev's pg_config can point at a directory without a server),
// else the highest version under /usr/lib/postgresql (Debian's layout).
func findBinDir() (string, error) {
	if dir := os.Getenv("REFUNDKIT_PG_BIN"); dir != "" {
		if !hasServer(dir) {
			return "", fmt.Errorf("%w: REFUNDKIT_PG_BIN=%s holds no initdb and pg_ctl", ErrNoServerBinary, dir)
		}
		return dir, nil
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if dir := strings.TrimSpace(string(out)); hasServer(dir) {
			return dir, nil
		}
	}
	initdbs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	best := ""
	for _, p := range initdbs {
		// The highest version: "15" is above "9.6" by number, not by text.
		if dir := filepath.Dir(p); hasServer(dir) && (best == "" || version(dir) > version(best)) {
			best = dir
		}
	}
	if best == "" {
		return "", fmt.Errorf("%w: not in $REFUNDKIT_PG_BIN (unset), `pg_config --bindir` or /usr/lib/postgresql/*/bin", ErrNoServerBinary)
	}
	return best, nil
}

// version is the number of /usr/lib/postgresql/<version>/bin.
func version(bindir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(bindir)), 64)
	return v
}

func hasServer(dir string) bool {
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// account is the user the server's binaries run as when this process is
// root (initdb and postgres refuse root); nil means this process's user.
type account struct {
	name     string
	uid, gid int
}

// serverAccount is postgres when running as root (Debian's postgresql
// package creates that user), else nil.
func serverAccount() (*account, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgtest: running as root, the server must run as the postgres user (Debian's postgresql package creates it): %w", err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return nil, fmt.Errorf("pgtest: postgres user's uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return nil, fmt.Errorf("pgtest: postgres user's gid %q: %w", u.Gid, err)
	}
	return &account{name: u.Username, uid: uid, gid: gid}, nil
}

// chown gives path to the account; nothing to do for this process's user.
func (a *account) chown(path string) error {
	if a == nil {
		return nil
	}
	return os.Chown(path, a.uid, a.gid)
}

// sysProcAttr runs a child as the account (no supplementary groups).
func (a *account) sysProcAttr() *syscall.SysProcAttr {
	if a == nil {
		return nil
	}
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(a.uid), Gid: uint32(a.gid)}}
}

// canReach reports an error unless the account can traverse every
// directory above dir: as root, TMPDIR may be closed to postgres (a 0700
// dir under /root), and the server's errors would not say so plainly.
func (a *account) canReach(dir string) error {
	if a == nil {
		return nil
	}
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		mode := fi.Mode().Perm()
		if ok && !(mode&0o001 != 0 || int(st.Uid) == a.uid && mode&0o100 != 0 || int(st.Gid) == a.gid && mode&0o010 != 0) {
			return fmt.Errorf("the %s user cannot enter %s (mode %v) to reach %s: set TMPDIR to a directory it can traverse, such as /tmp", a.name, p, mode, dir)
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// scramIterations is PostgreSQL's default (scram_iterations).
const scramIterations = 4096

// scramVerifier is the SCRAM-SHA-256 secret PostgreSQL stores for a password
// (RFC 5802, RFC 7677): CREATE ROLE ...
func scramVerifier(password string) (string, error) {
	if password == "" {
		return "", errors.New("empty password")
	}
	for i := 0; i < len(password); i++ {
		if c := password[i]; c < 0x20 || c > 0x7e {
			return "", errors.New("password must be printable ASCII")
		}
	}
	salt := make([]byte, 16)
	rand.Read(salt)
	salted, err := pbkdf2.Key(sha256.New, password, salt, scramIterations, sha256.Size)
	if err != nil {
		return "", err
	}
	clientKey := hmacSHA256(salted, "Client Key")
	storedKey := sha256.Sum256(clientKey)
	serverKey := hmacSHA256(salted, "Server Key")
	b64 := base64.StdEncoding.EncodeToString
	return "SCRAM-SHA-256$4096:" + b64(salt) + "$" + b64(storedKey[:]) + ":" + b64(serverKey), nil
}

func hmacSHA256(key []byte, msg string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(msg))
	return h.Sum(nil)
}

// watchdog is a small shell process that outlives this one if need be: it
// waits for EOF on a pipe whose only writer is this process, then stops the
// server (immediate) and removes its directory.
type watchdog struct {
	cmd  *exec.Cmd
	pipe *os.File // write end; never written, only closed
}

// watchdogScript: $1 the server's dir, $2 pg_ctl, $3 the data dir.
const watchdogScript = `read -r _
"$2" stop -D "$3" -m immediate -w -t 60 >/dev/null 2>&1
rm -rf -- "$1"`

func startWatchdog(s *Server) (*watchdog, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("pgtest: watchdog pipe: %w", err)
	}
	defer r.Close()
	cmd := exec.Command("/bin/sh", "-c", watchdogScript, "pgtest-watchdog",
		s.dir, filepath.Join(s.bin, "pg_ctl"), s.dataDir())
	cmd.Dir = s.dir
	cmd.Env = serverEnv()
	cmd.Stdin = r
	cmd.SysProcAttr = s.owner.sysProcAttr()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setsid = true
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("pgtest: starting the watchdog: %w", err)
	}
	return &watchdog{cmd: cmd, pipe: w}, nil
}

// release lets the watchdog finish (its work is already done by Stop) and
// reaps it.
func (wd *watchdog) release() {
	wd.pipe.Close()
	wd.cmd.Wait()
}

// sweepOrphans removes the servers of processes that are gone and whose
// watchdog did not clean up (it was killed too, or the machine went down
// under them): each dir's name carries its owner's pid.
func sweepOrphans(bin string, owner *account) {
	tmp := os.TempDir()
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), dirPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid == os.Getpid() || alive(pid) {
			continue
		}
		dir := filepath.Join(tmp, e.Name())
		data := filepath.Join(dir, "data")
		if _, err := os.Stat(filepath.Join(data, "postmaster.pid")); err == nil {
			s := &Server{bin: bin, owner: owner, dir: dir}
			s.command("pg_ctl", "stop", "-D", data, "-m", "immediate", "-w", "-t", "60").Run()
		}
		os.RemoveAll(dir)
	}
}

// alive reports whether process pid exists (EPERM: it does, another
// user's).
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
