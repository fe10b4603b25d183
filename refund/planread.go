package refund

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"sync/atomic"

	"github.com/refundkit/refundkit/journal"
)

// ItemReader reads plan items, one JSON object a line: the one loop refund,
// audit --plan and plan's JSON-lines input read with.
type ItemReader struct {
	// Decoder decodes each line; the zero value reads a plan as refund does.
	Decoder ItemDecoder
	lines   *LineReader
}

// NewItemReader reads items from r, named name in errors.
func NewItemReader(r io.Reader, name string) *ItemReader {
	return &ItemReader{lines: NewLineReader(r, name)}
}

// Next returns the next item and its line; a bad line is an *InputError,
// and reading can go on past it. At the end: io.EOF.
func (r *ItemReader) Next() (Item, int, error) {
	text, line, err := r.lines.Next()
	if err != nil {
		return Item{}, line, err
	}
	it, err := r.Decoder.Decode(text)
	if err != nil {
		if ie, ok := err.(*InputError); ok {
			ie.Name, ie.Line = r.lines.name, line
			return Item{}, line, ie
		}
		return Item{}, line, &InputError{Name: r.lines.name, Line: line, Err: err}
	}
	return it, line, nil
}

// LineReader reads the lines of a plan, or of plan's input: numbered from
// 1, blank ones skipped, none longer than MaxLineBytes.
type LineReader struct {
	br   *bufio.Reader
	name string
	line int // the number of the line last read
	buf  []byte
}

// NewLineReader reads lines from r, named name in errors.
func NewLineReader(r io.Reader, name string) *LineReader {
	return &LineReader{br: bufio.NewReaderSize(r, 64<<10), name: name}
}

// Next returns the next line that is not blank, without its line end, and
// its number, valid until the next call. At the end: io.EOF.
func (lr *LineReader) Next() ([]byte, int, error) {
	for {
		text, err := lr.read()
		if err != nil {
			return nil, lr.line, err
		}
		if !blank(text) {
			return text, lr.line, nil
		}
	}
}

// read reads one line: where it lies in the buffer, or gathered in lr.buf.
func (lr *LineReader) read() ([]byte, error) {
	lr.buf = lr.buf[:0]
	size, started := 0, false
	for {
		chunk, err := lr.br.ReadSlice('\n')
		size += len(chunk)
		started = started || len(chunk) > 0
		switch err {
		case bufio.ErrBufferFull:
			if size <= MaxLineBytes {
				lr.buf = append(lr.buf, chunk...)
			}
			continue
		case nil, io.EOF:
			if !started {
				return nil, io.EOF
			}
		default:
			return nil, err
		}
		lr.line++
		switch {
		case size > MaxLineBytes:
			return nil, &InputError{Name: lr.name, Line: lr.line, Err: fmt.Errorf("line longer than %d bytes", MaxLineBytes)}
		case len(lr.buf) > 0:
			lr.buf = append(lr.buf, chunk...)
			return trimEOL(lr.buf), nil
		}
		return trimEOL(chunk), nil
	}
}

// trimEOL drops a line end, LF or CRLF.
func trimEOL(b []byte) []byte {
	return bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r"))
}

// blank reports a line of JSON white space only.
func blank(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\r' {
			return false
		}
	}
	return true
}

// parsedLine is one plan line read, or the error that ends the plan.
type parsedLine struct {
	line int
	item Item
	err  error
}

// planIndex is the plan read so far: each (batch, item)'s line and the
// hash of its target, in the module's one item index.
type planIndex struct {
	mu    sync.RWMutex
	items *journal.Index[plannedItem]
	whole atomic.Bool // every line is read: an item not listed is not in the plan
}

type plannedItem struct {
	line   int32
	target uint64 // hash of the item's charge, payment intent, capture or psp_reference
}

func newPlanIndex() *planIndex { return &planIndex{items: journal.NewIndex[plannedItem]()} }

// targetHash hashes a payment id in 64 bits.
func (p *planIndex) targetHash(target string) uint64 { return p.items.HashItem("t\x00" + target) }

