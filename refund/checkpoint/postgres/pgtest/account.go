package pgtest

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

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
