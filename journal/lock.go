package journal

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/refundkit/refundkit/journal/durable"
	"golang.org/x/sys/unix"
)

// Lock is a journal held for writing: its file open, with the exclusive
// flock that every refundkit tool writing or replacing a journal takes.
// Writers hold one through Open; journal-merge -o holds its output's with
// TakeLock until the merged file is renamed into place.
type Lock struct {
	path    string
	f       *os.File
	info    os.FileInfo // identity of the locked file
	created bool
}

// maxOpenTries bounds the retries of a journal that appears, vanishes or is
// replaced while it is being opened and locked: a second try settles an
// honest race, a third that fails means some program is at it in a loop.
const maxOpenTries = 3

// testHookBeforeFlock runs between the open and the flock (tests only).
var testHookBeforeFlock func()

// TakeLock opens the journal at path, creating it (mode 0600, directory
// fsynced) if absent, and locks it as Open does: one held by another run or
// tool gives *LockedError at once. A path that is not a regular file, or a
// symbolic link to nothing, gives *NotFileError. Once locked, the path must
// still name the locked file: a tool that replaced the journal released its
// lock on the old file, and a lock on that guards nothing.
func TakeLock(path string) (*Lock, error) {
	for try := 1; ; try++ {
		f, created, err := openFile(path)
		if err != nil {
			return nil, err
		}
		if testHookBeforeFlock != nil {
			testHookBeforeFlock()
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, &LockedError{Path: path}
			}
			return nil, fmt.Errorf("journal %s: lock: %w", path, err)
		}
		info, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("journal %s: %w", path, err)
		}
		if cur, err := os.Stat(path); err == nil && os.SameFile(cur, info) {
			if created {
				if err := durable.SyncDir("journal", path); err != nil {
					f.Close()
					return nil, err
				}
			}
			return &Lock{path: path, f: f, info: info, created: created}, nil
		}
		f.Close()
		if try == maxOpenTries {
			return nil, fmt.Errorf("journal %s: replaced %d times while being locked: is a program that ignores the lock rewriting it?", path, try)
		}
	}
}

// Created reports whether TakeLock created the file.
func (l *Lock) Created() bool { return l.created }

// Release closes the file, which drops the lock.
func (l *Lock) Release() error {
	if l.f == nil {
		return fmt.Errorf("journal %s: lock already released", l.path)
	}
	err := l.f.Close()
	l.f = nil
	if err != nil {
		return fmt.Errorf("journal %s: %w", l.path, err)
	}
	return nil
}

// Discard removes the file if TakeLock created it and it is still empty and
// still at the path (a failed merge leaves no empty journal behind), then
// releases the lock. A journal that existed before is left as it was.
func (l *Lock) Discard() error {
	if l.f == nil {
		return l.Release()
	}
	if l.created {
		own, err := l.f.Stat()
		cur, serr := os.Stat(l.path)
		if err == nil && serr == nil && own.Size() == 0 && os.SameFile(cur, l.info) {
			if err := os.Remove(l.path); err != nil {
				l.Release()
				return fmt.Errorf("journal %s: %w", l.path, err)
			}
			if err := durable.SyncDir("journal", l.path); err != nil {
				l.Release()
				return err
			}
		}
	}
	return l.Release()
}

// openFile opens the journal at path for appending, creating it if absent.
// It never creates a file through a symbolic link, never waits on a named
// pipe or a device, and gives up after maxOpenTries races.
func openFile(path string) (f *os.File, created bool, err error) {
	for range maxOpenTries {
		f, err = openRegular(path, unix.O_RDWR|unix.O_APPEND, 0)
		if !errors.Is(err, fs.ErrNotExist) {
			return f, false, wrapOpen(path, err)
		}
		// O_EXCL does not follow a symbolic link: a dangling one is EEXIST.
		f, err = openRegular(path, unix.O_RDWR|unix.O_APPEND|unix.O_CREAT|unix.O_EXCL, 0o600)
		if !errors.Is(err, fs.ErrExist) {
			return f, err == nil, wrapOpen(path, err)
		}
		// There after all: a dangling link, or another creator won the race
		// (open theirs).
		if err := danglingLink(path); err != nil {
			return nil, false, err
		}
	}
	return nil, false, fmt.Errorf("journal %s: created and removed again while being opened: is another program doing so?", path)
}

func wrapOpen(path string, err error) error {
	var nf *NotFileError
	if err == nil || errors.As(err, &nf) {
		return err
	}
	return fmt.Errorf("journal %s: %w", path, err)
}

// openRegular opens path and returns it only if it is a regular file; else
// a *NotFileError that says what it is. O_NONBLOCK keeps the open of a
// named pipe or a device from waiting; the file type is checked on the
// opened descriptor, so a swap after a check cannot slip in.
func openRegular(path string, flag int, perm uint32) (*os.File, error) {
	var fd int
	var err error
	for {
		fd, err = unix.Open(path, flag|unix.O_NONBLOCK|unix.O_CLOEXEC, perm)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		if err != unix.ENOENT && err != unix.EEXIST {
			// EISDIR, ENXIO (a socket), ...: say what the path is.
			if info, serr := os.Stat(path); serr == nil && !info.Mode().IsRegular() {
				return nil, notFile(path, info.Mode())
			}
		}
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, notFile(path, fileMode(st.Mode))
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// danglingLink is a *NotFileError if path is a symbolic link whose target
// does not exist, else nil.
func danglingLink(path string) error {
	info, err := os.Lstat(path)
	if err != nil || info.Mode()&fs.ModeSymlink == 0 {
		return nil
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	target, err := os.Readlink(path)
	if err != nil {
		return nil
	}
	return &NotFileError{Path: path, What: "a symbolic link to " + target + ", which does not exist"}
}

func notFile(path string, mode fs.FileMode) *NotFileError {
	what := "not a regular file"
	switch {
	case mode.IsDir():
		what = "a directory, not a file"
	case mode&fs.ModeNamedPipe != 0:
		what = "a named pipe (FIFO), not a file"
	case mode&fs.ModeCharDevice != 0:
		what = "a character device, not a file"
	case mode&fs.ModeDevice != 0:
		what = "a block device, not a file"
	case mode&fs.ModeSocket != 0:
		what = "a socket, not a file"
	}
	if target, err := os.Readlink(path); err == nil {
		what = "a symbolic link to " + target + ", which is " + what
	}
	return &NotFileError{Path: path, What: what}
}

// fileMode is the type bits of a stat(2) mode as an fs.FileMode.
func fileMode(m uint32) fs.FileMode {
	switch m & unix.S_IFMT {
	case unix.S_IFDIR:
		return fs.ModeDir
	case unix.S_IFIFO:
		return fs.ModeNamedPipe
	case unix.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		return fs.ModeDevice
	case unix.S_IFSOCK:
		return fs.ModeSocket
	case unix.S_IFLNK:
		return fs.ModeSymlink
	}
	return fs.ModeIrregular
}
