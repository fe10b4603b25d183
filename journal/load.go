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
	off, line, err := loadClean(r, size, chunk, s)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	if off == size {
		return s, nil, nil
	}
	sc := NewScanner(io.NewSectionReader(r, off, size-off), name)
	sc.line, sc.next = line, off
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
	loadInFlight = 6       // chunks being read, parsed or applied
)

// loadChunkWork is a run of whole lines and the records parsed from them.
type loadChunkWork struct {
	buf    []byte // whole lines, each ending in '\n'
	n      int    // bytes of buf in use
	recs   []Record
	parsed int  // records decoded, from the start
	bad    bool // decoding stopped at line parsed, starting at badAt
	badAt  int
	done   chan struct{}
}

// loadClean applies the records of r up to its first line that does not
// decode or does not end in '\n', and returns where that line starts and
// how many lines came before it.
func loadClean(r io.ReaderAt, size int64, chunk int, s *State) (stop int64, lines int, err error) {
	if size == 0 {
		return 0, 0, nil
	}
	// Small journals (tests, short runs) get buffers to their size.
	bufSize, inFlight := chunk, loadInFlight
	if size < int64(chunk) {
		bufSize, inFlight = int(size), 1
	}
	free := make(chan *loadChunkWork, inFlight)
	for range inFlight {
		free <- &loadChunkWork{buf: make([]byte, bufSize), done: make(chan struct{}, 1)}
	}
	work := make(chan *loadChunkWork, inFlight)
	ordered := make(chan *loadChunkWork, inFlight)
	quit := make(chan struct{})
	var readErr error // set before ordered closes

	var wg sync.WaitGroup
	for range min(inFlight, runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for c := range work {
				c.parse()
				c.done <- struct{}{}
			}
		})
	}
	go func() {
		defer close(ordered)
		defer close(work)
		var carry []byte // start of a line cut by the previous read
		for off := int64(0); off < size; {
			var c *loadChunkWork
			select {
			case c = <-free:
			case <-quit:
				return
			}
			n := copy(c.buf, carry)
			want := min(int64(len(c.buf)-n), size-off)
			m, err := r.ReadAt(c.buf[n:n+int(want)], off)
			if err != nil && !(err == io.EOF && int64(m) == want) {
				readErr = err
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
			case ordered <- c:
			case <-quit:
				return
			}
			work <- c
		}
	}()

	defer func() {
		close(quit)
		for range ordered {
		}
		wg.Wait()
	}()
	for c := range ordered {
		<-c.done
		for i := range c.parsed {
			s.Apply(&c.recs[i])
		}
		lines += c.parsed
		if c.bad {
			return stop + int64(c.badAt), lines, nil
		}
		stop += int64(c.n)
		free <- c
	}
	if readErr != nil {
		return stop, lines, readErr
	}
	return stop, lines, nil
}

// parse decodes the chunk's lines until one fails. Record strings point
// into the chunk: State.Apply copies what it keeps before the chunk is
// reused.
func (c *loadChunkWork) parse() {
	c.parsed, c.bad = 0, false
	data := c.buf[:c.n]
	for p := 0; p < len(data); {
		nl := bytes.IndexByte(data[p:], '\n')
		line := data[p : p+nl]
		if c.parsed == len(c.recs) {
			c.recs = append(c.recs, Record{})
			c.recs = c.recs[:cap(c.recs)]
		}
		str := unsafe.String(unsafe.SliceData(line), len(line))
		if len(line) == 0 || decodeLine(line, str, &c.recs[c.parsed]) != nil {
			c.bad, c.badAt = true, p
			return
		}
		c.parsed++
		p += nl + 1
	}
}
