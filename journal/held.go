package journal

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// Held reports whether a run holds the journal at path: whether a refund
// run, an audit writing to it or a journal-merge onto it has the exclusive
// flock that Open and TakeLock take. It asks with a shared flock that never
// waits and is dropped before it returns, on a read-only descriptor of its
// own: it never writes, creates or repairs anything. (A writer trying to
// lock the journal in that instant is refused as if another run held it,
// and sends nothing.) A path that is not a regular file is a *NotFileError,
// as for Open.
func Held(path string) (bool, error) {
	f, err := openRegular(path, unix.O_RDONLY, 0)
	if err != nil {
		return false, wrapOpen(path, err)
	}
	defer f.Close() // drops the shared lock, if taken
	switch err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); {
	case errors.Is(err, unix.EWOULDBLOCK):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("journal %s: lock: %w", path, err)
	}
	return false, nil
}
