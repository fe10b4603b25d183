package journal

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/refundkit/refundkit/journal/arena"
)

// MergeOptions tune MergeWith.
type MergeOptions struct {
	// Compact keeps one final record per item (see Merge).
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

// Conflict is two records of one item that cannot both be true: two
// different refunds, or a refund and a final failure. Both stay in the
// output; people decide.
type Conflict struct {
	Batch, Item string
	Reason      string // what disagrees
	First       string // file:line of the earlier record
	Second      string // file:line of the later record
}

func (c Conflict) String() string {
	return fmt.Sprintf("%s: batch %s item %s: %s (first at %s)", c.Second, c.Batch, c.Item, c.Reason, c.First)
}

// Merge writes the records of the journals at paths (the shards of one
// batch, or the journals of runs on several machines) to out as one
// journal:
//
//   - Order: records are sorted by ts; records with the same ts keep the
//     order of the inputs as named, then their order within their input.
//     An input in ts order (as one Writer nearly always leaves it) is
//     streamed; an input whose ts ever goes backwards (concurrent appenders
//     can stamp a record before another that is written first) is sorted
//     in memory first, its lines kept there; MergeInput.OutOfOrder says so.
//   - Identical records (the same line once encoded) collapse into one.
//   - A torn tail of an input is reported (MergeInput.Torn) and left out.
//   - Corruption or an unknown version in any input stops the merge with
//     file:line, as Load does. Output already written to out is then
//     incomplete: write to a temporary file and rename it only on success.
//   - Conflicting outcomes for one item (two different refund ids, or a
//     refund and a final failure) are all kept, and reported as Conflicts
//     in merge order.
//
// With MergeOptions.Compact the output keeps, per item, only what its state
// needs: the refunded record (the first one, which State keeps); else the
// last final failure; else (in doubt) every record from the first intent of
// its highest attempt on, with the last failure before it if none follows,
// which keeps the attempt, its key's age, whether the key is burned and the
// last error code. Canceled records are all kept. An item with a conflict,
// or whose state the rule would not reproduce (a clock that stepped back),
// keeps all its records.
func Merge(paths []string, out io.Writer) (MergeReport, error) {
	return MergeWith(paths, out, MergeOptions{})
}

// MergeWith is Merge with options.
func MergeWith(paths []string, out io.Writer, opts MergeOptions) (MergeReport, error) {
	inOrder, err := checkOrder(paths)
	if err != nil {
		return MergeReport{}, err
	}
	if !opts.Compact {
		m := newMerger(paths, inOrder)
		m.outcomes = newOutcomeLog()
		report, err := m.run(out)
		if err == nil {
			report.Conflicts, _ = m.outcomes.conflicts(paths)
		}
		return report, err
	}
	// Compact: a first pass learns every item's history, a second writes
	// what it must keep.
	plan := &compactPlan{state: NewState()}
	m := newMerger(paths, inOrder)
	m.outcomes = newOutcomeLog()
	m.plan = plan
	if _, err := m.run(nil); err != nil {
		return MergeReport{}, err
	}
	conflicts, items := m.outcomes.conflicts(paths)
	plan.decide(items)
	second := newMerger(paths, inOrder)
	second.keep = plan
	report, err := second.run(out)
	report.Conflicts = conflicts
	return report, err
}

// tsKey orders records by their instant.
type tsKey struct {
	sec  int64
	nsec int32
}

func keyOf(t time.Time) tsKey { return tsKey{t.Unix(), int32(t.Nanosecond())} }

func (a tsKey) less(b tsKey) bool { return a.sec < b.sec || (a.sec == b.sec && a.nsec < b.nsec) }

// checkOrder reports, per input, whether its records are in ts order. It
// reads only the timestamps, on all cores; lines it cannot read end its
// check, and the merge reports them.
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

func inTSOrder(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	var (
		prev     tsKey
		prevZ    []byte // the previous ts when in UTC form, compared as text
		havePrev bool
		r        Record
		long     []byte
	)
	for {
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
			return true, nil // the end, a torn tail or an overlong line: the merge judges
		}
		line = line[:len(line)-1]
		ts := quickTS(line)
		if prevZ != nil && isUTCForm(ts) {
			if lessUTCForm(ts, prevZ) {
				return false, nil
			}
			prevZ = append(prevZ[:0], ts...)
			continue
		}
		// Parse the timestamp, and the previous one if it was kept as text.
		t, ok, _ := parseTime(string(ts))
		if !ok {
			if decodeLine(line, string(line), &r) != nil {
				return true, nil
			}
			t = r.Time
		}
		if prevZ != nil {
			p, _, _ := parseTime(string(prevZ))
			prev, prevZ = keyOf(p), nil
		}
		k := keyOf(t)
		if havePrev && k.less(prev) {
			return false, nil
		}
		prev, havePrev = k, true
		if ok && isUTCForm(ts) {
			prevZ = append(prevZ[:0], ts...)
		}
	}
}