// find returns the id of item of batch, reading under p.mu.
func (p *planIndex) find(batch, item string) (uint32, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.items.Find(batch, item)
}

// lineOf returns the plan line of the item numbered id.
func (p *planIndex) lineOf(id uint32) int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return int(p.items.Slot(id).line)
}

// add records it at line, or returns the line that listed it before. The
// caller holds p.mu, only around the call, never while waiting for input.
func (p *planIndex) add(it *Item, line int) (prev int, dup bool) {
	id, added := p.items.Add(it.Batch, it.Item)
	if !added {
		return int(p.items.Slot(id).line), true
	}
	*p.items.Slot(id) = plannedItem{line: int32(line), target: p.targetHash(it.Target())}
	return 0, false
}

// on says whether the plan read so far lists item of batch on one of
// targets (the names of one payment), and whether it lists the item at all.
func (p *planIndex) on(batch, item string, targets ...string) (on, listed bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	id, ok := p.items.Find(batch, item)
	if !ok {
		return false, false
	}
	h := p.items.Slot(id).target
	for _, t := range targets {
		if t != "" && h == p.targetHash(t) {
			return true, true
		}
	}
	return false, true
}

// readPlan parses plan lines in batches on a goroutine of its own; the
// first bad line (or item listed twice) is the last batch's error.
// Batches done with may come back on free (nil: none do).
func readPlan(ctx context.Context, in io.Reader, name string, index *planIndex, out chan<- []parsedLine, free <-chan []parsedLine) {
	defer close(out)
	const batchSize = 256
	fresh := func() []parsedLine {
		select {
		case b := <-free:
			return b[:0]
		default:
			return make([]parsedLine, 0, batchSize)
		}
	}
	batch := fresh()
	stopped := false
	send := func() bool {
		if stopped {
			return false
		}
		select {
		case out <- batch:
			batch = fresh()
			return true
		case <-ctx.Done():
			stopped = true
			return false
		}
	}
	// Before the reader waits for more input, what it has read goes out: a
	// plan that streams in slowly is worked on as it comes.
	items := NewItemReader(readerFunc(func(p []byte) (int, error) {
		if len(batch) > 0 {
			send()
		}
		if stopped {
			return 0, io.EOF
		}
		return in.Read(p)
	}), name)
	size := planSizeOf(ctx)
	for !stopped {
		it, line, err := items.Next()
		if err == io.EOF {
			size.end()
			break
		}
		if err == nil && line > math.MaxInt32 {
			err = &InputError{Name: name, Line: line, Err: fmt.Errorf("plan longer than %d lines: split it", math.MaxInt32)}
		}
		if err == nil {
			index.mu.Lock()
			prev, dup := index.add(&it, line)
			index.mu.Unlock()
			if dup {
				err = &InputError{Name: name, Line: line, Err: fmt.Errorf("item %q of batch %q is already at line %d", it.Item, it.Batch, prev)}
			}
		}
		if err != nil {
			if _, ok := err.(*InputError); !ok {
				err = fmt.Errorf("%s: %w", name, err)
			}
			batch = append(batch, parsedLine{line: line, err: err})
			send()
			return
		}
		size.item(&it, items.Decoder.PlanItems())
		batch = append(batch, parsedLine{line: line, item: it})
		if len(batch) == batchSize && !send() {
			return
		}
	}
	if len(batch) > 0 {
		send()
	}
}

