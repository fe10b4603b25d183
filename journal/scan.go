package journal

import (
	"io"
	"unsafe"
)

// Scanner streams the records of a journal one at a time: a Reader with no
// workers, stopping at a torn tail (Torn) or corruption (Err).
type Scanner struct {
	rd   *Reader
	k    int // the next record of the Reader's run
	rec  *Record
	line int
	off  int64
}

func NewScanner(r io.Reader, name string) *Scanner {
	return &Scanner{rd: NewReader(r, name, ReadOptions{BlockSize: 256 << 10})}
}

// Scan reads the next record; false at the end, a torn tail or an error.
func (s *Scanner) Scan() bool {
	s.rec = nil
	for s.k >= len(s.rd.Records()) {
		if !s.rd.Next() {
			return false
		}
		s.k = 0
	}
	// A record with strings of its own, so callers may keep it.
	r, b, line, off, _ := s.rd.at(s.k)
	str := string(b)
	rec := new(Record)
	if err := decodeLine(unsafe.Slice(unsafe.StringData(str), len(str)), str, rec); err != nil {
		*rec = *r // cannot happen: the line decoded before
	}
	s.rec, s.line, s.off = rec, line, off
	s.k++
	return true
}

func (s *Scanner) Record() *Record { return s.rec }

func (s *Scanner) Line() int { return s.line }

func (s *Scanner) Offset() int64 { return s.off }

func (s *Scanner) Err() error { return s.rd.Err() }

func (s *Scanner) Torn() *Torn { return s.rd.Torn() }
