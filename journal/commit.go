package journal

import (
	"hash/crc32"
	"io"
	"strconv"
)

// A group commit is its record lines followed by one commit line,
//
//	{"v":1,"type":"commit","records":N,"crc32c":"0a1b2c3d"}
//
// written with one write and made durable with one fsync. N counts the
// commit's record lines and crc32c is CRC-32C (Castagnoli) over their exact
// bytes, newlines included. The commit line is framing, not a record:
// readers never hand it on, and jq users filter on .type. It lets a reader
// tell where the last acknowledged commit ends, so that damage after it is
// a torn tail and damage before it is corruption (see decide).

// maxCommit caps the record bytes of one commit: the writer never puts
// more in one, so a reader needs at most this much look-back to verify a
// commit line, and a commit line claiming more is not valid.
const maxCommit = 4 << 20

// maxCommitLine is the longest commit line: N has at most the digits of
// maxCommit. One write is at most maxCommit+maxCommitLine bytes.
const maxCommitLine = len(commitHead) + len("4194304") + len(commitMid) + 8 + len(commitTail)

// castagnoli is CRC-32C, computed with the CPU's instruction where there
// is one.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

const (
	commitType = `{"v":1,"type":"`
	commitHead = commitType + `commit","records":`
	commitMid  = `,"crc32c":"`
	commitTail = "\"}\n"
)

// emptyCommit is the commit line of no records: a writer that starts on a
// file not ending in a commit line writes it first, on its own, so that
// what the file held is before a valid commit whatever happens next.
var emptyCommit = AppendCommit(nil, nil, 0)

// AppendCommit appends to dst the commit line that ends a group commit of
// the n record lines in records (their exact bytes, newlines included).
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

// parseCommit reads a commit line (without its '\n') in exactly the form
// AppendCommit writes. isCommit reports a line that claims to be one;
// ok, that it is one in that form.
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

// framer writes record lines as a journal of its own, in commits of about
// framedCommit bytes, each ended by its commit line (merge output).
type framer struct {
	w       io.Writer
	buf     []byte // the open commit's record lines
	records int
	err     error
}

// framedCommit is the size of the commits a framer writes: far below
// maxCommit, so a reader checks most of them inside one block.
const framedCommit = 32 << 10

func newFramer(w io.Writer) *framer {
	return &framer{w: w, buf: make([]byte, 0, framedCommit+maxLine+len(emptyCommit)+16)}
}

// record writes a record line, given without its '\n'.
func (f *framer) record(line []byte) {
	if len(f.buf)+len(line)+1 > framedCommit && f.records > 0 {
		f.end()
	}
	f.buf = append(append(f.buf, line...), '\n')
	f.records++
}

// end writes the open commit: its record lines and its commit line.
func (f *framer) end() {
	n := len(f.buf)
	f.buf = AppendCommit(f.buf, f.buf[:n], f.records)
	if f.err == nil {
		_, f.err = f.w.Write(f.buf)
	}
	f.buf, f.records = f.buf[:0], 0
}

// close ends the last commit. Without records it writes nothing.
func (f *framer) close() error {
	if f.records > 0 {
		f.end()
	}
	return f.err
}
