package journal

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	"github.com/refundkit/refundkit/journal/arena"
)

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

type mergeRec struct {
	line      []byte // the line as read
	canonical bool   // line is what MarshalLine writes for the record
	lineNo    int
	key       tsKey
	rec       *Record // valid until the source advances
}

// mergeSource yields one input's records in ts order: streamed, or
// sorted in memory for an input out of order.
type mergeSource struct {
	input int
	name  string
	f     *os.File
	head  mergeRec

	rd *Reader
	k  int

	sorted []sortedLine
	lines  arena.Arena
	spare  Record

	count int
	torn  *Torn

	// letGo, if set, runs before a streamed input lets its span's lines go.
	letGo func(*mergeSource)
}

// sortedLine is a line of an out-of-order input, in canonical form.
type sortedLine struct {
	key    tsKey
	line   arena.Ref
	lineNo int
}

// openSource opens an input; hashItem hashes a streamed input's items on
// the parsing worker.
func openSource(input int, path string, inOrder bool, hashItem func(string) uint64) (*mergeSource, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	// One worker an input: the merge reads several at once.
	s := &mergeSource{input: input, name: path, f: f}
	opts := ReadOptions{Workers: 1, InFlight: 3}
	if inOrder {
		opts.ItemHash = hashItem
	}
	s.rd = NewReader(io.NewSectionReader(f, 0, info.Size()), path, opts)
	if inOrder {
		return s, nil
	}
	// Keep every line, sort; records are decoded again when served.
	var scratch []byte
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
			scratch, _ = MarshalLine(scratch[:0], s.head.rec)
			line = scratch[:len(scratch)-1]
		}
		s.sorted = append(s.sorted, sortedLine{key: s.head.key, line: s.lines.Add(unsafe.String(unsafe.SliceData(line), len(line))), lineNo: s.head.lineNo})
	}
	slices.SortStableFunc(s.sorted, func(a, b sortedLine) int { return a.key.compare(b.key) })
	s.count = 0
	return s, nil
}

func (s *mergeSource) close() {
	if s.rd != nil {
		s.rd.Close()
		s.rd = nil
	}
	s.f.Close()
}

func (s *mergeSource) headHash() (uint64, bool) {
	if hashes := s.rd.Hashes(); s.sorted == nil && hashes != nil {
		return hashes[s.k-1], true
	}
	return 0, false
}

// advance makes the next record the head; false at the end.
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
	if _, err := decodeLine(unsafe.Slice(unsafe.StringData(line), len(line)), line, &s.spare); err != nil {
		return false, fmt.Errorf("%s:%d: %w", s.name, l.lineNo, err) // cannot happen: it decoded before
	}
	s.head = mergeRec{rec: &s.spare, line: unsafe.Slice(unsafe.StringData(line), len(line)), canonical: true, lineNo: l.lineNo, key: l.key}
	return true, nil
}

func (s *mergeSource) stream() (bool, error) {
	for s.k >= s.rd.spanLen() {
		if s.letGo != nil {
			s.letGo(s)
		}
		if !s.rd.Next() {
			s.torn = s.rd.Torn()
			return false, s.rd.Err()
		}
		s.k = 0
	}
	b, k, i := s.rd.at(s.k)
	r := &b.recs[k]
	s.head = mergeRec{line: b.recordLine(i), canonical: b.canon[k], lineNo: b.firstLine + i, key: keyOf(r.Time), rec: r}
	s.k++
	s.count++
	return true, nil
}