// quickTS finds the ts of a line without decoding the rest: where
// MarshalLine puts it, else after the first "ts":" (in valid JSON a quote
// inside a string is escaped, so that is the key). Nil if none.
func quickTS(line []byte) []byte {
	const head = `{"v":1,"type":"`
	i := -1
	if len(line) > len(head) && string(line[:len(head)]) == head {
		if q := bytes.IndexByte(line[len(head):], '"'); q >= 0 {
			if at := len(head) + q; bytes.HasPrefix(line[at:], []byte(`","ts":"`)) {
				i = at + len(`","ts":"`)
			}
		}
	}
	if i < 0 {
		if i = bytes.Index(line, []byte(`"ts":"`)); i < 0 {
			return nil
		}
		i += len(`"ts":"`)
	}
	j := bytes.IndexByte(line[i:], '"')
	if j < 0 {
		return nil
	}
	return line[i : i+j]
}

// isUTCForm reports whether ts has the form 2006-01-02T15:04:05[.9*]Z, in
// which comparing the text orders the instants (see lessUTCForm).
func isUTCForm(ts []byte) bool {
	n := len(ts)
	if n < 20 || n > 30 || ts[n-1] != 'Z' || (n > 20 && (ts[19] != '.' || n == 21)) {
		return false
	}
	for i, c := range ts[:n-1] {
		switch i {
		case 4, 7:
			if c != '-' {
				return false
			}
		case 10:
			if c != 'T' {
				return false
			}
		case 13, 16:
			if c != ':' {
				return false
			}
		case 19:
		default:
			if c < '0' || c > '9' {
				return false
			}
		}
	}
	return true
}

// lessUTCForm orders two timestamps of the UTC form: date and time as text,
// then the fractions as digits padded with zeros.
func lessUTCForm(a, b []byte) bool {
	if c := bytes.Compare(a[:19], b[:19]); c != 0 {
		return c < 0
	}
	fa, fb := a[19:len(a)-1], b[19:len(b)-1] // "" or ".ddd"
	for i := 1; i < 10; i++ {
		da, db := byte('0'), byte('0')
		if i < len(fa) {
			da = fa[i]
		}
		if i < len(fb) {
			db = fb[i]
		}
		if da != db {
			return da < db
		}
	}
	return false
}

// mergeRec is the head record of an input.
type mergeRec struct {
	line      []byte // the line as read
	canonical bool   // line is what MarshalLine writes for the record
	lineNo    int
	key       tsKey
	rec       *Record   // the record when it came whole, else nil and:
	span      *lineSpan // the outcome fields of a canonical line, in chunk
	chunk     []byte
}

// record is the head's record, decoded again into scratch if it came as
// a line only.
func (h *mergeRec) record(scratch *Record) (*Record, error) {
	if h.rec != nil {
		return h.rec, nil
	}
	if err := decodeLine(h.line, unsafe.String(unsafe.SliceData(h.line), len(h.line)), scratch); err != nil {
		return nil, err // cannot happen: the line decoded before
	}
	return scratch, nil
}

// spanString is a string of a chunk, by offset and length.
func spanString(chunk []byte, sp [2]int32) string {
	if sp[1] == 0 {
		return ""
	}
	return unsafe.String(&chunk[sp[0]], int(sp[1]))
}

