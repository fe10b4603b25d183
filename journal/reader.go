package journal

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ReadOptions tune a Reader.
type ReadOptions struct {
	// Workers parse blocks in parallel; 0 parses them in Next, with no
	// goroutine (Close is then optional).
	Workers int
	// BlockSize is a block's bytes of whole lines (default 1 MiB).
	BlockSize int
	// InFlight is how many blocks are read ahead (default 2*Workers+2).
	InFlight int
	// ItemHash, when set, hashes every record's item on the workers (Hashes).
	ItemHash func(item string) uint64
}

// Reader streams the records of a journal: blocks of whole lines (source)
// are parsed on workers (block.parse), judged in order (judge) and handed
// out a span at a time once known to be kept. Commit lines are framing,
// never handed out; records after the last one wait until what follows is
// known (decide). It never changes the input.
type Reader struct {
	name string
	opts ReadOptions
	src  source

	// The pipeline, when Workers > 0.
	ordered chan *block
	work    chan *block
	tokens  chan struct{} // one per block read and not yet judged
	quit    chan struct{}
	workers sync.WaitGroup
	readErr error // set before ordered is closed
	closed  bool
	poolMu  sync.Mutex
	pool    []*block
	parsed  []parsed // what parsing fills, taken from blocks kept for their bytes alone

	judge    judge
	retained []*block // the blocks from the oldest one still needed on

	// The next line to hand out: retained[outB]'s line outLine, after outMark marks.
	outB, outLine, outMark int
	cur                    span
}

// span is the consecutive records of one block handed out at once, with
// the commit lines between them (marks m0 to m1).
type span struct {
	b      *block
	line   int // the first record's line index in b
	rec, n int // the first record's index in b.recs, and how many
	m0, m1 int // the marks between the span's records
	// A cursor: record k has the first before of those marks before it.
	k, before int
}

// NewReader reads the journal r, named name in errors and Torn.
func NewReader(r io.Reader, name string, opts ReadOptions) *Reader {
	if opts.BlockSize <= 0 {
		opts.BlockSize = 1 << 20
	}
	if opts.InFlight <= 0 {
		opts.InFlight = 2*opts.Workers + 2
	}
	rd := &Reader{name: name, opts: opts, src: source{r: r, blockSize: opts.BlockSize}}
	rd.judge = judge{name: name, nextLine: 1, windowStart: 1, endN: -1}
	if opts.Workers > 0 {
		rd.start()
	}
	return rd
}

func (rd *Reader) start() {
	n := rd.opts.InFlight
	rd.ordered = make(chan *block, n)
	rd.work = make(chan *block, n)
	rd.tokens = make(chan struct{}, n)
	rd.quit = make(chan struct{})
	for range rd.opts.Workers {
		rd.workers.Go(func() {
			for b := range rd.work {
				b.parse(&rd.opts)
				b.done <- struct{}{}
			}
		})
	}
	go func() {
		defer close(rd.work)
		defer close(rd.ordered)
		for {
			select {
			case rd.tokens <- struct{}{}:
			case <-rd.quit:
				return
			}
			b := rd.getBlock()
			more, err := rd.src.fill(b)
			if err != nil || !more {
				rd.readErr = err
				return
			}
			select {
			case rd.ordered <- b:
			case <-rd.quit:
				return
			}
			rd.work <- b // never blocks: tokens bound the blocks in flight
		}
	}()
}

// fetch returns the next parsed block, nil at the end.
func (rd *Reader) fetch() (*block, error) {
	if rd.opts.Workers == 0 {
		b := rd.getBlock()
		more, err := rd.src.fill(b)
		if err != nil || !more {
			return nil, err
		}
		b.parse(&rd.opts)
		return b, nil
	}
	b, ok := <-rd.ordered
	if !ok {
		return nil, rd.readErr
	}
	<-b.done
	<-rd.tokens
	return b, nil
}

func (rd *Reader) getBlock() *block {
	rd.poolMu.Lock()
	defer rd.poolMu.Unlock()
	var b *block
	if n := len(rd.pool); n > 0 {
		b = rd.pool[n-1]
		rd.pool = rd.pool[:n-1]
	} else {
		b = &block{done: make(chan struct{}, 1)}
	}
	if n := len(rd.parsed); b.canon == nil && n > 0 {
		b.parsed = rd.parsed[n-1]
		rd.parsed = rd.parsed[:n-1]
	}
	return b
}

