package journal

import (
	"hash/crc32"
	"io"
	"strconv"
)

// A group commit is its record lines and one commit line,
//
// 	{"v":1,"type":"commit","records":N,"crc32c":"0a1b2c3d"}
//
// in one write and one fsync: N record lines, CRC-32C over their bytes.
// It is framing, never handed on; it tells where the last acknowledged
// commit ends, so damage after it is torn and before it corrupt (decide).

// maxCommit caps the record bytes of a commit, and so a reader's look-back.
const maxCommit = 4 << 20

// maxCommitLine is the longest commit line.
const maxCommitLine = len(commitHead) + len("4194304") + len(commitMid) + 8 + len(commitTail)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

const (
	commitType = `{"v":1,"type":"`
	commitHead = commitType + `commit","records":`
	commitMid  = `,"crc32c":"`
	commitTail = "\"}\n"
)

// emptyCommit frames a file that does not end in a commit line (writeCommit).
var emptyCommit = AppendCommit(nil, nil, 0)

// AppendCommit appends the commit line of the n record lines in records.
func AppendCommit(dst, records []byte, n int) []byte {
	return appendCommitCRC(dst, n, crc32.Checksum(records, castagnoli))
}

func appendCommitCRC(dst []byte, n int, crc uint32) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, commitHead...)
	dst = strconv.AppendInt(dst, int64(n), 10)
	dst = append(dst, commitMid...)
	for shift := 28; shift >= 0; shift -= 4 {
		dst = append(dst, hex[crc>>shift&0xf])
	}
	return append(dst, commitTail...)
}

// parseCommit reads a commit line in exactly AppendCommit's form;
// isCommit: the line claims to be one.
func parseCommit(line []byte) (n int, crc uint32, isCommit, ok bool) {
	const head = commitType + `commit"`
	if len(line) < len(head) || string(line[:len(head)]) != head {
		return 0, 0, false, false
	}
	if len(line) < len(commitHead) || string(line[:len(commitHead)]) != commitHead {
		return 0, 0, true, false
	}
	v, p, ok := fastInt(line, len(commitHead))
	if !ok || v < 0 || v > maxCommit || line[len(commitHead)] == '-' {
		return 0, 0, true, false
	}
	n = int(v)
	rest := line[p:]
	want := len(commitMid) + 8 + len(commitTail) - 1
	if len(rest) != want || string(rest[:len(commitMid)]) != commitMid || string(rest[want-2:]) != `"}` {
		return 0, 0, true, false
	}
	for _, c := range rest[len(commitMid) : len(commitMid)+8] {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		default:
			return 0, 0, true, false
		}
		crc = crc<<4 | uint32(d)
	}
	return n, crc, true, true
}

// framer writes record lines as a journal of its own (merge output).
type framer struct {
	w       io.Writer
	buf     []byte // the open commit's record lines
	records int
	err     error
}

// framedCommit is far below maxCommit: most commits check inside a block.
const framedCommit = 32 << 10

func newFramer(w io.Writer) *framer {
	return &framer{w: w, buf: make([]byte, 0, framedCommit+maxLine+len(emptyCommit)+16)}
}

func (f *framer) record(line []byte) {
	if len(f.buf)+len(line)+1 > framedCommit && f.records > 0 {
		f.end()
	}
	f.buf = append(append(f.buf, line...), '\n')
	f.records++
}

func (f *framer) end() {
	n := len(f.buf)
	f.buf = AppendCommit(f.buf, f.buf[:n], f.records)
	if f.err == nil {
		_, f.err = f.w.Write(f.buf)
	}
	f.buf, f.records = f.buf[:0], 0
}

// close ends the last commit; without records it writes nothing.
func (f *framer) close() error {
	if f.records > 0 {
		f.end()
	}
	return f.err
}
