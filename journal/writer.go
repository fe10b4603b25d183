package journal

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
)

// Options tune a Writer.
type Options struct {
	// NoGroupCommit: every Append is a commit of its own, written and
	// fsynced alone (the benchmark baseline).
	NoGroupCommit bool
}

// ErrClosed is returned by Append after Close.
var ErrClosed = errors.New("journal: writer is closed")

// WriterStats counts what a Writer has made durable.
type WriterStats struct {
	Appends int64 // Append calls whose records are on disk
	Records int64 // records on disk
	Fsyncs  int64 // fsyncs that covered them
}

// file is what a Writer needs of its *os.File; tests swap in failing ones.
type file interface {
	io.Writer
	Sync() error
	Truncate(size int64) error
	Close() error
}

// Writer appends lines durably to a file it holds locked (FileKind): the
// one fsync'd append writer of a journal and of Adyen's notification file.
// Concurrent Appends share one write and one fsync. It assumes that an
// fsync that returned nil is on the disk, and that a crash tears at most
// the last write (a torn tail, which Open repairs). After a failed fsync
// it stops for good (fsyncgate); a journal replaced behind its lock is
// ErrReplaced.
type Writer struct {
	kind    *FileKind
	path    string
	f       file
	info    os.FileInfo // identity of the file OpenLocked locked
	noGroup bool

	mu      sync.Mutex
	work    *sync.Cond // signals the flusher: pending work or close
	pending []*commit  // commits waiting for their write, oldest first
	spare   []byte     // buffer of the last commit, reused
	err     error      // sticky, of kind.WriteFailed
	closed  bool
	size    int64 // bytes written and fsynced
	framed  bool  // the file ends in a commit line; only the I/O path changes it
	flushed chan struct{}

	appends, records, fsyncs atomic.Int64
}

// commit is the records of one or more Appends: one write, one fsync.
type commit struct {
	buf     []byte // record lines; the commit line is added when written
	appends int64  // Appends whose last records are in it
	records int64
	dones   []func() // of its Appends, run once it is durable
	done    chan struct{}
	err     error
}

// Open locks path (TakeLock) and loads every record. A torn tail (see
// decide) is saved to <path>.torn-<unix-nanos>, cut off and reported;
// corruption (*CorruptError) and an unknown version are refused.
func Open(path string, opts Options) (*Writer, *State, *Torn, error) {
	l, err := TakeLock(path)
	if err != nil {
		return nil, nil, nil, err
	}
	f := l.f
	size := l.info.Size()
	ld, err := load(io.NewSectionReader(f, 0, size), path, ReadOptions{})
	if err != nil {
		f.Close()
		return nil, nil, nil, err
	}
	state, torn := ld.state, ld.torn
	if torn != nil {
		if torn.SavedTo, err = journalFile.CutTail(f, path, torn.Offset, size); err != nil {
			f.Close()
			return nil, nil, nil, err
		}
		size = torn.Offset
	}
	w := journalFile.NewWriter(f, path, l.info, size, opts)
	w.framed = ld.framed // before any Append, so before the flusher reads it
	return w, state, torn, nil
}

// NewWriter appends to f, opened as path by k.OpenLocked (info), at size.
func (k *FileKind) NewWriter(f *os.File, path string, info os.FileInfo, size int64, opts Options) *Writer {
	w := &Writer{kind: k, path: path, f: f, info: info, noGroup: opts.NoGroupCommit, size: size, flushed: make(chan struct{})}
	w.work = sync.NewCond(&w.mu)
	go w.flusher()
	return w
}

func (w *Writer) Path() string { return w.path }

func (w *Writer) Stats() WriterStats {
	return WriterStats{Appends: w.appends.Load(), Records: w.records.Load(), Fsyncs: w.fsyncs.Load()}
}

var linePool = sync.Pool{New: func() any { return new([]byte) }}

