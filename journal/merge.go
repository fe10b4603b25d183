package journal

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"os"
	"time"
)

// MergeOptions tune MergeWith.
type MergeOptions struct {
	Compact bool
}

// MergeReport says what a merge read and wrote.
type MergeReport struct {
	Inputs     []MergeInput
	Records    int // records written
	Duplicates int // identical records collapsed into one
	Compacted  int // records left out by Compact
	Conflicts  []Conflict
}

// MergeInput is what a merge found in one input.
type MergeInput struct {
	Path       string
	Records    int   // records read, torn tail excluded
	OutOfOrder bool  // ts went backwards somewhere: sorted in memory
	Torn       *Torn // a torn tail, left out of the output
}

// Conflict is two records that cannot both be true: two refunds of one
// item, a refund and a final failure, or one refund of two items (Batch
// and Item name the second). Both stay in the output.
type Conflict struct {
	Batch, Item string
	Reason      string // what disagrees
	First       string // file:line of the earlier record
	Second      string // file:line of the later record
}

func (c Conflict) String() string {
	return fmt.Sprintf("%s: batch %s item %s: %s (first at %s)", c.Second, c.Batch, c.Item, c.Reason, c.First)
}

// Merge writes the records of the journals at paths to out as one journal:
//   - sorted by ts, ties in the order of the inputs, then of their lines;
//     an input whose ts goes backwards is sorted in memory (OutOfOrder);
//   - identical records collapse into one;
//   - a torn tail is reported (MergeInput.Torn) and left out;
//   - corruption or an unknown version stops it with file:line (out is
//     then incomplete: write a temporary file and rename it);
//   - conflicting outcomes are all kept and reported, in merge order.
//
// Compact keeps per item only what its state needs: the first refunded
// record, else the last final failure, else (in doubt) every record from
// the first intent of its highest attempt, with the last failure before
// it if none follows; canceled records, and every record of an item in
// conflict or whose state the rule would not reproduce, are kept.
func Merge(paths []string, out io.Writer) (MergeReport, error) {
	return MergeWith(paths, out, MergeOptions{})
}

// MergeWith is Merge with options.
func MergeWith(paths []string, out io.Writer, opts MergeOptions) (MergeReport, error) {
	inOrder, err := checkOrder(paths)
	if err != nil {
		return MergeReport{}, err
	}
	found := &conflicts{paths: paths, found: []Conflict{}}
	expect := expectedItems(paths)
	m := newMerger(paths, inOrder)
	m.outcomes = newOutcomeChecker(found, expect)
	if !opts.Compact {
		report, err := m.run(out)
		m.outcomes.close()
		if err == nil {
			report.Conflicts = found.found
		}
		return report, err
	}
	// Compact: a first pass learns every item's history, a second writes.
	m.learn = NewIndex[compactItem]()
	m.learn.Reserve(expect)
	_, err = m.run(nil)
	m.outcomes.close()
	if err != nil {
		return MergeReport{}, err
	}
	for _, c := range found.found { // an item in conflict keeps all its records
		if id, ok := m.learn.Find(c.Batch, c.Item); ok {
			m.learn.Slot(id).conflict = true
		}
	}
	second := newMerger(paths, inOrder)
	second.keep = m.learn
	report, err := second.run(out)
	report.Conflicts = found.found
	return report, err
}

// expectedItems guesses the items at paths (ItemsIn), to size an index once.
func expectedItems(paths []string) int {
	var size int64
	for _, p := range paths {
		if info, err := os.Stat(p); err == nil {
			size += info.Size()
		}
	}
	return ItemsIn(size)
}

// compactItem is what compaction's first pass learns of an item, and the
// second answers from (same merge order, same sequence numbers).
type compactItem struct {
	conflict bool // it keeps all its records

	// Status and attempt as Next makes them.
	status  Status
	attempt int

	// Records by sequence number, 1-based; 0 is none.
	firstRefunded int // the refunded record that settled it
	lastFinal     int // the last final failure
	lastFailure   int // the last failure of any kind
	failureBefore int // the last failure before attemptFrom
	attemptFrom   int // the first intent of the highest attempt
	sentIntent    int // the last intent Next took as what was sent
}