func (rd *Reader) putBlock(b *block) {
	rd.poolMu.Lock()
	rd.pool = append(rd.pool, b)
	rd.poolMu.Unlock()
}

func (rd *Reader) Close() {
	if rd.closed || rd.opts.Workers == 0 {
		return
	}
	rd.closed = true
	close(rd.quit)
	for b := range rd.ordered {
		<-b.done
	}
	rd.workers.Wait()
}

// Next advances to the next span; false at the end of what is kept or at
// an error (Err, Torn).
func (rd *Reader) Next() bool {
	for {
		rd.release()
		if rd.serve() {
			return true
		}
		if rd.judge.done {
			rd.cur = span{}
			return false
		}
		b, err := rd.fetch()
		if err != nil {
			rd.judge.fail(fmt.Errorf("%s: %w", rd.name, err))
			continue
		}
		if b == nil {
			rd.judge.finish()
			continue
		}
		rd.retained = append(rd.retained, b)
		rd.judge.block(b, rd.retained)
	}
}

// Records of the current span, and their strings, are valid until Next.
func (rd *Reader) Records() []Record {
	if rd.cur.b == nil {
		return nil
	}
	return rd.cur.b.recs[rd.cur.rec : rd.cur.rec+rd.cur.n]
}

// Hashes are the hashes of the current span's items (ReadOptions.ItemHash).
func (rd *Reader) Hashes() []uint64 {
	if rd.cur.b == nil || rd.opts.ItemHash == nil {
		return nil
	}
	return rd.cur.b.hashes[rd.cur.rec : rd.cur.rec+rd.cur.n]
}

func (rd *Reader) Line(k int) int {
	b, _, i := rd.at(k)
	return b.firstLine + i
}

// RunEnd is the end of the run of consecutive lines that record k starts:
// the index of the first record after a commit line, or the span's length.
func (rd *Reader) RunEnd(k int) int {
	c := &rd.cur
	if i := c.m0 + c.marksBefore(k); i < c.m1 {
		return int(c.b.marks[i].recs) - c.rec
	}
	return c.n
}

// marksBefore counts the span's marks before record k, with a cursor.
func (c *span) marksBefore(k int) int {
	marks := c.b.marks[c.m0:c.m1]
	if k < c.k {
		c.k, c.before = 0, 0
	}
	for c.before < len(marks) && int(marks[c.before].recs) <= c.rec+k {
		c.before++
	}
	c.k = k
	return c.before
}

// Err is what stopped the Reader: an I/O error, a *CorruptError, or a
// *VersionError with file:line. A torn tail is not an error.
func (rd *Reader) Err() error { return rd.judge.err }

func (rd *Reader) Torn() *Torn { return rd.judge.torn }

// endsInCommit: what is kept ends in a commit line.
func (rd *Reader) endsInCommit() bool { return rd.judge.lastIsCommit }

// at is record k of the current span: its block, its index in the
// block's records, and its line's.
func (rd *Reader) at(k int) (b *block, rec, i int) {
	c := &rd.cur
	return c.b, c.rec + k, c.line + k + c.marksBefore(k)
}

func (rd *Reader) spanLen() int { return rd.cur.n }

// serve makes the next span the judge has kept current.
func (rd *Reader) serve() bool {
	for rd.outB < len(rd.retained) {
		b := rd.retained[rd.outB]
		if rd.outLine >= len(b.ends) {
			rd.outB, rd.outLine, rd.outMark = rd.outB+1, 0, 0
			continue
		}
		if b.firstLine+rd.outLine >= rd.judge.safe {
			if rd.judge.problem != nil {
				// Nothing past safe will be handed out: let the blocks go.
				rd.outB, rd.outLine, rd.outMark = len(rd.retained), 0, 0
			}
			return false
		}
		if rd.outMark < len(b.marks) && int(b.marks[rd.outMark].line) == rd.outLine {
			rd.outLine++ // a commit line the judge kept: framing
			rd.outMark++
			continue
		}
		end := min(len(b.ends), rd.judge.safe-b.firstLine)
		m1 := rd.outMark // the judge kept every mark before safe: commit lines
		for m1 < len(b.marks) && int(b.marks[m1].line) < end {
			m1++
		}
		rec := rd.outLine - rd.outMark
		rd.cur = span{b: b, line: rd.outLine, rec: rec, n: end - rd.outLine - (m1 - rd.outMark), m0: rd.outMark, m1: m1}
		rd.outLine, rd.outMark = end, m1
		return true
	}
	return false
}