// readerFunc is a function as an io.Reader.
type readerFunc func(p []byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// PeekPlan checks the first line of in that is not blank is a plan item,
// before a run opens its journal, and returns a reader of the whole input
// and whether there is a line; one not a JSON object wraps ErrNotPlanItem.
func PeekPlan(in io.Reader, name string) (io.Reader, bool, error) {
	return (*PlanSize)(nil).Peek(in, name)
}

// Peek is PeekPlan, and s learns the plan_items of the first line.
func (s *PlanSize) Peek(in io.Reader, name string) (io.Reader, bool, error) {
	var seen bytes.Buffer
	items := NewItemReader(io.TeeReader(in, &seen), name)
	_, _, err := items.Next()
	replay := io.MultiReader(&seen, in)
	switch ie := (*InputError)(nil); {
	case err == io.EOF:
		return nil, false, nil
	case errors.As(err, &ie):
		if text := firstText(seen.Bytes()); len(text) == 0 || text[0] != '{' {
			return nil, false, &InputError{Name: ie.Name, Line: ie.Line,
				Err: fmt.Errorf("%w: %s (%v)", ErrNotPlanItem, Show(string(text)), ie.Err)}
		}
		return nil, false, ie
	case err != nil:
		return nil, false, fmt.Errorf("%s: %w", name, err)
	}
	s.first(items.Decoder.PlanItems())
	return replay, true, nil
}

// ErrNotPlanItem is a plan line that is not a JSON object: not plan's
// output at all.
var ErrNotPlanItem = errors.New("not a plan item")

// firstText is the first line of b that is not blank, trimmed.
func firstText(b []byte) []byte {
	for line := range bytes.Lines(b) {
		if line = bytes.TrimSpace(line); len(line) > 0 {
			return line
		}
	}
	return nil
}

// PlanSize is how many items a run's plan has, for the progress display:
// the plan read to its end, else File's lines, else the plan_items every
// line gives while they hold. With a Shard, only the first. Nil does nothing.
type PlanSize struct {
	Shard Shard  // the run's (Config.Shard): its items are counted
	File  string // the plan file, counted the first time Items is asked

	countOnce sync.Once
	mu        sync.Mutex
	counted   int  // File's lines that are not blank; 0: none or unknown
	given     int  // plan_items of every line so far; 0 none read yet, -1 none that holds
	lines     int  // items read, all shards
	read      int  // items read of Shard
	whole     bool // the plan was read to its end
}

// Items is the plan's number of items (of its shard) as far as s knows,
// 0 when it does not.
func (s *PlanSize) Items() int {
	if s == nil {
		return 0
	}
	s.countOnce.Do(func() {
		if s.File == "" || s.Shard.N > 0 {
			return
		}
		n := countLines(s.File)
		s.mu.Lock()
		s.counted = n
		s.mu.Unlock()
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.whole:
		return s.read
	case s.Shard.N > 0:
		return 0
	case s.counted > 0 && s.lines <= s.counted:
		return s.counted
	case s.given > 0:
		return s.given
	}
	return 0
}

// first takes the plan_items of the plan's first line, seen ahead.
func (s *PlanSize) first(given int) {
	if s != nil {
		s.mu.Lock()
		s.given = cmp.Or(s.given, given, -1)
		s.mu.Unlock()
	}
}

// item counts an item read whose line gave plan_items given (0: none).
func (s *PlanSize) item(it *Item, given int) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lines++
	if s.Shard.Holds(it) {
		s.read++
	}
	switch {
	case s.given == 0:
		s.given = cmp.Or(given, -1)
	case s.given != given:
		s.given = -1
	}
	if s.given > 0 && s.lines > s.given {
		s.given = -1
	}
}

// end says the plan was read to its end.
func (s *PlanSize) end() {
	if s != nil {
		s.mu.Lock()
		s.whole = true
		s.mu.Unlock()
	}
}

type planSizeKey struct{}

// WithPlanSize returns ctx carrying s: Run tells s what it reads of its plan.
func WithPlanSize(ctx context.Context, s *PlanSize) context.Context {
	return context.WithValue(ctx, planSizeKey{}, s)
}

func planSizeOf(ctx context.Context) *PlanSize {
	s, _ := ctx.Value(planSizeKey{}).(*PlanSize)
	return s
}

// countLines counts the lines of a file that are not blank; 0 when it
// cannot be read (the run will say why).
func countLines(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	lines, n := NewLineReader(f, path), 0
	for _, _, err := lines.Next(); err == nil; _, _, err = lines.Next() {
		n++
	}
	return n
}
