package plan

import (
	"bufio"
	"bytes"
	"io"
)

// lineReader reads lines of JSON lines and ids input, counting them, and
// bounds their length so one runaway line cannot exhaust memory.
type lineReader struct {
	br   *bufio.Reader
	line int // number of the line last returned
	buf  []byte
}

// next returns the next line, trimmed of surrounding white space (so CRLF
// and stray spaces need no care), or io.EOF. tooLong reports a line over
// maxLine bytes; its text is dropped.
func (lr *lineReader) next() (text []byte, tooLong bool, err error) {
	lr.buf = lr.buf[:0]
	read := false
	for {
		chunk, err := lr.br.ReadSlice('\n')
		read = read || len(chunk) > 0
		if !tooLong && len(lr.buf)+len(chunk) <= maxLine {
			lr.buf = append(lr.buf, chunk...)
		} else {
			tooLong, lr.buf = true, lr.buf[:0]
		}
		switch err {
		case bufio.ErrBufferFull:
			continue
		case io.EOF:
			if !read {
				return nil, false, io.EOF
			}
		case nil:
		default:
			return nil, false, err
		}
		lr.line++
		return bytes.TrimSpace(lr.buf), tooLong, nil
	}
}
