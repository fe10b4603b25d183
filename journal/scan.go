package journal

import (
	"io"
	"unsafe"
)

// Scanner streams the records of a journal one at a time, on the caller's
// goroutine: a Reader with no workers. It stops at the end of what is kept:
// a torn tail is reported by Torn, corruption by Err. It never changes the
// file.
type Scanner struct {
	rd   *Reader
	k    int // the next record of the Reader's run
	rec  *Record
	line int
	off  int64
}

// NewScanner reads records from r; name is how errors and Torn name it.
func NewScanner(r io.Reader, name string) *Scanner {
	return &Scanner{rd: NewReader(r, name, ReadOptions{BlockSize: 256 << 10})}
}

// Scan reads the next record. It returns false at the end of the input, at a
// torn tail (see Torn) and at an error (see Err).
func (s *Scanner) Scan() bool {
	s.rec = nil
	for s.k >= len(s.rd.Records()) {
		if !s.rd.Next() {
			return false
		}
		s.k = 0
	}
	// A record of its own, with strings of its own, so callers may keep it.
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

// Record is the record Scan read. Each call to Scan makes a new one, so
// callers may keep it.
func (s *Scanner) Record() *Record { return s.rec }

// Line is the 1-based line number of the record Scan read.
func (s *Scanner) Line() int { return s.line }

// Offset is the byte offset where the record Scan read starts.
func (s *Scanner) Offset() int64 { return s.off }

// Err is the error that stopped Scan: an I/O error, a *CorruptError, or a
// *VersionError wrapped with file:line. A torn tail is not an error.
func (s *Scanner) Err() error { return s.rd.Err() }

// Torn reports a torn tail once Scan has returned false; nil if none.
func (s *Scanner) Torn() *Torn { return s.rd.Torn() }
