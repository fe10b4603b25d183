package journal

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"sync"
	"unsafe"
)

// load folds every record of r (size bytes) into a new State.
//
// The clean part of the journal is read in chunks of whole lines that are
// parsed in parallel and applied in order. At the first line that does not
// decode, or a last line without '\n', a Scanner takes over from that line
// so that torn tails and corruption are judged by one piece of code.
func load(r io.ReaderAt, name string, size int64) (*State, *Torn, error) {
	return loadChunked(r, name, size, loadChunk)
}

// loadChunked is load reading chunk bytes at a time; tests make chunks
// small to put many boundaries in small journals.
func loadChunked(r io.ReaderAt, name string, size int64, chunk int) (*State, *Torn, error) {
	s := NewState()
	cr := readChunks(r, size, chunk, loadInFlight, runtime.GOMAXPROCS(0), true)
	defer cr.close()
	for {
		c := cr.next()
		if c == nil {
			break
		}
		for i := range c.parsed {
			s.Apply(&c.recs[i])
		}
		cr.release(c)
	}
	if err := cr.err(); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	if cr.stop == size {
		return s, nil, nil
	}
	sc := cr.scanner(r, name, size)
	for sc.Scan() {
		s.Apply(sc.Record())
	}
	if err := sc.Err(); err != nil {
		return nil, nil, err
	}
	return s, sc.Torn(), nil
}

const (
	loadChunk    = 1 << 20 // bytes read at once; lines never span chunks
	loadInFlight = 6       // chunks being read, parsed or consumed
)

// chunkWork is a run of whole lines and what parsing them found: the
// records (for load), or only what a merge needs of each line (spans),
// which is far less memory to carry from the parsing core to the merging
// one.
type chunkWork struct {
	buf     []byte // whole lines, each ending in '\n'
	n       int    // bytes of buf in use
	records bool   // keep whole records in recs
	recs    []Record
	spans   []lineSpan // where each record's line is in buf
	parsed  int        // lines decoded, from the start
	bad     bool       // decoding stopped at line parsed, starting at badAt
	badAt   int
	scratch Record // the record being decoded, when records is false
	done    chan struct{}
}

// lineSpan is a line of a chunk, without its '\n', and what a merge needs
// of its record when the line is canonical.
type lineSpan struct {
	key        tsKey // the record's ts
	start, end int32
	canonical  bool  // the line is what MarshalLine writes for its record
	outcome    uint8 // outcomeRefunded or outcomeFailed, else 0
	// When canonical: batch, item and the refund id (or the code of a
	// failure) as offsets and lengths in the chunk.
	batch, item, id [2]int32
}

// Outcomes a merge checks for conflicts.
const (
	outcomeRefunded = 1 + iota
	outcomeFailed   // a final failure
)

// chunkReader reads a journal in chunks of whole lines, parses them on
// worker goroutines and hands them out in order, up to the first line that
// does not decode or does not end in '\n'.
type chunkReader struct {
	ordered chan *chunkWork
	free    chan *chunkWork
	quit    chan struct{}
	workers sync.WaitGroup
	readErr error // set before ordered closes

	stop    int64 // offset of the first line not handed out in full
	lines   int   // lines handed out before stop
	stopped bool  // a chunk ended at a bad line
}

// readChunks starts reading r with up to inFlight chunks of chunk bytes
// and the given number of parsing workers, keeping whole records or not.
func readChunks(r io.ReaderAt, size int64, chunk, inFlight, workers int, records bool) *chunkReader {
	// Small journals (tests, short runs) get one buffer of their size.
	bufSize := chunk
	if size < int64(chunk) {
		bufSize, inFlight = int(size), 1
	}
	cr := &chunkReader{
		ordered: make(chan *chunkWork, inFlight),
		free:    make(chan *chunkWork, inFlight),
		quit:    make(chan struct{}),
	}
	if size == 0 {
		close(cr.ordered)
		return cr
	}
	for range inFlight {
		// A typical record is 150-250 bytes; parse grows these if needed.
		lines := bufSize/160 + 1
		c := &chunkWork{buf: make([]byte, bufSize), done: make(chan struct{}, 1), records: records, spans: make([]lineSpan, lines)}
		if records {
			c.recs = make([]Record, lines)
		}
		cr.free <- c
	}
	work := make(chan *chunkWork, inFlight)
	for range max(1, min(inFlight, workers)) {
		cr.workers.Go(func() {
			for c := range work {
				c.parse()
				c.done <- struct{}{}
			}
		})
	}
	go func() {
		defer close(cr.ordered)
		defer close(work)
		var carry []byte // start of a line cut by the previous read
		for off := int64(0); off < size; {
			var c *chunkWork
			select {
			case c = <-cr.free:
			case <-cr.quit:
				return
			}
			n := copy(c.buf, carry)
			want := min(int64(len(c.buf)-n), size-off)
			m, err := r.ReadAt(c.buf[n:n+int(want)], off)
			if err != nil && !(err == io.EOF && int64(m) == want) {
				cr.readErr = err
				return
			}
			off += int64(m)
			n += m
			end := bytes.LastIndexByte(c.buf[:n], '\n') + 1
			if end == 0 {
				// No whole line: a line longer than a chunk, or the last one
				// without '\n'. The Scanner judges it.
				return
			}
			carry = append(carry[:0], c.buf[end:n]...)
			c.n = end
			select {
			case cr.ordered <- c:
			case <-cr.quit:
				return
			}
			work <- c
		}
	}()
	return cr
}

