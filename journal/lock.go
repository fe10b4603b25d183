package journal

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/refundkit/refundkit/journal/durable"
	"golang.org/x/sys/unix"
)

// FileKind is the one opener, lock and torn-tail repair of an appended
// file that one writer holds, and how its errors read: the journal's and
// Adyen's notification file's (refund/provider/adyen/notes) differ.
type FileKind struct {
	What   string                  // "journal": errors read "journal j.jsonl: ..."
	Locked func(path string) error // another run holds the lock
	// NotFile is a path that names no regular file, of mode as stat(2)
	// gives it before the open or (opened) on the opened descriptor.
	NotFile func(path string, mode fs.FileMode, opened bool) error
	// Dangling refuses a symbolic link to nothing at once (*NotFileError);
	// WrapOpen puts "What path: " before an open's error.
	Dangling, WrapOpen bool
	Vanished, Replaced string // why opening, or locking, failed maxOpenTries times
	// WriteFailed is a Writer's failed write or fsync, returned from then on.
	WriteFailed func(path string, err error) error
	// Framed is the journal's format: a commit line ends every write of its
	// Writer.
	Framed bool
	// CheckPath: after every write the Writer checks that the path still
	// names the file (not removed, renamed or replaced), or fails.
	CheckPath bool
}

var journalFile = &FileKind{
	What:     "journal",
	Locked:   func(path string) error { return &LockedError{Path: path} },
	NotFile:  func(path string, mode fs.FileMode, _ bool) error { return notFile(path, mode) },
	Dangling: true, WrapOpen: true, Framed: true, CheckPath: true,
	Vanished:    "created and removed again while being opened: is another program doing so?",
	Replaced:    fmt.Sprintf("replaced %d times while being locked", maxOpenTries),
	WriteFailed: func(path string, err error) error { return &WriteError{Path: path, Err: err} },
}

// Lock is a journal held for writing: its file open, with the exclusive
// flock that every refundkit tool writing or replacing a journal takes.
// journal-merge -o holds its output's until the merged file is in place.
type Lock struct {
	path    string
	f       *os.File
	info    os.FileInfo // identity of the locked file
	created bool
}

// maxOpenTries bounds the retries of a path that appears, vanishes or is
// replaced while being opened and locked: a third failure is no honest race.
const maxOpenTries = 3

// testHookBeforeFlock runs between the open and the flock (tests only).
var testHookBeforeFlock func()

// TakeLock opens the journal at path, creating it (mode 0600, directory
// fsynced) if absent, and locks it as Open does: *LockedError at once if
// another run holds it, *NotFileError for what is no regular file.
func TakeLock(path string) (*Lock, error) {
	f, info, created, err := journalFile.OpenLocked(path)
	if err != nil {
		return nil, err
	}
	return &Lock{path: path, f: f, info: info, created: created}, nil
}

// OpenLocked opens path for appending, creating it (0600, directory
// fsynced) if absent, and takes its exclusive flock without waiting. Once
// locked, the path must still name the locked file: a lock on a file
// replaced meanwhile guards nothing.
func (k *FileKind) OpenLocked(path string) (f *os.File, info os.FileInfo, created bool, err error) {
	for range maxOpenTries {
		if f, created, err = k.openOrCreate(path); err != nil {
			return nil, nil, false, err
		}
		if testHookBeforeFlock != nil {
			testHookBeforeFlock()
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, nil, false, k.Locked(path)
			}
			return nil, nil, false, fmt.Errorf("%s %s: lock: %w", k.What, path, err)
		}
		if info, err = f.Stat(); err != nil {
			f.Close()
			return nil, nil, false, fmt.Errorf("%s %s: %w", k.What, path, err)
		}
		if cur, err := os.Stat(path); err == nil && os.SameFile(cur, info) {
			if created {
				if err := durable.SyncDir(k.What, path); err != nil {
					f.Close()
					return nil, nil, false, err
				}
			}
			return f, info, created, nil
		}
		f.Close()
	}
	return nil, nil, false, fmt.Errorf("%s %s: %s: is a program that ignores the lock rewriting it?", k.What, path, k.Replaced)
}