// mergeSource yields the records of one input in ts order.
type mergeSource struct {
	input int
	name  string
	f     *os.File
	size  int64
	head  mergeRec

	// Streaming, for inputs in ts order.
	cr     *chunkReader
	ch     *chunkWork
	pos    int
	sc     *Scanner
	scLine []byte // the Scanner's record, encoded

	// Sorted in memory, for the others.
	sorted []sortedLine
	lines  arena.Arena
	spare  Record

	count int
	torn  *Torn
}

// sortedLine is a line of an out-of-order input, kept (in its canonical
// form) for sorting.
type sortedLine struct {
	key    tsKey
	line   arena.Ref
	lineNo int
}

func openSource(input int, path string, inOrder bool) (*mergeSource, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	s := &mergeSource{input: input, name: path, f: f, size: info.Size()}
	s.cr = readChunks(f, s.size, loadChunk, 3, 1, false)
	if inOrder {
		return s, nil
	}
	// Read it all, keep the lines, sort them; records are decoded again
	// when served.
	for {
		ok, err := s.stream()
		if err != nil {
			s.close()
			return nil, err
		}
		if !ok {
			break
		}
		line := s.head.line
		if !s.head.canonical {
			r, err := s.head.record(&s.spare)
			if err != nil {
				s.close()
				return nil, fmt.Errorf("%s:%d: %w", s.name, s.head.lineNo, err)
			}
			line, _ = MarshalLine(nil, r)
			line = line[:len(line)-1]
		}
		s.sorted = append(s.sorted, sortedLine{key: s.head.key, line: s.lines.Add(unsafe.String(unsafe.SliceData(line), len(line))), lineNo: s.head.lineNo})
	}
	slices.SortStableFunc(s.sorted, func(a, b sortedLine) int {
		switch {
		case a.key.less(b.key):
			return -1
		case b.key.less(a.key):
			return 1
		}
		return 0
	})
	s.count = 0
	return s, nil
}

func (s *mergeSource) close() {
	if s.cr != nil {
		s.cr.close()
		s.cr = nil
	}
	s.f.Close()
}

// advance makes the next record the head; false at the end of the input.
func (s *mergeSource) advance() (bool, error) {
	if s.sorted == nil {
		return s.stream()
	}
	if s.count == len(s.sorted) {
		return false, nil
	}
	l := s.sorted[s.count]
	s.count++
	line := s.lines.Get(l.line)
	if err := decodeLine(unsafe.Slice(unsafe.StringData(line), len(line)), line, &s.spare); err != nil {
		return false, fmt.Errorf("%s:%d: %w", s.name, l.lineNo, err) // cannot happen: it decoded before
	}
	s.head = mergeRec{rec: &s.spare, line: unsafe.Slice(unsafe.StringData(line), len(line)), canonical: true, lineNo: l.lineNo, key: l.key}
	return true, nil
}

// stream reads the next record from the file: from parsed chunks while
// they last, then from a Scanner that judges the rest.
func (s *mergeSource) stream() (bool, error) {
	for s.sc == nil {
		if s.ch != nil && s.pos < s.ch.parsed {
			sp := &s.ch.spans[s.pos]
			s.pos++
			s.count++
			s.head = mergeRec{line: s.ch.buf[sp.start:sp.end], canonical: sp.canonical, lineNo: s.count, key: sp.key, span: sp, chunk: s.ch.buf}
			return true, nil
		}
		if s.ch != nil {
			s.cr.release(s.ch)
		}
		s.ch, s.pos = s.cr.next(), 0
		if s.ch != nil {
			continue
		}
		if err := s.cr.err(); err != nil {
			return false, fmt.Errorf("%s: %w", s.name, err)
		}
		if s.cr.stop == s.size {
			return false, nil
		}
		s.sc = s.cr.scanner(s.f, s.name, s.size)
	}
	if s.sc.Scan() {
		s.count++
		r := s.sc.Record()
		line, err := MarshalLine(s.scLine[:0], r)
		if err != nil {
			return false, fmt.Errorf("%s:%d: %w", s.name, s.sc.Line(), err)
		}
		s.scLine = line
		s.head = mergeRec{rec: r, line: line[:len(line)-1], canonical: true, lineNo: s.sc.Line(), key: keyOf(r.Time)}
		return true, nil
	}
	s.torn = s.sc.Torn()
	return false, s.sc.Err()
}

