package notes

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/journal/durable"
	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
)

// File is a Store in a file of JSON lines, one wire.Notification a line,
// in the order received. One writer holds it at a time (an exclusive
// flock, as journals are held); readers take no lock and read the lines
// appended since on every query.
//
// What it assumes of the disk, as the journal does: a write(2) that
// returned and an fsync(2) that returned nil are on the disk; a crash
// during an append leaves at most one final line without its newline,
// which was never acknowledged ([accepted] waits for the fsync), so the
// next writer saves it aside and cuts it off. Anything else wrong in the
// file is refused with its line.
type File struct {
	path  string
	key   []byte
	write bool
	f     *os.File
	torn  *journal.Torn

	mu    sync.Mutex
	cond  *sync.Cond // flushes done (writer)
	idx   *index     // what is durable (writer) or read (reader)
	off   int64      // end of the last complete line in idx
	lines int64      // lines in idx, duplicates included

	// The writer's group commit: Adds that arrive while a batch is being
	// written and fsynced wait together for the next batch, one fsync for
	// all of them.
	gens     map[string]uint64 // dedup key -> batch that carries it (0: on disk at open)
	pending  []byte            // lines of batch `batch`, not yet written
	pendingN []wire.Notification
	batch    uint64 // the batch pending collects, from 1
	durable  uint64 // the last batch written and fsynced
	flushing bool
	fsyncs   int64
	err      error // the writer failed for good
	closed   bool
}

// LockedError is a file another receiver holds for writing.
type LockedError struct{ Path string }

func (e *LockedError) Error() string {
	return fmt.Sprintf("notifications file %s is held by another receiver", e.Path)
}

// WriteError is a failed write or fsync: the File that returned it is
// failed for good, and every later Add returns it too (what it wrote may
// be a torn line, that the next writer to open the file cuts off).
type WriteError struct {
	Path string
	Err  error
}

func (e *WriteError) Error() string {
	return fmt.Sprintf("notifications file %s: write failed: %v", e.Path, e.Err)
}
func (e *WriteError) Unwrap() error { return e.Err }

// ErrClosed is a Store used after Close.
var ErrClosed = errors.New("notification store closed")

// ErrReadOnly is Add on a File opened for reading.
var ErrReadOnly = errors.New("notification file opened for reading: Add needs write")

// OpenFile opens the notifications file at path, whose lines must verify
// under key (the HMAC key, decoded). With write it creates the file if
// absent (mode 0600, its directory fsynced), takes the exclusive lock
// (*LockedError at once if another receiver holds it), reads every line
// and cuts off a torn final line, saved first to <path>.torn-<unix-nanos>
// (Torn reports it). Without write it takes no lock and reads every
// complete line. Any line that does not decode, is of an unknown version
// or does not verify is a *CorruptError naming its line.
func OpenFile(path string, key []byte, write bool) (*File, error) {
	if len(key) == 0 {
		return nil, errors.New("notifications file " + path + ": no HMAC key")
	}
	var (
		f       *os.File
		created bool
		err     error
	)
	if write {
		f, created, err = openLocked(path)
	} else {
		f, err = openRegular(path, unix.O_RDONLY, 0)
	}
	if err != nil {
		return nil, err
	}
	x := &File{path: path, key: key, write: write, f: f, idx: newIndex(), gens: map[string]uint64{}, batch: 1}
	x.cond = sync.NewCond(&x.mu)
	if created {
		return x, nil
	}
	size, partial, err := x.readNew()
	if err != nil {
		f.Close()
		return nil, err
	}
	if write {
		for k := range x.idx.keys {
			x.gens[k] = 0
		}
		if partial > 0 {
			if err := x.cutTorn(size); err != nil {
				f.Close()
				return nil, err
			}
		}
	}
	return x, nil
}

// Path is the file's path as given to OpenFile.
func (x *File) Path() string { return x.path }

// Torn is the torn final line the writer cut off at open, or nil.
func (x *File) Torn() *journal.Torn { return x.torn }

// Fsyncs is how many fsyncs the writer's Adds have made.
func (x *File) Fsyncs() int64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.fsyncs
}

