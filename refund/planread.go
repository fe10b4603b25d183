package refund

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"math"
	"os"
	"sync"
	"sync/atomic"

	"github.com/refundkit/refundkit/journal"
)

// parsedLine is one plan line read, or the error that ends the plan.
type parsedLine struct {
	line int
	item Item
	err  error
}

// planIndex is what a run knows of its plan so far: for each (batch, item)
// the line that lists it and its target, hashed. readPlan fills it; the
// workers ask it whether a refund of another item of the batch on a charge
// is the plan's own (two partial refunds of one charge).
//
// Items are numbered in a journal.IDTable (4 bytes a slot, one cache miss
// a new item) beside flat slices, not a Go map: the map's lookups and
// growth were an eighth of a restart's CPU over a million-item plan.
type planIndex struct {
	mu    sync.RWMutex
	seed  maphash.Seed
	ids   journal.IDTable
	items [][]plannedItem // by id, in chunks of planChunk so growing never copies
	// whole: every line of the plan has been read, so an item it does not
	// list is not in it (until then, such an item may be on a later line).
	whole atomic.Bool
}

type plannedItem struct {
	key    uint64 // the item's (batch, item), hashed
	line   int32
	target uint64 // hash of the item's charge, payment intent, capture or psp_reference
}

const planChunk = 1 << 16

func (p *planIndex) item(id uint32) *plannedItem { return &p.items[id/planChunk][id%planChunk] }

func newPlanIndex() *planIndex {
	return &planIndex{seed: maphash.MakeSeed()}
}

func (p *planIndex) key(batch, item string) uint64 {
	var h maphash.Hash
	h.SetSeed(p.seed)
	h.WriteString(batch)
	h.WriteByte(0)
	h.WriteString(item)
	return h.Sum64()
}

// targetHash hashes a payment id: 64 bits, so that another payment's id
// never passes for an item's own but once in 2^64.
func (p *planIndex) targetHash(target string) uint64 {
	return maphash.String(p.seed, "t\x00"+target)
}

// find returns the id of the item whose key is k.
func (p *planIndex) find(k uint64) (uint32, bool) {
	for id := range p.ids.Candidates(k) {
		if p.item(id).key == k {
			return id, true
		}
	}
	return 0, false
}

func (p *planIndex) keyOf(id uint32) uint64 { return p.item(id).key }

// lineOf returns the plan line of the item whose key is k, 0 if none.
func (p *planIndex) lineOf(k uint64) int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if id, ok := p.find(k); ok {
		return int(p.item(id).line)
	}
	return 0
}

// add records it at line, or returns the line that listed it before.
// The caller holds p.mu for writing, only around the call: never while it
// waits for input, so workers asking on never wait on a slow plan.
func (p *planIndex) add(it *Item, line int) (prev int, dup bool) {
	k := p.key(it.Batch, it.Item)
	if id, ok := p.find(k); ok {
		return int(p.item(id).line), true
	}
	id := p.ids.Add(k, p.keyOf)
	if id%planChunk == 0 {
		p.items = append(p.items, make([]plannedItem, planChunk))
	}
	*p.item(id) = plannedItem{key: k, line: int32(line), target: p.targetHash(it.Target())}
	return 0, false
}

// on says whether the plan read so far lists item of batch on one of
// targets (the names of one payment), and whether it lists the item at all.
func (p *planIndex) on(batch, item string, targets ...string) (on, listed bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	id, ok := p.find(p.key(batch, item))
	if !ok {
		return false, false
	}
	h := p.item(id).target
	for _, t := range targets {
		if t != "" && h == p.targetHash(t) {
			return true, true
		}
	}
	return false, true
}

// readPlan parses plan lines on a goroutine of its own, in batches, so that
// parsing a large plan overlaps with the journal lookups and the output. It
// refuses an item listed twice, and stops at the first bad line, which ends
// the last batch as its error. Batches the consumer is done with may come
// back on free (nil: none do), to be filled again: a resumed run over a
// large plan would otherwise make a batch's worth of garbage every 256
// lines.
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
	// Before the reader waits for more input, what it has read goes to the
	// workers: a plan that streams in slowly (a producer still running, a
	// terminal) is worked on as it comes, not 256 lines at a time.
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

// PeekPlan reads in up to its first line that is not blank and checks that
// line is a plan item, before a run opens its journal or checkpoint: a
// plan that is not one (the charges themselves, piped past plan) or no plan
// at all (a failed command before the pipe) must leave no journal and no
// summary behind. It returns a reader of the whole input, the lines read
// included, and whether there is a line to read. A first line that is not
// a plan item is an *InputError naming it, as Run would name it (with a
// JSON object that is not one: the field at fault), wrapping ErrNotPlanItem
// when the line is not a JSON object at all. Only the first line is read
// ahead: a plan that streams in is still worked on as it comes.
func PeekPlan(in io.Reader, name string) (io.Reader, bool, error) {
	return (*PlanSize)(nil).Peek(in, name)
}

// Peek is PeekPlan, and s learns the plan_items of the first line: the
// total is known before the first item is worked on.
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
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if line = bytes.TrimSpace(line); len(line) > 0 {
			return line
		}
	}
	return nil
}

// PlanSize is what a run knows of how many items its plan has, for the
// progress display's total and ETA; Items is 0 while that is unknown. It
// learns it from three sources, the best first:
//
//   - the plan read to its end: the items read (of the run's shard), exact;
//   - a plan file (File): its lines that are not blank, counted once;
//   - the plan_items that plan writes on every item: the total while every
//     line read gives the same count and no more lines than it.
//
// A count is a hint about the plan, never part of it: one that the plan's
// own lines contradict (a plan cut short or filtered keeps its count;
// plans concatenated, or edited by hand, give counts that disagree or are
// exceeded) is dropped, and the total is unknown until the plan is read
// to its end. With a Shard, neither count is the shard's: the total is
// known once the plan is read. The methods of a nil *PlanSize do nothing.
type PlanSize struct {
	// Shard is the run's shard (Config.Shard): the items it works are
	// the ones counted.
	Shard Shard
	// File, when the plan is a file, is counted the first time Items is
	// asked (one more pass over it, only for the display).
	File string

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
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.given == 0 {
		s.given = cmp.Or(given, -1)
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
	if s == nil {
		return
	}
	s.mu.Lock()
	s.whole = true
	s.mu.Unlock()
}

type planSizeKey struct{}

// WithPlanSize returns ctx carrying s: the run given it (Run) tells s what
// it reads of its plan, as net/http/httptrace's context carries hooks.
func WithPlanSize(ctx context.Context, s *PlanSize) context.Context {
	return context.WithValue(ctx, planSizeKey{}, s)
}

func planSizeOf(ctx context.Context) *PlanSize {
	s, _ := ctx.Value(planSizeKey{}).(*PlanSize)
	return s
}

// countLines counts the lines of a plan file that are not blank; 0 when
// it cannot be read (the run will say why).
func countLines(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), MaxLineBytes)
	n := 0
	for sc.Scan() {
		if !blank(sc.Bytes()) {
			n++
		}
	}
	return n
}
