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
	path string
	keys [][]byte
	w    *journal.Writer // nil: opened for reading
	f    *os.File
	torn *journal.Torn

	mu    sync.Mutex
	idx   *index // what is durable (writer) or read (reader)
	off   int64  // end of the last complete line in idx
	lines int64  // lines in idx, duplicates included
	// waits: dedup key -> the wait of the Add that carries it (nil: on disk).
	waits  map[string]func() error
	closed bool
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
	Vanished:    "neither there nor creatable (a symbolic link to nothing?)",
	Replaced:    "replaced while being locked, again and again",
	WriteFailed: func(path string, err error) error { return &WriteError{Path: path, Err: err} },
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
// under one of keys. With write it locks it (journal.FileKind) and cuts off a torn
// final line, saved aside (Torn); without, it reads every complete line.
// A line that does not decode or verify is a *CorruptError.
func OpenFile(path string, keys [][]byte, write bool) (*File, error) {
	if wire.NoKey(keys) {
		return nil, errors.New("notifications file " + path + ": no HMAC key")
	}
	var (
		f       *os.File
		info    os.FileInfo
		created bool
		err     error
	)
	if write {
		f, info, created, err = notesFile.OpenLocked(path)
	} else {
		f, err = notesFile.OpenRegular(path, unix.O_RDONLY, 0)
	}
	if err != nil {
		return nil, err
	}
	x := &File{path: path, keys: keys, f: f, idx: newIndex(), waits: map[string]func() error{}}
	size, partial := int64(0), int64(0)
	if !created {
		if size, partial, err = x.readNew(); err != nil {
			f.Close()
			return nil, err
		}
	}
	if write {
		for k := range x.idx.keys {
			x.waits[k] = nil
		}
		if partial > 0 {
			saved, err := notesFile.CutTail(f, path, x.off, size)
			if err != nil {
				f.Close()
				return nil, err
			}
			x.torn = &journal.Torn{Path: path, Line: int(x.lines + 1), Offset: x.off, Bytes: int(size - x.off), SavedTo: saved}
		}
		x.w = notesFile.NewWriter(f, path, info, x.off, journal.Options{})
	}
	return x, nil
}

func (x *File) Path() string { return x.path }

// Torn is the torn final line the writer cut off at open, or nil.
func (x *File) Torn() *journal.Torn { return x.torn }

func (x *File) Fsyncs() int64 {
	if x.w == nil {
		return 0
	}
	return x.w.Stats().Fsyncs
}

// Add stores n, written and fsynced (journal.Writer), unless one of its
// key (keyOf) is kept or being written: then false once that one is on disk.
func (x *File) Add(ctx context.Context, n wire.Notification) (bool, error) {
	if x.w == nil {
		return false, ErrReadOnly
	}
	if why := check(&n, x.keys); why != "" {
		return false, &InvalidError{Reason: why}
	}
	line, err := json.Marshal(n)
	if err != nil {
		return false, &InvalidError{Reason: err.Error()}
	}
	line = append(line, '\n')
	k := keyOf(&n.Item)
	x.mu.Lock()
	if x.closed {
		x.mu.Unlock()
		return false, ErrClosed
	}
	if err := x.w.Append(); err != nil { // the writer failed for good
		x.mu.Unlock()
		return false, err
	}
	wait, dup := x.waits[k]
	if !dup {
		wait = x.w.AppendLines(line, func() {
			x.mu.Lock()
			defer x.mu.Unlock()
			x.idx.add(n)
			x.waits[k] = nil
		})
		x.waits[k] = wait
	}
	x.mu.Unlock()
	if wait != nil {
		if err := wait(); err != nil {
			return false, err
		}
	}
	return !dup, nil
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
	if x.w == nil {
		if _, _, err := x.readNew(); err != nil {
			return nil, err
		}
	}
	return pick(x.idx), nil
}

// Close releases the file once the Adds under way are written.
func (x *File) Close() error {
	x.mu.Lock()
	closed := x.closed
	x.closed = true
	x.mu.Unlock()
	switch {
	case closed:
		return nil
	case x.w != nil:
		return x.w.Close()
	}
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
		if why := decode(doc, x.keys, &n); why != "" {
			return 0, 0, &CorruptError{Where: x.path, Line: x.lines + 1, Reason: why}
		}
		x.idx.add(n)
		x.off += int64(len(line))
		x.lines++
	}
}