// Append returns once recs are written and fsynced; an invalid record
// writes nothing. After a failed write or fsync every Append returns the
// same *WriteError.
func (w *Writer) Append(recs ...*Record) error {
	if len(recs) == 0 {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.usable()
	}
	bp := linePool.Get().(*[]byte)
	defer linePool.Put(bp)
	buf := (*bp)[:0]
	for _, r := range recs {
		if err := r.Validate(); err != nil {
			return fmt.Errorf("journal %s: invalid record: %w", w.path, err)
		}
		start := len(buf)
		var err error
		if buf, err = MarshalLine(buf, r); err != nil {
			return fmt.Errorf("journal %s: %w", w.path, err)
		}
		if n := len(buf) - start - 1; n > maxLine {
			return fmt.Errorf("journal %s: invalid record: its line is %d bytes, more than a journal line holds (%d)", w.path, n, maxLine)
		}
	}
	*bp = buf
	return w.AppendLines(buf, nil)()
}

// AppendLines queues whole lines and returns a wait that returns once they
// are written and fsynced (or why not); done, if set, runs first, in the
// order of the Appends.
func (w *Writer) AppendLines(buf []byte, done func()) (wait func() error) {
	w.mu.Lock()
	if err := w.usable(); err != nil {
		w.mu.Unlock()
		return func() error { return err }
	}
	var c *commit
	for line := range bytes.Lines(buf) {
		// NoGroupCommit joins only the Append's own commit.
		if n := len(w.pending); n > 0 && (!w.noGroup || c != nil) && len(w.pending[n-1].buf)+len(line) <= maxCommit {
			c = w.pending[n-1]
		} else {
			c = &commit{buf: w.spare[:0], done: make(chan struct{})}
			w.spare = nil
			w.pending = append(w.pending, c)
		}
		c.buf = append(c.buf, line...)
		c.records++
	}
	c.appends++
	if done != nil {
		c.dones = append(c.dones, done)
	}
	w.work.Signal()
	w.mu.Unlock()
	return func() error {
		<-c.done
		return c.err
	}
}

// usable is the error that stops an Append before it writes; w.mu held.
func (w *Writer) usable() error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return ErrClosed
	}
	return nil
}

// flusher writes and fsyncs the oldest pending commit, while later Appends
// gather in the next one.
func (w *Writer) flusher() {
	defer close(w.flushed)
	for {
		w.mu.Lock()
		for len(w.pending) == 0 && !w.closed {
			w.work.Wait()
		}
		if len(w.pending) == 0 {
			w.mu.Unlock()
			return // closed and drained
		}
		c := w.pending[0]
		w.pending = w.pending[1:]
		failed := w.err
		w.mu.Unlock()
		if failed != nil {
			c.err = failed
		} else {
			c.err = w.writeCommit(c)
		}
		buf := c.buf
		close(c.done)
		w.mu.Lock()
		if cap(buf) <= maxCommit+4096 {
			w.spare = buf
		}
		w.mu.Unlock()
	}
}

// writeCommit writes c, in a journal with its commit line. A journal not
// ending in a commit line first gets an empty commit of its own, so that
// what it held is never taken for a torn tail.
func (w *Writer) writeCommit(c *commit) error {
	if w.kind.Framed {
		if !w.framed {
			if err := w.writeSync(emptyCommit); err != nil {
				return err
			}
			w.framed = true
		}
		n := len(c.buf)
		c.buf = AppendCommit(c.buf, c.buf[:n], int(c.records))
	}
	if err := w.writeSync(c.buf); err != nil {
		return err
	}
	w.fsyncs.Add(1)
	w.appends.Add(c.appends)
	w.records.Add(c.records)
	for _, done := range c.dones {
		done()
	}
	return nil
}

// writeSync writes buf and fsyncs; on failure it cuts back what it wrote
// and fails the writer for good.
func (w *Writer) writeSync(buf []byte) error {
	n, err := w.f.Write(buf)
	if err == nil {
		err = w.f.Sync()
	}
	if err != nil {
		// Best effort: the next Open repairs a torn tail anyway.
		if w.f.Truncate(w.size) == nil {
			_ = w.f.Sync()
		}
	} else if w.size += int64(n); w.kind.CheckPath {
		err = w.checkPath()
	}
	if err != nil {
		werr := w.kind.WriteFailed(w.path, err)
		w.mu.Lock()
		w.err = werr
		w.mu.Unlock()
		return werr
	}
	return nil
}

// checkPath: a program that ignores the lock may have removed or replaced
// the journal, and records acknowledged from it would be lost.
func (w *Writer) checkPath() error {
	cur, err := os.Stat(w.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &replacedError{how: "removed or renamed", file: w.otherFile()}
	case err != nil:
		return fmt.Errorf("cannot check that the path still names the journal: %w", err)
	case !os.SameFile(cur, w.info):
		return &replacedError{how: "replaced by another file", file: w.otherFile()}
	}
	return nil
}

