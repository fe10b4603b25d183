package journal

import (
	"fmt"
	"io"
	"os"
	"slices"
	"unsafe"

	"github.com/refundkit/refundkit/journal/arena"
)

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
