package journal

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"unsafe"
)

// block is a run of whole lines and what parsing them found: parsed on
// workers, judged in order.
type block struct {
	data    []byte
	start   int64 // offset of data in the input
	size    int64 // input bytes the block covers: len(data), or a long line's length
	long    bool  // the block is one line longer than maxLine, not kept in data
	newline bool

	ends  []int32 // per line: the offset just past it in data
	marks []mark  // the lines that are not records, in order
	parsed

	firstLine int // 1-based number of line 0, set when the Reader judges it
	done      chan struct{}
}

// parsed is a block's records: its most memory, given back once only its
// bytes are needed.
type parsed struct {
	recs   []Record // the record lines, in order; strings point into data
	canon  []bool   // per record: its line is what MarshalLine writes
	hashes []uint64 // per record: the hash of its item, when asked for
}

type lineKind uint8

const (
	lineCommit  lineKind = iota + 1 // a commit line in the exact form
	lineBad                         // not a valid record or commit line: err says why
	lineVersion                     // a record of another format version (err)
	lineLong                        // longer than maxLine
	lineUnended                     // the input's last bytes, without '\n'
)

type verdict uint8

const (
	commitValid verdict = iota + 1
	commitInvalid
	// commitLookBack: its records start in an earlier block (judge checks it).
	commitLookBack
)

// mark is a line that is not a record; records lie in the runs between.
type mark struct {
	line    int32 // index in the block
	recs    int32 // records of the block before it
	kind    lineKind
	verdict verdict // of a commit line
	records int32   // a commit line's N
	crc     uint32  // a commit line's crc32c
	err     error   // why the line is wrong: decoding, or checking a commit
}

func (b *block) lineStart(i int) int {
	if i == 0 {
		return 0
	}
	return int(b.ends[i-1])
}

func (b *block) lineBytes(i int) []byte {
	s, e := b.lineStart(i), int(b.ends[i])
	if e > s && b.data[e-1] == '\n' {
		e--
	}
	return b.data[s:e]
}

func (b *block) recordLine(i int) []byte { return b.data[b.lineStart(i) : b.ends[i]-1] }

func (b *block) endOffset(i int) int64 {
	if b.long {
		return b.start + b.size
	}
	return b.start + int64(b.ends[i])
}

// parse decodes every line and checks the commit lines whose records all
// lie in the block. Record strings point into data.
func (b *block) parse(opts *ReadOptions) {
	b.ends, b.recs, b.canon, b.hashes, b.marks = b.ends[:0], b.recs[:0], b.canon[:0], b.hashes[:0], b.marks[:0]
	if b.long {
		b.ends = append(b.ends, 0)
		m := mark{kind: lineLong, err: errLong}
		if !b.newline {
			m.kind, m.err = lineUnended, errUnended
		}
		b.marks = append(b.marks, m)
		return
	}
	data := b.data
	if cap(b.recs) == 0 { // a record line takes 160 bytes and more
		b.recs = make([]Record, 0, len(data)/160+1)
	}
	run, fromStart := 0, true // the first line of the run of records before this line; the run began the block
	for p, i := 0, 0; p < len(data); i++ {
		nl := bytes.IndexByte(data[p:], '\n')
		line, end := data[p:p+max(nl, 0)], p+nl+1
		if nl < 0 {
			line, end = data[p:], len(data)
		}
		b.ends = append(b.ends, int32(end))
		p = end
		var err error
		// Where a commit line has the c of "commit", a record has its type.
		if nl >= 0 && len(line) <= maxLine && (len(line) <= len(commitType) || line[len(commitType)] != 'c') {
			if err = b.decode(line, opts); err == nil {
				continue
			}
		}
		m := mark{line: int32(i), recs: int32(len(b.recs))}
		switch n, crc, isCommit, ok := parseCommit(line); {
		case nl < 0:
			m.kind, m.err = lineUnended, errUnended
		case len(line) > maxLine: // blocks larger than maxLine hold it whole
			m.kind, m.err = lineLong, errLong
		case ok:
			m.kind, m.records, m.crc = lineCommit, int32(n), crc
			m.verdict, m.err = b.checkCommit(run, fromStart, i, n, crc)
		case isCommit:
			m.kind, m.err = lineBad, errors.New("commit line not understood"+snippet(line))
		default:
			if err == nil { // not tried yet: a canceled record, say
				if err = b.decode(line, opts); err == nil {
					continue
				}
			}
			m.kind, m.err = lineBad, err
			if errors.As(err, new(*VersionError)) {
				m.kind = lineVersion
			}
		}
		b.marks = append(b.marks, m)
		run, fromStart = i+1, false
	}
}

func (b *block) decode(line []byte, opts *ReadOptions) error {
	k := len(b.recs)
	if k < cap(b.recs) {
		b.recs = b.recs[:k+1]
	} else {
		b.recs = append(b.recs, Record{})
	}
	canonical, err := decodeLine(line, unsafe.String(unsafe.SliceData(line), len(line)), &b.recs[k])
	if err != nil {
		b.recs = b.recs[:k]
		return err
	}
	b.canon = append(b.canon, canonical)
	if opts.ItemHash != nil {
		b.hashes = append(b.hashes, opts.ItemHash(b.recs[k].Item))
	}
	return nil
}

// checkCommit checks commit line i (n records, crc) against the record
// lines from run on (fromStart: they may go on in earlier blocks).
func (b *block) checkCommit(run int, fromStart bool, i, n int, crc uint32) (verdict, error) {
	if i-run < n {
		if fromStart {
			return commitLookBack, nil
		}
		return commitInvalid, tooFewRecords(n, i-run)
	}
	from, to := b.lineStart(i-n), b.lineStart(i)
	if to-from > maxCommit {
		return commitInvalid, tooLarge()
	}
	if have := crc32.Checksum(b.data[from:to], castagnoli); have != crc {
		return commitInvalid, crcMismatch(n, crc, have)
	}
	return commitValid, nil
}

var (
	errUnended = errors.New("line without a newline at the end of the journal")
	errLong    = fmt.Errorf("line longer than %d bytes", maxLine)
)

func tooFewRecords(n, have int) error {
	return fmt.Errorf("commit line names %d records, but %d record lines come before it", n, have)
}

func tooLarge() error {
	return fmt.Errorf("commit line covers more bytes of records than a commit holds (%d)", maxCommit)
}

func crcMismatch(n int, want, have uint32) error {
	return fmt.Errorf("commit line says crc32c %08x, but its %d records have %08x", want, n, have)
}

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
