// Package events keeps what a provider's webhook told, as the receiver
// accepted it: a file of JSON lines, one delivery a line, that one
// receiver appends to and any reader re-verifies line by line. Each
// provider supplies a Codec (what a line is, how its signature is checked
// again, what makes two deliveries one, which refund and payment it
// names); the file, its lock, its group-commit fsync, its torn tail and
// its dedup are this package's alone (Adyen's notifications, Stripe's and
// PayPal's events are three Codecs over one File).
package events

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
)

// Codec is how one provider's kept deliveries read and bind.
type Codec[N any] struct {
	File string // the file in messages: "notifications file"
	Noun string // one delivery in messages: "notification"
	// Check says why a reader refuses n (a signature that does not verify
	// again, an unknown version), or "".
	Check func(n *N) string
	Key   func(n *N) string                   // one key for a delivery and its retries
	Refs  func(n *N) (refund, payment string) // what it is looked up by ("" for none)
	Clone func(n N) N                         // a copy that shares nothing a caller could change
	// ReadOnly is Add's error on a File opened for reading.
	ReadOnly error
}

// File keeps deliveries in a file of JSON lines, as received. One writer
// holds it (an exclusive flock, as a journal); readers take no lock. A
// crash tears at most the final line, never acknowledged (Add waits for
// the fsync), which the next writer cuts off; anything else wrong is
// refused with its line.
type File[N any] struct {
	path  string
	codec *Codec[N]
	kind  *journal.FileKind
	w     *journal.Writer // nil: opened for reading
	f     *os.File
	torn  *journal.Torn

	mu    sync.Mutex
	idx   *index[N] // what is durable (writer) or read (reader)
	off   int64     // end of the last complete line in idx
	lines int64     // lines in idx, duplicates included
	// waits: dedup key -> the wait of the Add that carries it (nil: on disk).
	waits  map[string]func() error
	closed bool
}

// LockedError is a file another receiver holds for writing.
type LockedError struct {
	File, Path string
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("%s %s is held by another receiver", e.File, e.Path)
}

// WriteError is a failed write or fsync: the File is failed for good (a
// torn line it left is cut by the next writer).
type WriteError struct {
	File, Path string
	Err        error
}

func (e *WriteError) Error() string {
	return fmt.Sprintf("%s %s: write failed: %v", e.File, e.Path, e.Err)
}
func (e *WriteError) Unwrap() error { return e.Err }

// CorruptError is a kept delivery a reader refuses, at Where:Line (a
// file's line, or a table's seq).
type CorruptError struct {
	Where  string
	Line   int64
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("%s:%d: %s", e.Where, e.Line, e.Reason)
}

// InvalidError is a delivery that every reader would refuse.
type InvalidError struct{ Noun, Reason string }

func (e *InvalidError) Error() string { return e.Noun + " not stored: " + e.Reason }

// ErrClosed is a store used after Close.
var ErrClosed = errors.New("notification store closed")

// fileKind is the journal's locked appended file, named for c.
func fileKind[N any](c *Codec[N]) *journal.FileKind {
	return &journal.FileKind{
		What:   c.File,
		Locked: func(path string) error { return &LockedError{File: c.File, Path: path} },
		NotFile: func(path string, mode fs.FileMode, opened bool) error {
			if opened {
				return fmt.Errorf("%s %s is not a regular file", c.File, path)
			}
			return fmt.Errorf("%s %s is not a regular file (%v)", c.File, path, mode.Type())
		},
		Vanished:    "neither there nor creatable (a symbolic link to nothing?)",
		Replaced:    "replaced while being locked, again and again",
		WriteFailed: func(path string, err error) error { return &WriteError{File: c.File, Path: path, Err: err} },
		// A file rotated or moved away would take every event written to
		// it after from its readers, each answered 2xx: a write fails.
		CheckPath: true,
	}
}

// Open opens the file at path, whose lines must pass c.Check. With write
// it locks it and cuts off a torn final line, saved aside (Torn); without,
// it reads every complete line. A line that does not decode or check is a
// *CorruptError.
func Open[N any](path string, c *Codec[N], write bool) (*File[N], error) {
	kind := fileKind(c)
	var (
		f       *os.File
		info    os.FileInfo
		created bool
		err     error
	)
	if write {
		f, info, created, err = kind.OpenLocked(path)
	} else {
		f, err = kind.OpenRegular(path, unix.O_RDONLY, 0)
	}
	if err != nil {
		return nil, err
	}
	x := &File[N]{path: path, codec: c, kind: kind, f: f, waits: map[string]func() error{},
		idx: &index[N]{c: c, keys: map[string]int{}, byRefund: map[string][]int{}, byPayment: map[string][]int{}}}
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
			saved, err := kind.CutTail(f, path, x.off, size)
			if err != nil {
				f.Close()
				return nil, err
			}
			x.torn = &journal.Torn{Path: path, Line: int(x.lines + 1), Offset: x.off, Bytes: int(size - x.off), SavedTo: saved}
		}
		x.w = kind.NewWriter(f, path, info, x.off, journal.Options{})
	}
	return x, nil
}

func (x *File[N]) Path() string { return x.path }

// Torn is the torn final line the writer cut off at open, or nil.
func (x *File[N]) Torn() *journal.Torn { return x.torn }

func (x *File[N]) Fsyncs() int64 {
	if x.w == nil {
		return 0
	}
	return x.w.Stats().Fsyncs
}

