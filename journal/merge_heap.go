package journal

import (
	"fmt"
	"io"
)

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
	rec     Record // a record decoded again from its line

	// At most one is set, each on an index of its own: outcomes finds
	// conflicts; learn follows items for compaction, keep writes what it keeps.
	outcomes  *outcomeChecker
	learn     *Index[compactItem]
	keep      *Index[compactItem]
	conflicts *conflicts          // what learn finds
	hashItem  func(string) uint64 // the index's, set by run
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
		if err := m.push(s); err != nil {
			return m.report, err
		}
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

func (m *merger) push(s *mergeSource) error {
	ok, err := s.advance()
	if err != nil {
		return err
	}
	if !ok {
		m.finish(s)
		return nil
	}
	m.heap = append(m.heap, s)
	for i := len(m.heap) - 1; i > 0; {
		parent := (i - 1) / 2
		if !m.before(m.heap[i], m.heap[parent]) {
			break
		}
		m.heap[i], m.heap[parent] = m.heap[parent], m.heap[i]
		i = parent
	}
	return nil
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
	rec := h.rec // sorted in memory; streamed: decoded again only if needed
	if rec == nil && (!h.canonical || m.learn != nil || m.keep != nil) {
		var err error
		if rec, err = h.record(&m.rec); err != nil {
			return fmt.Errorf("%s:%d: %w", s.name, h.lineNo, err)
		}
	}
	line := h.line
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
	switch {
	case m.outcomes != nil:
		if o, ok := h.outcome(rec); ok {
			m.outcomes.add(o, at)
		}
	case m.learn != nil && rec.Type != TypeCanceled: // canceled records are all kept
		id, added := m.learn.AddHashed(rec.Batch, rec.Item, m.hash(s, rec.Item))
		ci := slotOf(m.learn, id, added)
		if o, ok := outcomeOf(rec); ok {
			var rh uint64
			if !o.final {
				rh = m.learn.HashItem(o.name)
			}
			if m.conflicts.checkItem(compactItems{m.learn}, id, o, rh, at) {
				ci.conflict = true
			}
		}
		ci.learn(rec, m.seq)
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