// merger is one pass over the inputs in merge order.
type merger struct {
	paths   []string
	inOrder []bool
	sources []*mergeSource
	heap    []*mergeSource
	report  MergeReport

	group    dedupGroup
	seq      int // records after deduplication, in merge order
	scratch  []byte
	rec      Record       // a record decoded again from its line
	outcomes *outcomeLog  // collects outcomes to find conflicts, when set
	plan     *compactPlan // learns item histories, when set
	keep     *compactPlan // writes only what it keeps, when set
}

func newMerger(paths []string, inOrder []bool) *merger {
	return &merger{paths: paths, inOrder: inOrder}
}

// run merges the inputs, writing to out when it is not nil.
func (m *merger) run(out io.Writer) (MergeReport, error) {
	m.report.Inputs = make([]MergeInput, len(m.paths))
	defer func() {
		for _, s := range m.sources {
			s.close()
		}
	}()
	for i, p := range m.paths {
		s, err := openSource(i, p, m.inOrder[i])
		if err != nil {
			return m.report, err
		}
		m.sources = append(m.sources, s)
		m.report.Inputs[i] = MergeInput{Path: p, OutOfOrder: !m.inOrder[i]}
		if err := m.push(s); err != nil {
			return m.report, err
		}
	}
	var w *bufio.Writer
	if out != nil {
		w = bufio.NewWriterSize(out, 1<<20)
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
			// The order check passed this input, so this is a bug, not bad
			// input: stop rather than write records out of order.
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
		if err := w.Flush(); err != nil {
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

// before orders heads by ts, then by input.
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

// take handles the head record of s.
func (m *merger) take(s *mergeSource, w *bufio.Writer) error {
	h := &s.head
	var rec *Record
	if !h.canonical || m.plan != nil || m.keep != nil {
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
	if m.group.seen(h.key, line) {
		m.report.Duplicates++
		return nil
	}
	m.seq++
	if m.outcomes != nil {
		at := location{s.input, h.lineNo}
		switch {
		case rec != nil:
			m.outcomes.addRecord(rec, m.seq, at)
		case h.span != nil && h.span.outcome != 0:
			sp := h.span
			m.outcomes.add(sp.outcome == outcomeFailed, spanString(h.chunk, sp.batch), spanString(h.chunk, sp.item), spanString(h.chunk, sp.id), m.seq, at)
		}
	}
	if m.plan != nil {
		m.plan.learn(rec, m.seq)
	}
	if m.keep != nil && !m.keep.keeps(rec, m.seq) {
		m.report.Compacted++
		return nil
	}
	m.report.Records++
	if w != nil {
		w.Write(line)
		w.WriteByte('\n')
	}
	return nil
}

// dedupGroup remembers the records written at one instant: identical
// records have the same ts, and the output is in ts order, so only this
// group can hold a record's twin.
type dedupGroup struct {
	valid bool
	key   tsKey
	buf   []byte
	ends  []int
	set   map[string]struct{} // once the group is large
}

func (g *dedupGroup) seen(key tsKey, line []byte) bool {
	if !g.valid || key != g.key {
		g.valid, g.key = true, key
		g.buf, g.ends, g.set = g.buf[:0], g.ends[:0], nil
	}
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

// location is a record's input and line.
type location struct{ input, line int }

func (l location) String(paths []string) string { return fmt.Sprintf("%s:%d", paths[l.input], l.line) }

// outcomeLog keeps every outcome record (refunded, final failure) in the
// order written, compactly; conflicts are found at the end by grouping
// them per item. Appending keeps the merge loop off a large hash table.
type outcomeLog struct {
	seed    maphash.Seed
	strs    arena.Arena
	recs    [][]outcomeRec // chunks of outcomeChunk, so growing never copies
	n       int
	scratch []byte
}

const outcomeChunk = 1 << 14

func (o *outcomeLog) rec(i uint32) *outcomeRec { return &o.recs[i/outcomeChunk][i%outcomeChunk] }

type outcomeRec struct {
	hash   uint64    // of key
	key    arena.Ref // batch "\x00" item
	refund arena.Ref // refunded: the refund id; final failure: the code
	at     location
	seq    int
	final  bool // a final failure; else refunded
}

func newOutcomeLog() *outcomeLog { return &outcomeLog{seed: maphash.MakeSeed()} }

// addRecord logs r if it is an outcome.
func (o *outcomeLog) addRecord(r *Record, seq int, at location) {
	switch {
	case r.Type == TypeRefunded:
		o.add(false, r.Batch, r.Item, r.Refund, seq, at)
	case r.Type == TypeFailed && r.Final:
		o.add(true, r.Batch, r.Item, r.Code, seq, at)
	}
}

// add logs an outcome: a refund id, or the code of a final failure.
func (o *outcomeLog) add(final bool, batch, item, id string, seq int, at location) {
	o.scratch = append(append(append(o.scratch[:0], batch...), 0), item...)
	key := o.strs.Add(unsafe.String(unsafe.SliceData(o.scratch), len(o.scratch)))
	if o.n%outcomeChunk == 0 {
		o.recs = append(o.recs, make([]outcomeRec, outcomeChunk))
	}
	*o.rec(uint32(o.n)) = outcomeRec{
		hash: maphash.String(o.seed, o.strs.Get(key)), key: key, refund: o.strs.Add(id),
		at: at, seq: seq, final: final,
	}
	o.n++
}

// conflicts finds, per item, the outcomes that disagree with the item's
// first refund or first final failure, in merge order, and the items they
// concern.
func (o *outcomeLog) conflicts(paths []string) ([]Conflict, map[string]bool) {
	// Group by hash with a stable radix sort on its top 32 bits: outcomes
	// of one item end up together, in merge order.
	idx := make([]uint64, o.n)
	for i := range idx {
		idx[i] = o.rec(uint32(i)).hash&^(1<<32-1) | uint64(i)
	}
	tmp := make([]uint64, len(idx))
	for shift := 32; shift < 64; shift += 16 {
		var count [1 << 16]int
		for _, v := range idx {
			count[v>>shift&0xffff]++
		}
		sum := 0
		for i, c := range count {
			count[i], sum = sum, sum+c
		}
		for _, v := range idx {
			d := v >> shift & 0xffff
			tmp[count[d]] = v
			count[d]++
		}
		idx, tmp = tmp, idx
	}
	var (
		found []Conflict
		seqs  []int
		items = map[string]bool{}
	)
	for start := 0; start < len(idx); {
		end := start + 1
		for end < len(idx) && idx[end]>>32 == idx[start]>>32 {
			end++
		}
		if end-start > 1 {
			found, seqs = o.checkGroup(idx[start:end], paths, found, seqs, items)
		}
		start = end
	}
	order := make([]int, len(found))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return seqs[a] - seqs[b] })
	sorted := make([]Conflict, len(found))
	for i, j := range order {
		sorted[i] = found[j]
	}
	return sorted, items
}

// checkGroup runs the outcomes of one hash group, item by item, in merge
// order.
func (o *outcomeLog) checkGroup(group []uint64, paths []string, found []Conflict, seqs []int, items map[string]bool) ([]Conflict, []int) {
	done := make([]bool, len(group))
	for i := range group {
		if done[i] {
			continue
		}
		key := o.strs.Get(o.rec(uint32(group[i])).key)
		var refunded, failed *outcomeRec
		for j := i; j < len(group); j++ {
			r := o.rec(uint32(group[j]))
			if done[j] || o.strs.Get(r.key) != key {
				continue
			}
			done[j] = true
			var reason string
			var first *outcomeRec
			switch {
			case !r.final && refunded != nil && o.strs.Get(refunded.refund) != o.strs.Get(r.refund):
				reason, first = fmt.Sprintf("refunded as %s and as %s", o.strs.Get(refunded.refund), o.strs.Get(r.refund)), refunded
			case !r.final && failed != nil:
				reason, first = fmt.Sprintf("refunded as %s after failing for good (%s)", o.strs.Get(r.refund), o.strs.Get(failed.refund)), failed
			case r.final && refunded != nil:
				reason, first = fmt.Sprintf("failed for good (%s) after being refunded as %s", o.strs.Get(r.refund), o.strs.Get(refunded.refund)), refunded
			}
			switch {
			case !r.final && refunded == nil:
				refunded = r
			case r.final && failed == nil:
				failed = r
			}
			if reason != "" {
				batch, item, _ := strings.Cut(key, "\x00")
				found = append(found, Conflict{Batch: batch, Item: item, Reason: reason, First: first.at.String(paths), Second: r.at.String(paths)})
				seqs = append(seqs, r.seq)
				items[key] = true
			}
		}
	}
	return found, seqs
}

// compactPlan learns, in a first pass, which records each item needs, and
// answers for each record in the second pass (same merge order, same
// sequence numbers).
type compactPlan struct {
	state *State
	items []compactItem // by State slot
}

// compactItem is what an item's history says to keep. Sequence numbers
// are 1-based; 0 is none.
type compactItem struct {
	firstRefunded int // the refunded record State keeps
	lastFinal     int // the last final failure
	lastFailure   int // the last failure of any kind
	failureBefore int // the last failure before attempt
	attempt       int // the first intent of the highest attempt
	sentIntent    int // the last intent of the highest attempt: what was sent

	keepAll bool
	from    int // in doubt: keep every record from here on
	one     int // the one record kept (refunded or failed), or the failure before from
	intent  int // kept besides one: the intent that binds a final item to what was sent
}

func (p *compactPlan) learn(r *Record, seq int) {
	if r.Type == TypeCanceled {
		return
	}
	i, found := p.state.find(r.Batch, r.Item)
	var prev ItemState
	if found {
		prev = p.state.get(i)
	}
	p.state.Apply(r)
	if !found {
		i, _ = p.state.find(r.Batch, r.Item)
		p.items = append(p.items, compactItem{})
	}
	ci := &p.items[i]
	if prev.Status == StatusRefunded {
		return // State ignores it; so does the compacted journal
	}
	switch r.Type {
	case TypeRefunded:
		ci.firstRefunded = seq
	case TypeFailed:
		ci.lastFailure = seq
		if r.Final {
			ci.lastFinal = seq
		}
	case TypeIntent:
		if r.Attempt > prev.Attempt {
			ci.attempt, ci.failureBefore = seq, ci.lastFailure
		}
		if r.Attempt >= prev.Attempt {
			ci.sentIntent = seq
		}
	}
}

// decide settles what each item keeps, from its final state.
func (p *compactPlan) decide(conflicts map[string]bool) {
	p.state.Each(func(batch, item string, st ItemState) {
		i, _ := p.state.find(batch, item)
		ci := &p.items[i]
		if conflicts[batch+"\x00"+item] {
			ci.keepAll = true
			return
		}
		switch st.Status {
		// A final item keeps its outcome and the intent that says what was
		// sent, so a plan edited afterwards is still refused.
		case StatusRefunded:
			ci.one, ci.intent = ci.firstRefunded, ci.sentIntent
		case StatusFailed:
			ci.one, ci.intent = ci.lastFinal, ci.sentIntent
		case StatusInDoubt:
			// The records from the attempt's first intent on give the same
			// state: older attempts' intents after it change nothing.
			if ci.attempt == 0 {
				ci.keepAll = true
				return
			}
			ci.from = ci.attempt
			if ci.lastFailure < ci.attempt {
				ci.one = ci.failureBefore
			}
		default:
			ci.keepAll = true
		}
	})
}

// keeps says whether the record numbered seq stays in the compacted output.
func (p *compactPlan) keeps(r *Record, seq int) bool {
	if r.Type == TypeCanceled {
		return true
	}
	i, ok := p.state.find(r.Batch, r.Item)
	if !ok {
		return true // cannot happen: the first pass saw every record
	}
	ci := &p.items[i]
	return ci.keepAll || seq == ci.one || (ci.intent > 0 && seq == ci.intent) || (ci.from > 0 && seq >= ci.from)
}
