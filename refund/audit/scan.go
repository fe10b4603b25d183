package audit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/refundkit/refundkit/journal"
)

// blockSize is how much of a journal one worker decodes at a time: small
// enough that the records in flight stay in little memory, as large as the
// longest line a journal may hold, so that a block without a newline can
// only hold a line that is corrupt or torn. Tests shrink it.
var blockSize = 1 << 20

// scanBlock is a run of whole lines of a journal and what decoding it gave.
type scanBlock struct {
	data  []byte
	start int64 // offset of data in the input
	last  bool  // nothing follows data in the input
	// rest, when set, is the input from start on, to be read in order by
	// one Scanner: a line longer than a block cannot be split.
	rest io.Reader

	recs   []*journal.Record
	slab   []journal.Record // the records of a clean block, reused
	hashes []uint64         // of each record's item, by the sink's hash
	lines  int
	err    error
	torn   *journal.Torn
	done   chan struct{}
}

// recordSink takes the records of a journal, a run of consecutive lines at
// a time.
type recordSink interface {
	// hashItem hashes an item name; workers call it concurrently.
	hashItem(item string) uint64
	// applyRun takes records read from consecutive lines starting at line
	// first, with the hashes of their items. The records and their strings
	// are valid only during the call (their bytes are reused for the next
	// block): applyRun copies whatever it keeps.
	applyRun(recs []*journal.Record, hashes []uint64, name string, first int)
}

// scanJournal reads every record of a journal in order and hands it to the
// sink. Workers decode blocks of whole lines in parallel with
// journal.Scanner, so every line is judged by the journal's own strict
// decoder; a line a block's Scanner could only judge as its last one is
// judged again with what follows it. It returns the number of records and
// a torn final line, if any; a corrupt line or an unknown version is an
// error naming the file and line.
func scanJournal(r io.Reader, name string, sink recordSink) (int, *journal.Torn, error) {
	workers := max(1, runtime.GOMAXPROCS(0))
	inFlight := 2*workers + 1
	free := make(chan *scanBlock, inFlight)
	for range inFlight {
		free <- &scanBlock{done: make(chan struct{}, 1)}
	}
	work := make(chan *scanBlock, inFlight)
	ordered := make(chan *scanBlock, inFlight)
	quit := make(chan struct{})
	var readErr error // set before ordered is closed

	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			br := bufio.NewReaderSize(nil, 256<<10) // journal.NewScanner reuses it
			for b := range work {
				b.parse(br, name, sink)
				b.done <- struct{}{}
			}
		})
	}
	go func() {
		defer close(work)
		defer close(ordered)
		readErr = readBlocks(r, free, quit,
			func(b *scanBlock) { work <- b }, // never blocks: it holds every block
			func(b *scanBlock) bool {
				select {
				case ordered <- b:
					return true
				case <-quit:
					return false
				}
			})
	}()
	defer func() {
		close(quit)
		for b := range ordered {
			<-b.done
		}
		wg.Wait()
	}()

	records, lines := 0, 0
	for b := range ordered {
		<-b.done
		if b.rest != nil {
			n, torn, err := scanRest(b, name, lines, sink)
			return records + n, torn, err
		}
		// A record is a line: a bad line ends the block.
		sink.applyRun(b.recs, b.hashes, name, lines+1)
		records += len(b.recs)
		clear(b.recs) // let the records go
		b.recs, b.hashes = b.recs[:0], b.hashes[:0]
		if b.err != nil || b.torn != nil {
			torn, err := b.judge(name, lines)
			return records, torn, err
		}
		lines += b.lines
		free <- b
	}
	if readErr != nil {
		return records, nil, fmt.Errorf("%s: %w", name, readErr)
	}
	return records, nil, nil
}

// readBlocks cuts the input into blocks of whole lines, the last one
// holding whatever follows the last newline. It hands each block to parse
// at once, and to deliver, in order, once the next read tells whether the
// block is the last: a line is torn only if nothing follows it.
func readBlocks(r io.Reader, free <-chan *scanBlock, quit <-chan struct{}, parse func(*scanBlock), deliver func(*scanBlock) bool) error {
	var carry []byte
	var off int64
	var pending *scanBlock // parsing, not delivered: is it the last?
	for {
		var b *scanBlock
		select {
		case b = <-free:
		case <-quit:
			return nil
		}
		if cap(b.data) < blockSize {
			b.data = make([]byte, 0, blockSize)
		}
		b.data = append(b.data[:0], carry...)
		n, err := io.ReadFull(r, b.data[len(b.data):blockSize])
		b.data = b.data[:len(b.data)+n]
		b.start, b.last, b.rest = off, false, nil
		eof := err == io.EOF || err == io.ErrUnexpectedEOF
		if err != nil && !eof {
			return err
		}
		if len(b.data) == 0 {
			if pending != nil {
				pending.last = true
				deliver(pending)
			}
			return nil
		}
		if pending != nil && !deliver(pending) {
			return nil
		}
		pending = nil
		if !eof {
			end := bytes.LastIndexByte(b.data, '\n') + 1
			if end == 0 {
				// A line longer than a block: read the rest in order.
				b.rest = io.MultiReader(bytes.NewReader(b.data), r)
				b.done <- struct{}{}
				deliver(b)
				return nil
			}
			carry = append(carry[:0], b.data[end:]...)
			b.data = b.data[:end]
		}
		parse(b)
		if eof {
			b.last = true
			deliver(b)
			return nil
		}
		pending = b
		off += int64(len(b.data))
	}
}

