package journal

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// maxLine bounds the memory one line may take. No record comes near it: a
// longer line is torn when it is the last one and corrupt otherwise.
const maxLine = 1 << 20

// Scanner streams the records of a journal, checking each one. It stops at
// the first bad line: a torn last line is reported by Torn, anything else by
// Err. It never changes the file.
type Scanner struct {
	r    *bufio.Reader
	name string

	rec  *Record
	line int
	off  int64 // start of the current line
	next int64 // start of the line after it
	long []byte

	err  error
	torn *Torn
	done bool
}

// NewScanner reads records from r; name is how errors and Torn name it.
func NewScanner(r io.Reader, name string) *Scanner {
	return &Scanner{r: bufio.NewReaderSize(r, 256<<10), name: name}
}

// Scan reads the next record. It returns false at the end of the input, at a
// torn last line (see Torn) and at an error (see Err).
func (s *Scanner) Scan() bool {
	if s.done {
		return false
	}
	s.rec = nil
	line, n, newline, err := s.readLine()
	if err != nil {
		return s.fail(fmt.Errorf("%s: %w", s.name, err))
	}
	if n == 0 {
		s.done = true
		return false
	}
	s.line++
	s.off = s.next
	s.next += int64(n)
	if !newline {
		return s.tear(n)
	}
	if line == nil { // longer than maxLine
		last, err := s.atEOF()
		if err != nil {
			return s.fail(err)
		}
		if last {
			return s.tear(n)
		}
		return s.fail(s.corrupt(fmt.Sprintf("line longer than %d bytes", maxLine)))
	}
	rec := new(Record)
	switch err := decodeLine(line, string(line), rec); {
	case err == nil:
		s.rec = rec
		return true
	case errors.As(err, new(*syntaxError)):
		last, ioErr := s.atEOF()
		if ioErr != nil {
			return s.fail(ioErr)
		}
		if last {
			if col := recordInside(line); col > 0 {
				return s.fail(s.corrupt(fmt.Sprintf("a complete record starts at byte %d, after an incomplete one: the journal was appended to without repair", col+1)))
			}
			return s.tear(n)
		}
		return s.fail(s.corrupt(err.Error()))
	case errors.As(err, new(*VersionError)):
		return s.fail(&lineError{path: s.name, line: s.line, err: err})
	default:
		return s.fail(s.corrupt(err.Error()))
	}
}

// Record is the record Scan read. Each call to Scan makes a new one, so
// callers may keep it.
func (s *Scanner) Record() *Record { return s.rec }

// Line is the 1-based line number of the last line read.
func (s *Scanner) Line() int { return s.line }

// Offset is the byte offset where the last line read starts.
func (s *Scanner) Offset() int64 { return s.off }

// Err is the error that stopped Scan: an I/O error, a *CorruptError, or a
// *VersionError wrapped with file:line. A torn last line is not an error.
func (s *Scanner) Err() error { return s.err }

// Torn reports a torn last line once Scan has returned false; nil if none.
func (s *Scanner) Torn() *Torn { return s.torn }

func (s *Scanner) fail(err error) bool {
	s.err, s.done, s.rec = err, true, nil
	return false
}

func (s *Scanner) tear(n int) bool {
	s.torn = &Torn{Path: s.name, Line: s.line, Offset: s.off, Bytes: n}
	s.done, s.rec = true, nil
	return false
}

func (s *Scanner) corrupt(reason string) error {
	return &CorruptError{Path: s.name, Line: s.line, Offset: s.off, Reason: reason}
}

// atEOF reports whether nothing follows the line just read.
func (s *Scanner) atEOF() (bool, error) {
	_, err := s.r.Peek(1)
	if err == io.EOF {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("%s: %w", s.name, err)
	}
	return false, nil
}

// readLine returns the next line without its '\n', the bytes it took in
// the input, and whether it ended with '\n'. A line over maxLine is consumed
// and counted but returned as nil. The returned slice is valid until the
// next call.
func (s *Scanner) readLine() (line []byte, n int, newline bool, err error) {
	frag, err := s.r.ReadSlice('\n')
	if err == nil {
		return frag[:len(frag)-1], len(frag), true, nil
	}
	s.long = s.long[:0]
	for {
		n += len(frag)
		if len(s.long)+len(frag) <= maxLine+1 {
			s.long = append(s.long, frag...)
		}
		switch err {
		case nil:
			if n > maxLine+1 {
				return nil, n, true, nil
			}
			return s.long[:len(s.long)-1], n, true, nil
		case io.EOF:
			return s.long, n, false, nil
		case bufio.ErrBufferFull:
			frag, err = s.r.ReadSlice('\n')
		default:
			return nil, n, false, err
		}
	}
}

// recordInside finds a whole record inside a newline-terminated last line
// that is not JSON. A crash leaves a prefix of a write, never a complete
// record after a partial one, so such a line is not torn: someone appended
// to a torn journal, and cutting the line would hide a committed record.
func recordInside(line []byte) int {
	for i := 1; i < len(line); i++ {
		j := bytes.Index(line[i:], []byte(`{"v":`))
		if j < 0 {
			return 0
		}
		i += j
		var r Record
		err := decodeLine(line[i:], string(line[i:]), &r)
		if err == nil || errors.As(err, new(*VersionError)) {
			return i
		}
	}
	return 0
}