// Add stores n, written and fsynced, unless one of its key (keyOf) is kept
// or being written already; then it returns false once that one is on
// disk. Concurrent Adds share one write and one fsync.
func (x *File) Add(ctx context.Context, n wire.Notification) (bool, error) {
	if !x.write {
		return false, ErrReadOnly
	}
	if why := check(&n, x.key); why != "" {
		return false, &InvalidError{Reason: why}
	}
	line, err := json.Marshal(n)
	if err != nil {
		return false, &InvalidError{Reason: err.Error()}
	}
	line = append(line, '\n')
	k := keyOf(&n.Item)
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return false, ErrClosed
	}
	if x.err != nil {
		return false, x.err
	}
	g, dup := x.gens[k]
	if !dup {
		g = x.batch
		x.gens[k] = g
		x.pending = append(x.pending, line...)
		x.pendingN = append(x.pendingN, n)
	}
	for x.durable < g && x.err == nil {
		if x.closed {
			return false, ErrClosed
		}
		if !x.flushing {
			x.flush()
			continue
		}
		x.cond.Wait()
	}
	if x.durable < g {
		return false, x.err
	}
	return !dup, nil
}

// flush writes and fsyncs the pending batch, with x.mu held on entry and
// on return (released meanwhile), and wakes the Adds that wait for it.
func (x *File) flush() {
	buf, ns, b := x.pending, x.pendingN, x.batch
	x.pending, x.pendingN = nil, nil
	x.batch++
	x.flushing = true
	x.mu.Unlock()
	err := writeSync(x.f, buf)
	x.mu.Lock()
	x.flushing = false
	x.fsyncs++
	if err != nil {
		x.err = &WriteError{Path: x.path, Err: err}
	} else {
		for _, n := range ns {
			x.idx.add(n)
		}
		x.durable = b
		x.off += int64(len(buf))
		x.lines += int64(len(ns))
	}
	x.cond.Broadcast()
}

func writeSync(f *os.File, buf []byte) error {
	if _, err := f.Write(buf); err != nil {
		return err
	}
	return f.Sync()
}

// ForRefund returns the notifications of the refund psp, in the order
// received.
func (x *File) ForRefund(ctx context.Context, psp string) ([]wire.Notification, error) {
	return x.query(func(ix *index) []wire.Notification { return ix.pick(ix.byRefund[psp]) })
}

// ForPayment returns the notifications whose originalReference is psp.
func (x *File) ForPayment(ctx context.Context, psp string) ([]wire.Notification, error) {
	return x.query(func(ix *index) []wire.Notification { return ix.pick(ix.byPayment[psp]) })
}

// All returns every notification kept, in the order received.
func (x *File) All(ctx context.Context) ([]wire.Notification, error) {
	return x.query(func(ix *index) []wire.Notification {
		out := make([]wire.Notification, len(ix.all))
		for i, n := range ix.all {
			out[i] = clone(n)
		}
		return out
	})
}

// query answers from the index; a reader first reads the lines appended
// since (a line still without its newline waits for the next query).
func (x *File) query(pick func(*index) []wire.Notification) ([]wire.Notification, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return nil, ErrClosed
	}
	if !x.write {
		if _, _, err := x.readNew(); err != nil {
			return nil, err
		}
	}
	return pick(x.idx), nil
}

// Close releases the file (and the writer's lock) once a flush under way
// is done.
func (x *File) Close() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	for x.flushing {
		x.cond.Wait()
	}
	if x.closed {
		return nil
	}
	x.closed = true
	x.cond.Broadcast()
	if err := x.f.Close(); err != nil {
		return fmt.Errorf("notifications file %s: %w", x.path, err)
	}
	return nil
}

