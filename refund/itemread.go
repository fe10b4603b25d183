package refund

import (
	"bufio"
	"fmt"
	"io"
)

// ItemReader reads plan items, one JSON object a line: the one loop that
// refund, audit --plan and plan's JSON-lines input read with.
type ItemReader struct {
	// Decoder decodes each line; the zero value reads a plan as refund does.
	Decoder ItemDecoder
	lines   *LineReader
}

// NewItemReader reads items from r, named name in errors.
func NewItemReader(r io.Reader, name string) *ItemReader {
	return &ItemReader{lines: NewLineReader(r, name)}
}

// Next returns the next item and its line. A line that is not a valid item
// is an *InputError naming the input, the line and the field at fault;
// reading can go on past it. At the end of the input Next returns io.EOF;
// any other error is the reader's.
func (r *ItemReader) Next() (Item, int, error) {
	text, line, err := r.lines.Next()
	if err != nil {
		return Item{}, line, err
	}
	it, err := r.Decoder.Decode(text)
	if err != nil {
		if ie, ok := err.(*InputError); ok {
			ie.Name, ie.Line = r.lines.name, line
			return Item{}, line, ie
		}
		return Item{}, line, &InputError{Name: r.lines.name, Line: line, Err: err}
	}
	return it, line, nil
}

// LineReader reads the lines of a plan, or of plan's input: numbered from
// 1, blank lines (JSON white space only) skipped, none longer than
// MaxLineBytes, so that one runaway line cannot exhaust memory.
type LineReader struct {
	br   *bufio.Reader
	name string
	line int // the number of the line last read
	buf  []byte
}

// NewLineReader reads lines from r, named name in errors.
func NewLineReader(r io.Reader, name string) *LineReader {
	return &LineReader{br: bufio.NewReaderSize(r, 64<<10), name: name}
}

// Next returns the next line that is not blank, without its line end, and
// its number; the text is valid until the next call. A line longer than
// MaxLineBytes is an *InputError naming it, and reading can go on past it.
// At the end of the input Next returns io.EOF; any other error is r's.
func (lr *LineReader) Next() ([]byte, int, error) {
	for {
		text, err := lr.read()
		if err != nil {
			return nil, lr.line, err
		}
		if !blank(text) {
			return text, lr.line, nil
		}
	}
}

// read reads one line. A line that fits in the buffer, nearly every one,
// is returned where it lies; a longer one is gathered in lr.buf.
func (lr *LineReader) read() ([]byte, error) {
	lr.buf = lr.buf[:0]
	size, started := 0, false
	for {
		chunk, err := lr.br.ReadSlice('\n')
		size += len(chunk)
		started = started || len(chunk) > 0
		switch err {
		case bufio.ErrBufferFull:
			if size <= MaxLineBytes {
				lr.buf = append(lr.buf, chunk...)
			}
			continue
		case nil, io.EOF:
			if !started {
				return nil, io.EOF
			}
		default:
			return nil, err
		}
		lr.line++
		switch {
		case size > MaxLineBytes:
			return nil, &InputError{Name: lr.name, Line: lr.line, Err: fmt.Errorf("line longer than %d bytes", MaxLineBytes)}
		case len(lr.buf) > 0:
			lr.buf = append(lr.buf, chunk...)
			return trimEOL(lr.buf), nil
		}
		return trimEOL(chunk), nil
	}
}

// trimEOL drops a line end, LF or CRLF.
func trimEOL(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	if n := len(b); n > 0 && b[n-1] == '\r' {
		b = b[:n-1]
	}
	return b
}

// blank reports a line of JSON white space only.
func blank(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\r' {
			return false
		}
	}
	return true
}