// openOrCreate never creates a file through a symbolic link.
func (k *FileKind) openOrCreate(path string) (*os.File, bool, error) {
	for range maxOpenTries {
		f, err := k.OpenRegular(path, unix.O_RDWR|unix.O_APPEND, 0)
		if !errors.Is(err, fs.ErrNotExist) {
			return f, false, k.wrapOpen(path, err)
		}
		// O_EXCL does not follow a symbolic link: a dangling one is EEXIST.
		f, err = k.OpenRegular(path, unix.O_RDWR|unix.O_APPEND|unix.O_CREAT|unix.O_EXCL, 0o600)
		if !errors.Is(err, fs.ErrExist) {
			return f, err == nil, k.wrapOpen(path, err)
		}
		if k.Dangling { // else a link to nothing, or a creator that won the race
			if err := danglingLink(path); err != nil {
				return nil, false, err
			}
		}
	}
	return nil, false, fmt.Errorf("%s %s: %s", k.What, path, k.Vanished)
}

func (k *FileKind) wrapOpen(path string, err error) error {
	if err == nil || !k.WrapOpen || !errors.As(err, new(*fs.PathError)) {
		return err
	}
	return fmt.Errorf("%s %s: %w", k.What, path, err)
}

// OpenRegular opens path only if it is a regular file, else k.NotFile.
// O_NONBLOCK keeps a named pipe or a device from holding up the open; the
// type is checked on the opened descriptor, so no swap can slip in.
func (k *FileKind) OpenRegular(path string, flag int, perm uint32) (*os.File, error) {
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
				return nil, k.NotFile(path, info.Mode(), false)
			}
		}
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fcntl", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	info, err := f.Stat()
	switch {
	case err != nil:
		err = &fs.PathError{Op: "fstat", Path: path, Err: errors.Unwrap(err)}
	case !info.Mode().IsRegular():
		err = k.NotFile(path, info.Mode(), true)
	default:
		return f, nil
	}
	f.Close()
	return nil, err
}

// CutTail copies the bytes of f from off to size, a torn tail, to a new
// file <path>.torn-<unix-nanos>, then cuts them off f and fsyncs it.
func (k *FileKind) CutTail(f *os.File, path string, off, size int64) (saved string, err error) {
	torn := make([]byte, size-off)
	if _, err := f.ReadAt(torn, off); err != nil {
		return "", fmt.Errorf("%s %s: read torn tail: %w", k.What, path, err)
	}
	saved = fmt.Sprintf("%s.torn-%d", path, time.Now().UnixNano())
	if err := durable.WriteNew(saved, torn); err != nil {
		return "", fmt.Errorf("%s %s: save torn tail: %w", k.What, path, err)
	}
	if err := durable.SyncDir(k.What, saved); err != nil {
		return "", err
	}
	if err := f.Truncate(off); err != nil {
		return "", fmt.Errorf("%s %s: cut torn tail: %w", k.What, path, err)
	}
	if err := f.Sync(); err != nil {
		return "", fmt.Errorf("%s %s: fsync: %w", k.What, path, err)
	}
	return saved, nil
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
// at the path (a failed merge leaves no empty journal), then releases it.
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

// Held reports whether a run holds the journal at path (the flock of Open
// and TakeLock). It asks with a shared flock that never waits, on a
// read-only descriptor, and writes, creates or repairs nothing; a writer
// locking in that instant is refused as if another run held it.
func Held(path string) (bool, error) {
	f, err := journalFile.OpenRegular(path, unix.O_RDONLY, 0)
	if err != nil {
		return false, journalFile.wrapOpen(path, err)
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

// danglingLink is a *NotFileError if path is a symbolic link to nothing.
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