// next returns the next parsed chunk, or nil at the end of the clean part.
// Its records stay valid until it is released.
func (cr *chunkReader) next() *chunkWork {
	if cr.stopped {
		return nil
	}
	c, ok := <-cr.ordered
	if !ok {
		return nil
	}
	<-c.done
	cr.lines += c.parsed
	if c.bad {
		cr.stop += int64(c.badAt)
		cr.stopped = true
	} else {
		cr.stop += int64(c.n)
	}
	return c
}

// release gives a chunk back for reuse.
func (cr *chunkReader) release(c *chunkWork) {
	select {
	case cr.free <- c:
	default:
	}
}

// err is the read error that ended the clean part early, if any. Valid
// once next has returned nil.
func (cr *chunkReader) err() error {
	if cr.stopped {
		return nil
	}
	return cr.readErr
}

// scanner continues where the clean part stopped, with line numbers and
// offsets counting from the start of the journal.
func (cr *chunkReader) scanner(r io.ReaderAt, name string, size int64) *Scanner {
	sc := NewScanner(io.NewSectionReader(r, cr.stop, size-cr.stop), name)
	sc.line, sc.next = cr.lines, cr.stop
	return sc
}

// close stops the reader and its workers.
func (cr *chunkReader) close() {
	close(cr.quit)
	for range cr.ordered {
	}
	cr.workers.Wait()
}

// parse decodes the chunk's lines until one fails. Record strings point
// into the chunk: whoever keeps them must copy them before the chunk is
// released (State.Apply does).
func (c *chunkWork) parse() {
	c.parsed, c.bad = 0, false
	data := c.buf[:c.n]
	for p := 0; p < len(data); {
		nl := bytes.IndexByte(data[p:], '\n')
		line := data[p : p+nl]
		if c.parsed == len(c.spans) {
			c.spans = append(c.spans, lineSpan{})
			c.spans = c.spans[:cap(c.spans)]
			if c.records {
				c.recs = append(c.recs, make([]Record, len(c.spans)-len(c.recs))...)
			}
		}
		r := &c.scratch
		if c.records {
			r = &c.recs[c.parsed]
		}
		str := unsafe.String(unsafe.SliceData(line), len(line))
		ok, canonical := decodeFast(line, str, r)
		if ok {
			ok = r.Validate() == nil
		} else {
			ok = len(line) > 0 && decodeJSON(line, r) == nil
		}
		if !ok {
			c.bad, c.badAt = true, p
			return
		}
		sp := lineSpan{key: keyOf(r.Time), start: int32(p), end: int32(p + nl), canonical: canonical}
		if canonical {
			// The fast path took the strings from line, so they are spans of it.
			at := func(s string) [2]int32 {
				if s == "" {
					return [2]int32{}
				}
				return [2]int32{int32(uintptr(unsafe.Pointer(unsafe.StringData(s))) - uintptr(unsafe.Pointer(&c.buf[0]))), int32(len(s))}
			}
			switch {
			case r.Type == TypeRefunded:
				sp.outcome, sp.id = outcomeRefunded, at(r.Refund)
			case r.Type == TypeFailed && r.Final:
				sp.outcome, sp.id = outcomeFailed, at(r.Code)
			}
			if sp.outcome != 0 {
				sp.batch, sp.item = at(r.Batch), at(r.Item)
			}
		}
		c.spans[c.parsed] = sp
		c.parsed++
		p += nl + 1
	}
}