// parse decodes the block with the journal's own Scanner and hashes the
// records' items, work the sink would otherwise do on its one goroutine.
func (b *scanBlock) parse(br *bufio.Reader, name string, sink recordSink) {
	if b.parseClean(sink) {
		return
	}
	clear(b.recs)
	b.recs, b.hashes = b.recs[:0], b.hashes[:0]
	br.Reset(bytes.NewReader(b.data))
	sc := journal.NewScanner(br, name)
	for sc.Scan() {
		rec := sc.Record()
		b.recs = append(b.recs, rec)
		b.hashes = append(b.hashes, sink.hashItem(rec.Item))
	}
	b.lines, b.err, b.torn = sc.Line(), sc.Err(), sc.Torn()
}

// parseClean decodes a block whose lines are all good records without a
// Scanner and without allocating: the records are decoded into a slab the
// block keeps, their strings point into the block's own bytes, and both are
// reused for the next block once the sink has copied what it keeps. Any
// line that does not decode sends the block to a Scanner, which judges it.
func (b *scanBlock) parseClean(sink recordSink) bool {
	data := b.data
	if len(data) == 0 || data[len(data)-1] != '\n' {
		return false
	}
	n := bytes.Count(data, []byte{'\n'})
	if cap(b.slab) < n {
		b.slab = make([]journal.Record, n)
	}
	slab := b.slab[:n]
	str := unsafe.String(unsafe.SliceData(data), len(data))
	for i, off := 0, 0; i < n; i++ {
		end := off + bytes.IndexByte(data[off:], '\n')
		rec := &slab[i]
		if journal.DecodeLine(data[off:end], str[off:end], rec) != nil {
			return false
		}
		b.recs = append(b.recs, rec)
		b.hashes = append(b.hashes, sink.hashItem(rec.Item))
		off = end + 1
	}
	b.lines = n
	return true
}

// judge turns a block's stop into what a Scanner over the whole input
// says: its line numbers and offsets, and, when the block ended the read
// but not the input, the verdict on a line that has more lines after it.
func (b *scanBlock) judge(name string, lines int) (*journal.Torn, error) {
	var corrupt *journal.CorruptError
	var version *journal.VersionError
	switch {
	case b.torn != nil && b.last:
		t := *b.torn
		t.Line += lines
		t.Offset += b.start
		return &t, nil
	case b.torn != nil:
		return nil, b.rejudge(name, lines, b.torn.Line, b.torn.Offset)
	case errors.As(b.err, &corrupt):
		if !b.last && corrupt.Line == b.lines {
			return nil, b.rejudge(name, lines, corrupt.Line, corrupt.Offset)
		}
		c := *corrupt
		c.Line += lines
		c.Offset += b.start
		return nil, &c
	case errors.As(b.err, &version):
		return nil, fmt.Errorf("%s:%d: %w", name, lines+b.lines, version)
	}
	return nil, b.err
}

// rejudge scans the block's line at off (its line-th) again with a line
// after it, as the input has one, so the Scanner reports it as corrupt with
// its reason instead of as a torn or appended-to last line.
func (b *scanBlock) rejudge(name string, lines, line int, off int64) error {
	sc := journal.NewScanner(io.MultiReader(bytes.NewReader(b.data[off:]), strings.NewReader("\n")), name)
	for sc.Scan() {
	}
	var corrupt *journal.CorruptError
	if errors.As(sc.Err(), &corrupt) {
		c := *corrupt
		c.Line = lines + line
		c.Offset = b.start + off
		return &c
	}
	if sc.Err() != nil {
		return sc.Err()
	}
	// Unreachable: a line without its newline is always the input's last.
	return &journal.CorruptError{Path: name, Line: lines + line, Offset: b.start + off, Reason: "record not understood"}
}

// scanRest reads the input from block b on with a single Scanner.
func scanRest(b *scanBlock, name string, lines int, sink recordSink) (int, *journal.Torn, error) {
	sc := journal.NewScanner(b.rest, name)
	n := 0
	for sc.Scan() {
		rec := sc.Record()
		sink.applyRun([]*journal.Record{rec}, []uint64{sink.hashItem(rec.Item)}, name, lines+sc.Line())
		n++
	}
	var corrupt *journal.CorruptError
	var version *journal.VersionError
	switch err := sc.Err(); {
	case errors.As(err, &corrupt):
		c := *corrupt
		c.Line += lines
		c.Offset += b.start
		return n, nil, &c
	case errors.As(err, &version):
		return n, nil, fmt.Errorf("%s:%d: %w", name, lines+sc.Line(), version)
	case err != nil:
		return n, nil, err
	}
	if t := sc.Torn(); t != nil {
		tt := *t
		tt.Line += lines
		tt.Offset += b.start
		return n, &tt, nil
	}
	return n, nil, nil
}