func (ci *compactItem) learn(r *Record, seq int) {
	// Sent starts false: next.Sent says Next took r as what was sent.
	prev := ItemState{Status: ci.status, Attempt: ci.attempt}
	next := Next(prev, r)
	ci.status, ci.attempt = next.Status, next.Attempt
	switch {
	case next.Status == StatusRefunded:
		if prev.Status != StatusRefunded {
			ci.firstRefunded = seq
		}
	case r.Type == TypeFailed:
		ci.lastFailure = seq
		if next.Status == StatusFailed {
			ci.lastFinal = seq
		}
	}
	if next.Attempt > prev.Attempt {
		ci.attemptFrom, ci.failureBefore = seq, ci.lastFailure
	}
	if next.Sent {
		ci.sentIntent = seq
	}
}

// keeps says whether the item's record seq stays in the output.
func (ci *compactItem) keeps(seq int) bool {
	switch {
	case ci.conflict:
		return true
	// A final item keeps its outcome and the intent that says what was sent.
	case ci.status == StatusRefunded:
		return seq == ci.firstRefunded || seq == ci.sentIntent
	case ci.status == StatusFailed:
		return seq == ci.lastFinal || seq == ci.sentIntent
	// In doubt: the records from the attempt's first intent on, with the
	// last failure before it if none follows, give the same state.
	case ci.status == StatusInDoubt && ci.attemptFrom > 0:
		return seq >= ci.attemptFrom || (ci.lastFailure < ci.attemptFrom && seq == ci.failureBefore)
	}
	return true
}

// dedupGroup remembers the records of one instant: the output is in ts
// order, so only this group can hold a twin. A lone line stays where its
// source holds it, copied only when a second comes or the source lets go.
type dedupGroup struct {
	valid bool
	key   tsKey
	held  []byte       // the group's one line, not copied yet
	from  *mergeSource // whose line held is
	buf   []byte
	ends  []int
	set   map[string]struct{} // once the group is large
}

// seen reports whether line was seen at instant key, and remembers it;
// stable: line stays valid until s moves to its next span.
func (g *dedupGroup) seen(key tsKey, line []byte, s *mergeSource, stable bool) bool {
	if !g.valid || key != g.key {
		g.valid, g.key = true, key
		g.buf, g.ends, g.set, g.held, g.from = g.buf[:0], g.ends[:0], nil, nil, nil
		if stable {
			g.held, g.from = line, s
			return false
		}
	}
	g.own()
	if g.set != nil {
		if _, ok := g.set[string(line)]; ok {
			return true
		}
		g.set[string(line)] = struct{}{}
		return false
	}
	start := 0
	for _, end := range g.ends {
		if bytes.Equal(g.buf[start:end], line) {
			return true
		}
		start = end
	}
	g.buf = append(g.buf, line...)
	g.ends = append(g.ends, len(g.buf))
	if len(g.ends) > 32 {
		g.set = make(map[string]struct{}, 64)
		start := 0
		for _, end := range g.ends {
			g.set[string(g.buf[start:end])] = struct{}{}
			start = end
		}
	}
	return false
}

func (g *dedupGroup) own() {
	if g.from != nil {
		g.buf = append(g.buf, g.held...)
		g.ends = append(g.ends, len(g.buf))
		g.held, g.from = nil, nil
	}
}

// release is called before s lets the lines of its span go.
func (g *dedupGroup) release(s *mergeSource) {
	if g.from == s {
		g.own()
	}
}

// merger is one pass over the inputs in merge order.
type merger struct {
	paths   []string
	inOrder []bool
	sources []*mergeSource
	heap    []*mergeSource
	report  MergeReport

	group   dedupGroup
	seq     int // records after deduplication, in merge order
	scratch []byte

	// Each on an index of its own: outcomes finds conflicts; learn follows
	// items for compaction (beside outcomes), keep writes what it keeps.
	outcomes *outcomeChecker
	learn    *Index[compactItem]
	keep     *Index[compactItem]
	hashItem func(string) uint64 // the index's, set by run
}

func newMerger(paths []string, inOrder []bool) *merger {
	return &merger{paths: paths, inOrder: inOrder}
}