// readNew reads and verifies the complete lines from x.off to the end of
// the file, with x.mu held. partial is the length of a final line without
// its newline, not read.
func (x *File) readNew() (size, partial int64, err error) {
	info, err := x.f.Stat()
	if err != nil {
		return 0, 0, fmt.Errorf("notifications file %s: %w", x.path, err)
	}
	size = info.Size()
	if size < x.off {
		return 0, 0, fmt.Errorf("notifications file %s: cut from %d bytes to %d while being read (replaced, or cut by hand?)", x.path, x.off, size)
	}
	r := bufio.NewReaderSize(io.NewSectionReader(x.f, x.off, size-x.off), 64<<10)
	var n wire.Notification
	for {
		line, err := r.ReadBytes('\n')
		if err == io.EOF {
			return size, int64(len(line)), nil
		}
		if err != nil {
			return 0, 0, fmt.Errorf("notifications file %s: %w", x.path, err)
		}
		doc := bytes.TrimSuffix(line[:len(line)-1], []byte{'\r'})
		if why := decode(doc, x.key, &n); why != "" {
			return 0, 0, &CorruptError{Where: x.path, Line: x.lines + 1, Reason: why}
		}
		x.idx.add(n)
		x.off += int64(len(line))
		x.lines++
	}
}

// cutTorn saves the bytes after the last complete line aside, then cuts
// them off, as journal.Open does with a torn record.
func (x *File) cutTorn(size int64) error {
	torn := make([]byte, size-x.off)
	if _, err := x.f.ReadAt(torn, x.off); err != nil {
		return fmt.Errorf("notifications file %s: read torn tail: %w", x.path, err)
	}
	saved := fmt.Sprintf("%s.torn-%d", x.path, time.Now().UnixNano())
	if err := durable.WriteNew(saved, torn); err != nil {
		return fmt.Errorf("notifications file %s: save torn tail: %w", x.path, err)
	}
	if err := durable.SyncDir("notifications file", saved); err != nil {
		return err
	}
	if err := x.f.Truncate(x.off); err != nil {
		return fmt.Errorf("notifications file %s: cut torn tail: %w", x.path, err)
	}
	if err := x.f.Sync(); err != nil {
		return fmt.Errorf("notifications file %s: fsync: %w", x.path, err)
	}
	x.torn = &journal.Torn{Path: x.path, Line: int(x.lines + 1), Offset: x.off, Bytes: len(torn), SavedTo: saved}
	return nil
}

// openLocked opens path for appending, creating it (0600, directory
// fsynced) if absent, and takes its exclusive flock without waiting, as
// journal.TakeLock does (whose Lock keeps its file to itself). Once
// locked, the path must still name the locked file.
func openLocked(path string) (*os.File, bool, error) {
	for range 3 {
		f, created, err := openOrCreate(path)
		if err != nil {
			return nil, false, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, false, &LockedError{Path: path}
			}
			return nil, false, fmt.Errorf("notifications file %s: lock: %w", path, err)
		}
		info, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, false, fmt.Errorf("notifications file %s: %w", path, err)
		}
		if cur, err := os.Stat(path); err == nil && os.SameFile(cur, info) {
			if created {
				if err := durable.SyncDir("notifications file", path); err != nil {
					f.Close()
					return nil, false, err
				}
			}
			return f, created, nil
		}
		f.Close()
	}
	return nil, false, fmt.Errorf("notifications file %s: replaced while being locked, again and again: is a program that ignores the lock rewriting it?", path)
}

func openOrCreate(path string) (*os.File, bool, error) {
	for range 3 {
		f, err := openRegular(path, unix.O_RDWR|unix.O_APPEND, 0)
		if !errors.Is(err, fs.ErrNotExist) {
			return f, false, err
		}
		// O_EXCL does not follow a symbolic link: a dangling one is EEXIST.
		f, err = openRegular(path, unix.O_RDWR|unix.O_APPEND|unix.O_CREAT|unix.O_EXCL, 0o600)
		if !errors.Is(err, fs.ErrExist) {
			return f, err == nil, err
		}
	}
	return nil, false, fmt.Errorf("notifications file %s: neither there nor creatable (a symbolic link to nothing?)", path)
}

// openRegular opens path only if it is a regular file: O_NONBLOCK keeps a
// named pipe from holding up the open, and the type is checked on the
// descriptor opened.
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
				return nil, fmt.Errorf("notifications file %s is not a regular file (%v)", path, info.Mode().Type())
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
		return nil, fmt.Errorf("notifications file %s is not a regular file", path)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}
