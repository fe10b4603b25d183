package journal

import (
	"bytes"
	"io"
)

// maxLine bounds one line's memory; a longer line is judged as no record.
const maxLine = 1 << 20

type source struct {
	r         io.Reader
	blockSize int
	off       int64
	carry     []byte // the start of a line the previous block cut
	eof       bool
	skip      []byte // scratch for a long line
}

// fill reads the next block of whole lines (the input's last bytes may
// lack '\n'); false at the end.
func (s *source) fill(b *block) (bool, error) {
	b.data = append(b.data[:0], s.carry...)
	s.carry = s.carry[:0]
	b.start, b.long, b.newline = s.off, false, false
	want := s.blockSize
	for {
		if len(b.data) < want && !s.eof {
			if cap(b.data) < want {
				b.data = append(make([]byte, 0, want), b.data...)
			}
			n, err := io.ReadFull(s.r, b.data[len(b.data):want])
			b.data = b.data[:len(b.data)+n]
			switch err {
			case nil:
			case io.EOF, io.ErrUnexpectedEOF:
				s.eof = true
			default:
				return false, err
			}
		}
		if s.eof {
			if len(b.data) == 0 {
				return false, nil
			}
			break
		}
		if end := bytes.LastIndexByte(b.data, '\n') + 1; end > 0 {
			s.carry = append(s.carry, b.data[end:]...)
			b.data = b.data[:end]
			break
		}
		if len(b.data) > maxLine {
			return true, s.skipLong(b)
		}
		want = min(2*want, maxLine+1)
	}
	b.size = int64(len(b.data))
	s.off += b.size
	return true, nil
}

// skipLong counts, without keeping, the rest of a line longer than maxLine.
func (s *source) skipLong(b *block) error {
	b.long, b.size = true, int64(len(b.data))
	b.data = b.data[:0]
	if s.skip == nil {
		s.skip = make([]byte, 64<<10)
	}
	for {
		n, err := s.r.Read(s.skip)
		if i := bytes.IndexByte(s.skip[:n], '\n'); i >= 0 {
			b.size += int64(i + 1)
			b.newline = true
			s.carry = append(s.carry, s.skip[i+1:n]...)
			break
		}
		b.size += int64(n)
		if err == io.EOF {
			s.eof = true
			break
		}
		if err != nil {
			return err
		}
	}
	s.off += b.size
	return nil
}