func (m *merger) run(out io.Writer) (MergeReport, error) {
	m.report.Inputs = make([]MergeInput, len(m.paths))
	m.hashItem = m.itemHash()
	defer func() {
		for _, s := range m.sources {
			s.close()
		}
	}()
	for i, p := range m.paths {
		s, err := openSource(i, p, m.inOrder[i], m.hashItem)
		if err != nil {
			return m.report, err
		}
		s.letGo = m.group.release
		m.sources = append(m.sources, s)
		m.report.Inputs[i] = MergeInput{Path: p, OutOfOrder: !m.inOrder[i]}
		if ok, err := s.advance(); err != nil {
			return m.report, err
		} else if ok {
			m.heap = append(m.heap, s)
		} else {
			m.finish(s)
		}
	}
	for i := len(m.heap)/2 - 1; i >= 0; i-- {
		m.fix(i)
	}
	var w *framer
	if out != nil {
		w = newFramer(out)
	}
	for len(m.heap) > 0 {
		s := m.heap[0]
		if err := m.take(s, w); err != nil {
			return m.report, err
		}
		was := s.head.key
		ok, err := s.advance()
		if err != nil {
			return m.report, err
		}
		if ok && s.head.key.less(was) {
			// The order check passed this input: a bug, not bad input.
			return m.report, fmt.Errorf("%s:%d: ts goes backwards in an input checked to be in order", s.name, s.head.lineNo)
		}
		if ok {
			m.fix(0)
		} else {
			m.finish(s)
			last := len(m.heap) - 1
			m.heap[0] = m.heap[last]
			m.heap = m.heap[:last]
			if last > 0 {
				m.fix(0)
			}
		}
	}
	if w != nil {
		if err := w.close(); err != nil {
			return m.report, err
		}
	}
	return m.report, nil
}

func (m *merger) finish(s *mergeSource) {
	m.report.Inputs[s.input].Records = s.count
	m.report.Inputs[s.input].Torn = s.torn
}

func (m *merger) before(a, b *mergeSource) bool {
	if a.head.key != b.head.key {
		return a.head.key.less(b.head.key)
	}
	return a.input < b.input
}

func (m *merger) fix(i int) {
	h := m.heap
	for {
		least := i
		if l := 2*i + 1; l < len(h) && m.before(h[l], h[least]) {
			least = l
		}
		if r := 2*i + 2; r < len(h) && m.before(h[r], h[least]) {
			least = r
		}
		if least == i {
			return
		}
		h[i], h[least] = h[least], h[i]
		i = least
	}
}

func (m *merger) take(s *mergeSource, w *framer) error {
	h := &s.head
	rec, line := h.rec, h.line
	if !h.canonical {
		var err error
		if m.scratch, err = MarshalLine(m.scratch[:0], rec); err != nil {
			return fmt.Errorf("%s:%d: %w", s.name, h.lineNo, err)
		}
		line = m.scratch[:len(m.scratch)-1]
	}
	// A line encoded again is in scratch, overwritten next.
	if m.group.seen(h.key, line, s, h.canonical) {
		m.report.Duplicates++
		return nil
	}
	m.seq++
	at := location{s.input, h.lineNo}
	if m.outcomes != nil {
		if o, ok := outcomeOf(rec); ok {
			m.outcomes.add(o, at)
		}
	}
	switch {
	case m.learn != nil && rec.Type != TypeCanceled: // canceled records are all kept
		id, added := m.learn.AddHashed(rec.Batch, rec.Item, m.hash(s, rec.Item))
		slotOf(m.learn, id, added).learn(rec, m.seq)
	case m.keep != nil && rec.Type != TypeCanceled:
		if id, ok := m.keep.FindHashed(rec.Batch, rec.Item, m.hash(s, rec.Item)); ok && !m.keep.Slot(id).keeps(m.seq) {
			m.report.Compacted++
			return nil
		}
	}
	m.report.Records++
	if w != nil {
		w.record(line)
	}
	return nil
}

// itemHash hashes items on the parsing workers when the merge looks up
// every record's item.
func (m *merger) itemHash() func(string) uint64 {
	switch {
	case m.learn != nil:
		return m.learn.HashItem
	case m.keep != nil:
		return m.keep.HashItem
	}
	return nil
}

func (m *merger) hash(s *mergeSource, item string) uint64 {
	if h, ok := s.headHash(); ok {
		return h
	}
	return m.hashItem(item)
}

// slotOf writes a new slot before it is read: reading fresh memory maps
// the zero page, and the write after it faults again on every core.
func slotOf[S any](x *Index[S], id uint32, added bool) *S {
	s := x.Slot(id)
	if added {
		*s = *new(S)
	}
	return s
}

type tsKey struct {
	sec  int64
	nsec int
}

func keyOf(t time.Time) tsKey { return tsKey{t.Unix(), t.Nanosecond()} }

func (a tsKey) less(b tsKey) bool { return a.sec < b.sec || (a.sec == b.sec && a.nsec < b.nsec) }

func (a tsKey) compare(b tsKey) int {
	return cmp.Or(cmp.Compare(a.sec, b.sec), cmp.Compare(a.nsec, b.nsec))
}
