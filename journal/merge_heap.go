package journal

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"time"
	"unsafe"
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

// checkOrder reports per input whether the records a Reader keeps are in
// ts order, reading only timestamps, on all cores.
func checkOrder(paths []string) ([]bool, error) {
	inOrder := make([]bool, len(paths))
	errs := make([]error, len(paths))
	next := make(chan int, len(paths))
	for i := range paths {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for range min(len(paths), runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for i := range next {
				inOrder[i], errs[i] = inTSOrder(paths[i])
			}
		})
	}
	wg.Wait()
	return inOrder, errors.Join(errs...)
}

// inTSOrder: a step back counts only if the Reader keeps it (not in a
// torn tail).
func inTSOrder(path string) (bool, error) {
	back, err := firstStepBack(path)
	if err != nil {
		return false, err
	}
	if back == 0 {
		return true, nil
	}
	kept, err := keepsLine(path, back)
	return !kept, err
}

// keepsLine reports whether a Reader hands on the record at line n.
func keepsLine(path string, n int) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return false, err
	}
	rd := NewReader(io.NewSectionReader(f, 0, info.Size()), path, ReadOptions{Workers: 1})
	defer rd.Close()
	for rd.Next() {
		if rd.Line(rd.spanLen()-1) >= n {
			return true, nil
		}
	}
	return false, nil // the end of what is kept: a torn tail, or an error the merge reports
}

// firstStepBack is the line of the first record stamped before the one
// above it, reading only timestamps; 0 if none, or at a line it cannot read.
func firstStepBack(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	var (
		prev     tsKey
		havePrev bool
		r        Record
		long     []byte
	)
	for n := 1; ; n++ {
		line, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			long = append(long[:0], line...)
			for err == bufio.ErrBufferFull && len(long) <= maxLine {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if err != nil {
			return 0, nil // the end, a torn tail or an overlong line: the merge judges
		}
		line = line[:len(line)-1]
		if _, _, isCommit, _ := parseCommit(line); isCommit {
			continue // framing: no ts
		}
		ts := quickTS(line)
		t, ok, _ := parseTime(unsafe.String(unsafe.SliceData(ts), len(ts)))
		if !ok {
			if _, err := decodeLine(line, string(line), &r); err != nil {
				return 0, nil
			}
			t = r.Time
		}
		k := keyOf(t)
		if havePrev && k.less(prev) {
			return n, nil
		}
		prev, havePrev = k, true
	}
}

// quickTS finds a line's ts without decoding it: after the first "ts":"
// (a quote in a string is escaped). Nil if none.
func quickTS(line []byte) []byte {
	i := bytes.Index(line, []byte(`"ts":"`))
	if i < 0 {
		return nil
	}
	i += len(`"ts":"`)
	j := bytes.IndexByte(line[i:], '"')
	if j < 0 {
		return nil
	}
	return line[i : i+j]
}
