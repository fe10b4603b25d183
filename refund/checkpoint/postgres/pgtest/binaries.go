package pgtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
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
	var dirs []string
	for _, p := range initdbs {
		if dir := filepath.Dir(p); hasServer(dir) {
			dirs = append(dirs, dir)
		}
	}
	if len(dirs) == 0 {
		return "", fmt.Errorf("%w: not in $REFUNDKIT_PG_BIN (unset), `pg_config --bindir` or /usr/lib/postgresql/*/bin", ErrNoServerBinary)
	}
	// Highest version first: "15" sorts after "9.6" by number, not by text.
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	return dirs[0], nil
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