// release gives back the leading blocks whose records are handed out and
// whose bytes no later commit line needs.
func (rd *Reader) release() {
	k := 0
	for k < rd.outB && k < len(rd.retained)-1 && !rd.judge.needs(rd.retained[k]) {
		rd.putBlock(rd.retained[k])
		k++
	}
	if k > 0 {
		rd.retained = append(rd.retained[:0], rd.retained[k:]...)
		rd.outB -= k
	}
	// Blocks before outB are read for their bytes alone: their records go
	// to another block.
	for _, b := range rd.retained[:rd.outB] {
		if b.canon != nil {
			rd.poolMu.Lock()
			rd.parsed = append(rd.parsed, b.parsed)
			rd.poolMu.Unlock()
			b.parsed = parsed{}
		}
	}
}

// Scanner streams the records of a journal one at a time: a Reader with no
// workers, stopping at a torn tail (Torn) or corruption (Err).
type Scanner struct {
	rd   *Reader
	k    int // the next record of the Reader's run
	rec  *Record
	line int
	off  int64
}

// NewScanner reads records from r, named name in errors and Torn.
func NewScanner(r io.Reader, name string) *Scanner {
	return &Scanner{rd: NewReader(r, name, ReadOptions{BlockSize: 256 << 10})}
}

// Scan reads the next record; false at the end, a torn tail or an error.
func (s *Scanner) Scan() bool {
	s.rec = nil
	for s.k >= len(s.rd.Records()) {
		if !s.rd.Next() {
			return false
		}
		s.k = 0
	}
	// A record with strings of its own, so callers may keep it.
	b, k, i := s.rd.at(s.k)
	str := string(b.recordLine(i))
	rec := new(Record)
	if _, err := decodeLine(unsafe.Slice(unsafe.StringData(str), len(str)), str, rec); err != nil {
		*rec = b.recs[k] // cannot happen: the line decoded before
	}
	s.rec, s.line, s.off = rec, b.firstLine+i, b.start+int64(b.lineStart(i))
	s.k++
	return true
}

func (s *Scanner) Record() *Record { return s.rec }

func (s *Scanner) Line() int { return s.line }

func (s *Scanner) Offset() int64 { return s.off }

func (s *Scanner) Err() error { return s.rd.Err() }

func (s *Scanner) Torn() *Torn { return s.rd.Torn() }

// Load reads the state of a journal without locking or changing it; a torn
// tail is reported, not repaired.
func Load(path string) (*State, *Torn, error) {
	f, err := journalFile.OpenRegular(path, unix.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		if nf := danglingLink(path); nf != nil {
			return nil, nil, nf // a link to nothing is no empty journal
		}
	}
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	// Only the size read now: a run appending meanwhile adds nothing half-read.
	l, err := load(io.NewSectionReader(f, 0, info.Size()), path, ReadOptions{})
	return l.state, l.torn, err
}

type loaded struct {
	state *State
	torn  *Torn
	// framed: what is kept ends in a commit line.
	framed bool
}

// load folds every record of r into a new State (workers: every core).
func load(r io.Reader, name string, opts ReadOptions) (loaded, error) {
	if opts.Workers == 0 {
		opts.Workers = runtime.GOMAXPROCS(0)
	}
	s := NewState()
	opts.ItemHash = s.idx.HashItem
	rd := NewReader(r, name, opts)
	defer rd.Close()
	if sr, ok := r.(*io.SectionReader); ok {
		s.idx.Reserve(ItemsIn(sr.Size()))
	}
	for rd.Next() {
		s.applyRun(rd.Records(), rd.Hashes())
	}
	if err := rd.Err(); err != nil {
		return loaded{}, err
	}
	return loaded{state: s, torn: rd.Torn(), framed: rd.endsInCommit()}, nil
}

// ItemsIn estimates the items of a journal of size bytes (an intent and
// an outcome of about 250 bytes each), to size an index once.
func ItemsIn(size int64) int { return int(min(size/512, 1<<30)) }