// otherFile names a file that is not the journal in replacedError.
func (w *Writer) otherFile() string {
	if w.kind.Framed {
		return ""
	}
	return w.kind.What
}

// Close waits for Appends in progress, then closes and unlocks the file.
func (w *Writer) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	w.closed = true
	w.work.Broadcast()
	w.mu.Unlock()
	<-w.flushed
	if err := w.f.Close(); err != nil {
		return fmt.Errorf("%s %s: %w", w.kind.What, w.path, err)
	}
	return nil
}

// A group commit is its record lines and one commit line,
//
// 	{"v":1,"type":"commit","records":N,"crc32c":"0a1b2c3d"}
//
// in one write and one fsync: N record lines, CRC-32C over their bytes.
// It is framing, never handed on; it tells where the last acknowledged
// commit ends, so damage after it is torn and before it corrupt (decide).

// maxCommit caps the record bytes of a commit, and so a reader's look-back.
const maxCommit = 4 << 20

// maxCommitLine is the longest commit line.
const maxCommitLine = len(commitHead) + len("4194304") + len(commitMid) + 8 + len(commitTail)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

const (
	commitType = `{"v":1,"type":"`
	commitHead = commitType + `commit","records":`
	commitMid  = `,"crc32c":"`
	commitTail = "\"}\n"
)

// emptyCommit frames a file that does not end in a commit line (writeCommit).
var emptyCommit = AppendCommit(nil, nil, 0)

// AppendCommit appends the commit line of the n record lines in records.
func AppendCommit(dst, records []byte, n int) []byte {
	return appendCommitCRC(dst, n, crc32.Checksum(records, castagnoli))
}

func appendCommitCRC(dst []byte, n int, crc uint32) []byte {
	dst = strconv.AppendInt(append(dst, commitHead...), int64(n), 10)
	sum := binary.BigEndian.AppendUint32(make([]byte, 0, 4), crc)
	return append(hex.AppendEncode(append(dst, commitMid...), sum), commitTail...)
}

// parseCommit reads a commit line in exactly AppendCommit's form;
// isCommit: the line claims to be one.
func parseCommit(line []byte) (n int, crc uint32, isCommit, ok bool) {
	if !bytes.HasPrefix(line, []byte(commitType+`commit"`)) {
		return 0, 0, false, false
	}
	v, p, ok := fastInt(line, len(commitHead))
	var sum [4]byte
	if !ok || v < 0 || v > maxCommit || p+len(commitMid)+8 > len(line) {
		return 0, 0, true, false
	}
	if _, err := hex.Decode(sum[:], line[p+len(commitMid):p+len(commitMid)+8]); err != nil {
		return 0, 0, true, false
	}
	n, crc = int(v), binary.BigEndian.Uint32(sum[:])
	var buf [maxCommitLine]byte // the line as AppendCommit writes it, '\n' cut
	if want := appendCommitCRC(buf[:0], n, crc); string(want[:len(want)-1]) != string(line) {
		return 0, 0, true, false
	}
	return n, crc, true, true
}

// framer writes record lines as a journal of its own (merge output).
type framer struct {
	w       io.Writer
	buf     []byte // the open commit's record lines
	records int
	err     error
}

// framedCommit is far below maxCommit: most commits check inside a block.
const framedCommit = 32 << 10

func newFramer(w io.Writer) *framer {
	return &framer{w: w, buf: make([]byte, 0, framedCommit+maxLine+len(emptyCommit)+16)}
}

func (f *framer) record(line []byte) {
	if len(f.buf)+len(line)+1 > framedCommit && f.records > 0 {
		f.end()
	}
	f.buf = append(append(f.buf, line...), '\n')
	f.records++
}

func (f *framer) end() {
	n := len(f.buf)
	f.buf = AppendCommit(f.buf, f.buf[:n], f.records)
	if f.err == nil {
		_, f.err = f.w.Write(f.buf)
	}
	f.buf, f.records = f.buf[:0], 0
}

// close ends the last commit; without records it writes nothing.
func (f *framer) close() error {
	if f.records > 0 {
		f.end()
	}
	return f.err
}