// Add stores n, written and fsynced (journal.Writer), unless one of its
// key is kept or being written: then false once that one is on disk.
// A File opened for reading returns its codec's ReadOnly.
func (x *File[N]) Add(ctx context.Context, n N) (bool, error) {
	if x.w == nil {
		// Never (false, nil): a receiver would answer a delivery it did
		// not keep as a duplicate, and the provider would stop sending it.
		if x.codec.ReadOnly == nil {
			return false, errors.New(x.codec.File + " " + x.path + " opened for reading: Add needs write")
		}
		return false, x.codec.ReadOnly
	}
	line, err := x.codec.Encode(&n)
	if err != nil {
		return false, err
	}
	line = append(line, '\n')
	k := x.codec.Key(&n)
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
	if wait == nil {
		return false, nil
	}
	// ctx bounds the wait, not the write: a retry after it finds the
	// delivery being written, and waits for that write.
	done := make(chan error, 1)
	go func() { done <- wait() }()
	select {
	case err := <-done:
		if err != nil {
			return false, err
		}
		return !dup, nil
	case <-ctx.Done():
		return false, fmt.Errorf("%s %s: waiting for the write: %w", x.codec.File, x.path, ctx.Err())
	}
}

// ForRefund returns the deliveries naming refund id, in the order received.
func (x *File[N]) ForRefund(_ context.Context, id string) ([]N, error) {
	return x.query(func(ix *index[N]) []N { return ix.pick(ix.byRefund[id]) })
}

// ForPayment returns the deliveries naming payment id.
func (x *File[N]) ForPayment(_ context.Context, id string) ([]N, error) {
	return x.query(func(ix *index[N]) []N { return ix.pick(ix.byPayment[id]) })
}

// All returns every delivery kept, in the order received.
func (x *File[N]) All(context.Context) ([]N, error) {
	return x.query(func(ix *index[N]) []N {
		out := make([]N, len(ix.all))
		for i, n := range ix.all {
			out[i] = x.codec.Clone(n)
		}
		return out
	})
}

// query answers from the index; a reader first reads the lines appended since.
func (x *File[N]) query(pick func(*index[N]) []N) ([]N, error) {
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
func (x *File[N]) Close() error {
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
		return fmt.Errorf("%s %s: %w", x.codec.File, x.path, err)
	}
	return nil
}

// readNew reads and checks the complete lines from x.off on, x.mu held;
// partial is the length of a final line without its newline.
func (x *File[N]) readNew() (size, partial int64, err error) {
	info, err := x.f.Stat()
	if err != nil {
		return 0, 0, fmt.Errorf("%s %s: %w", x.codec.File, x.path, err)
	}
	size = info.Size()
	if size < x.off {
		return 0, 0, fmt.Errorf("%s %s: cut from %d bytes to %d while being read (replaced, or cut by hand?)", x.codec.File, x.path, x.off, size)
	}
	r := bufio.NewReaderSize(io.NewSectionReader(x.f, x.off, size-x.off), 64<<10)
	for {
		line, err := r.ReadBytes('\n')
		if err == io.EOF {
			return size, int64(len(line)), nil
		}
		if err != nil {
			return 0, 0, fmt.Errorf("%s %s: %w", x.codec.File, x.path, err)
		}
		doc := bytes.TrimSuffix(line[:len(line)-1], []byte{'\r'})
		n, why := Decode(doc, x.codec)
		if why != "" {
			return 0, 0, &CorruptError{Where: x.path, Line: x.lines + 1, Reason: why}
		}
		x.idx.add(n)
		x.off += int64(len(line))
		x.lines++
	}
}

// Encode checks n and writes it as kept; an *InvalidError if every reader
// would refuse it.
func (c *Codec[N]) Encode(n *N) ([]byte, error) {
	if why := c.Check(n); why != "" {
		return nil, &InvalidError{Noun: c.Noun, Reason: why}
	}
	doc, err := json.Marshal(*n)
	if err != nil {
		return nil, &InvalidError{Noun: c.Noun, Reason: err.Error()}
	}
	return doc, nil
}

// Decode reads and checks one kept delivery: why it is refused, or "".
func Decode[N any](doc []byte, c *Codec[N]) (n N, why string) {
	if err := json.Unmarshal(doc, &n); err != nil {
		return n, "not a " + c.Noun + ": " + err.Error()
	}
	why = c.Check(&n) // it may fill in what it read of n
	return n, why
}

// index is a File's deliveries, by dedup key and references.
type index[N any] struct {
	c         *Codec[N]
	all       []N
	keys      map[string]int
	byRefund  map[string][]int
	byPayment map[string][]int
}

// add keeps n unless one of its key is kept (the first stands).
func (x *index[N]) add(n N) {
	k := x.c.Key(&n)
	if _, ok := x.keys[k]; ok {
		return
	}
	i := len(x.all)
	x.all = append(x.all, n)
	x.keys[k] = i
	refund, payment := x.c.Refs(&n)
	if refund != "" {
		x.byRefund[refund] = append(x.byRefund[refund], i)
	}
	if payment != "" {
		x.byPayment[payment] = append(x.byPayment[payment], i)
	}
}

// pick copies: a caller that changes one changes nothing kept.
func (x *index[N]) pick(at []int) []N {
	out := make([]N, len(at))
	for j, i := range at {
		out[j] = x.c.Clone(x.all[i])
	}
	return out
}
