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

	"golang.org/x/sys/unix"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
)

// File is a Store in a file of JSON lines, one wire.Notification a line,
// as received. One writer holds it (an exclusive flock, as a journal);
// readers take no lock. A crash tears at most the final line, never
// acknowledged (Add waits for the fsync), which the next writer cuts off;
// anything else wrong is refused with its line.
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

	// Group commit: Adds arriving during a flush share the next one.
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

var notesFile = &journal.FileKind{
	What:   "notifications file",
	Locked: func(path string) error { return &LockedError{Path: path} },
	NotFile: func(path string, mode fs.FileMode, opened bool) error {
		if opened {
			return fmt.Errorf("notifications file %s is not a regular file", path)
		}
		return fmt.Errorf("notifications file %s is not a regular file (%v)", path, mode.Type())
	},
	Vanished: "neither there nor creatable (a symbolic link to nothing?)",
	Replaced: "replaced while being locked, again and again",
}

// LockedError is a file another receiver holds for writing.
type LockedError struct{ Path string }

func (e *LockedError) Error() string {
	return fmt.Sprintf("notifications file %s is held by another receiver", e.Path)
}

// WriteError is a failed write or fsync: the File is failed for good (a
// torn line it left is cut by the next writer).
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
// under key. With write it locks it (journal.FileKind) and cuts off a torn
// final line, saved aside (Torn); without, it reads every complete line.
// A line that does not decode or verify is a *CorruptError.
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
		f, _, created, err = notesFile.OpenLocked(path)
	} else {
		f, err = notesFile.OpenRegular(path, unix.O_RDONLY, 0)
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
			saved, err := notesFile.CutTail(f, path, x.off, size)
			if err != nil {
				f.Close()
				return nil, err
			}
			x.torn = &journal.Torn{Path: path, Line: int(x.lines + 1), Offset: x.off, Bytes: int(size - x.off), SavedTo: saved}
		}
	}
	return x, nil
}

func (x *File) Path() string { return x.path }

// Torn is the torn final line the writer cut off at open, or nil.
func (x *File) Torn() *journal.Torn { return x.torn }

func (x *File) Fsyncs() int64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.fsyncs
}

// Add stores n, written and fsynced, unless one of its key (keyOf) is kept
// or being written: then false once that one is on disk.
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

// flush writes and fsyncs the pending batch, x.mu released meanwhile.
func (x *File) flush() {
	buf, ns, b := x.pending, x.pendingN, x.batch
	x.pending, x.pendingN = nil, nil
	x.batch++
	x.flushing = true
	x.mu.Unlock()
	_, err := x.f.Write(buf)
	if err == nil {
		err = x.f.Sync()
	}
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

func (x *File) ForRefund(ctx context.Context, psp string) ([]wire.Notification, error) {
	return x.query(func(ix *index) []wire.Notification { return ix.pick(ix.byRefund[psp]) })
}

func (x *File) ForPayment(ctx context.Context, psp string) ([]wire.Notification, error) {
	return x.query(func(ix *index) []wire.Notification { return ix.pick(ix.byPayment[psp]) })
}

func (x *File) All(ctx context.Context) ([]wire.Notification, error) {
	return x.query(func(ix *index) []wire.Notification {
		out := make([]wire.Notification, len(ix.all))
		for i, n := range ix.all {
			out[i] = clone(n)
		}
		return out
	})
}

// query answers from the index; a reader first reads the lines appended since.
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

// Close releases the file once a flush under way is done.
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

// readNew reads and verifies the complete lines from x.off on, x.mu held;
// partial is the length of a final line without its newline.
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
