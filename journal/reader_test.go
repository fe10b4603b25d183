package journal

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// readOutcome is what reading a journal gave: the records handed on (line
// and item), how it ended.
type readOutcome struct {
	lines []int
	items []string
	torn  string
	err   string
}

func (o readOutcome) String() string {
	return fmt.Sprintf("records at lines %v (%s), torn %q, err %q", o.lines, strings.Join(o.items, ","), o.torn, o.err)
}

func describeErr(err error) string {
	var ce *CorruptError
	if errors.As(err, &ce) {
		return fmt.Sprintf("%v (offset %d)", err, ce.Offset)
	}
	if err != nil {
		return err.Error()
	}
	return ""
}

// readAll reads data with a Reader of the given block size and workers.
func readAll(data []byte, blockSize, workers int) readOutcome {
	rd := NewReader(bytes.NewReader(data), "j", ReadOptions{BlockSize: blockSize, Workers: workers, InFlight: 2})
	defer rd.Close()
	var o readOutcome
	for rd.Next() {
		for k, r := range rd.Records() {
			o.lines = append(o.lines, rd.Line(k))
			o.items = append(o.items, strings.Clone(r.Item)) // valid until Next
		}
	}
	if t := rd.Torn(); t != nil {
		o.torn = fmt.Sprintf("%+v", *t)
	}
	o.err = describeErr(rd.Err())
	return o
}

// referenceRead is the reader rule of the contract, the slow and obvious
// way: the whole input split into lines, every commit line checked against
// the lines before it.
func referenceRead(data []byte) readOutcome {
	type line struct {
		start, end int64
		kind       lineKind // 0: a record
		err        error
		item       string
		n          int
		crc        uint32
	}
	var ls []line
	for p := int64(0); p < int64(len(data)); {
		l := line{start: p}
		nl := bytes.IndexByte(data[p:], '\n')
		if nl < 0 {
			l.end, l.kind = int64(len(data)), lineUnended
			ls = append(ls, l)
			break
		}
		l.end = p + int64(nl) + 1
		content := data[p : l.end-1]
		var r Record
		switch n, crc, isCommit, ok := parseCommit(content); {
		case len(content) > maxLine:
			l.kind, l.err = lineLong, fmt.Errorf("line longer than %d bytes", maxLine)
		case ok:
			l.kind, l.n, l.crc = lineCommit, n, crc
		case isCommit:
			l.kind, l.err = lineBad, errors.New("commit line not understood"+snippet(content))
		default:
			if _, err := decodeLine(content, string(content), &r); err != nil {
				l.kind, l.err = lineBad, err
				if errors.As(err, new(*VersionError)) {
					l.kind = lineVersion
				}
			}
			l.item = r.Item
		}
		ls = append(ls, l)
		p = l.end
	}
	valid := func(i int) bool {
		l := &ls[i]
		if l.kind != lineCommit {
			return false
		}
		recs := 0
		for recs < i && ls[i-1-recs].kind == 0 {
			recs++
		}
		switch {
		case recs < l.n:
			l.err = tooFewRecords(l.n, recs)
		case ls[i].start-ls[i-l.n].start > maxCommit:
			l.err = tooLarge()
		default:
			if have := crc32.Checksum(data[ls[i-l.n].start:ls[i].start], castagnoli); have != l.crc {
				l.err = crcMismatch(l.n, l.crc, have)
			}
		}
		return l.err == nil
	}
	p, c, later := -1, -1, false
	for i := range ls {
		switch {
		case ls[i].kind == 0:
		case p < 0 && valid(i):
			c = i
		case p < 0:
			p = i
		case valid(i):
			later = true
		}
	}
	var o readOutcome
	served := len(ls)
	switch {
	case p >= 0 && c >= 0:
		served = c
	case p >= 0:
		served = p
	}
	for i := range served {
		if ls[i].kind == 0 {
			o.lines, o.items = append(o.lines, i+1), append(o.items, ls[i].item)
		}
	}
	if p < 0 {
		return o
	}
	size := int64(len(data))
	corrupt := func(reason string) readOutcome {
		o.err = describeErr(&CorruptError{Path: "j", Line: p + 1, Offset: ls[p].start, Reason: reason})
		return o
	}
	tear := func(line int, off int64) readOutcome {
		o.torn = fmt.Sprintf("%+v", Torn{Path: "j", Line: line, Offset: off, Bytes: int(size - off)})
		return o
	}
	switch {
	case ls[p].kind == lineVersion:
		o.err = fmt.Sprintf("j:%d: %v", p+1, ls[p].err)
		return o
	case later:
		return corrupt(ls[p].err.Error())
	case c >= 0:
		// One write tears: not more than a commit, nor more records
		// than the commit line that ends it names.
		records := 0
		for _, l := range ls[c+1:] {
			if l.kind == 0 {
				records++
			}
		}
		last := ls[len(ls)-1]
		switch tail := size - ls[c].end; {
		case tail > int64(maxCommit+maxCommitLine):
			return corrupt(tailTooLong(ls[p].err, tail, c+1))
		case last.kind == lineCommit && records > last.n:
			return corrupt(tailTooManyRecords(ls[p].err, len(ls), last.n, records, c+1))
		}
		return tear(c+2, ls[c].end)
	case p < len(ls)-1:
		return corrupt(ls[p].err.Error())
	case ls[p].kind == lineUnended || ls[p].kind == lineLong:
		return tear(p+1, ls[p].start)
	case ls[p].kind == lineBad && errors.As(ls[p].err, new(*syntaxError)):
		if at := recordInside(data[ls[p].start : ls[p].end-1]); at > 0 {
			return corrupt(fmt.Sprintf("a complete record starts at byte %d, after an incomplete one: the journal was appended to without repair", at+1))
		}
		return tear(p+1, ls[p].start)
	}
	return corrupt(ls[p].err.Error())
}

// randomJournal writes what writers and operators may leave, then damages
// it the way a crash or a disk may.
func randomJournal(rng *rand.Rand) []byte {
	var data []byte
	item := 0
	rec := func() []byte {
		item++
		return lines(intent("b", strconv.Itoa(item)+strings.Repeat("x", rng.IntN(40)), 1))
	}
	if rng.IntN(3) == 0 { // an old journal's records first
		for range rng.IntN(6) {
			data = append(data, rec()...)
		}
	}
	for range rng.IntN(8) {
		switch rng.IntN(6) {
		case 0: // an operator's record
			data = append(data, rec()...)
		case 1: // a writer starting on a file not ending in a commit
			data = append(data, emptyCommit...)
		default:
			var group []byte
			n := rng.IntN(6)
			for range n {
				group = append(group, rec()...)
			}
			data = append(data, AppendCommit(group, group, n)...)
		}
	}
	if len(data) == 0 {
		return data
	}
	for range rng.IntN(3) {
		if len(data) == 0 {
			break
		}
		at := rng.IntN(len(data))
		switch rng.IntN(6) {
		case 0: // a zeroed run
			clear(data[at:min(len(data), at+1+rng.IntN(300))])
		case 1: // a flipped bit
			data[at] ^= 1 << rng.IntN(8)
		case 2: // cut short
			data = data[:at]
		case 3: // garbage appended
			data = append(data, "{\"v\":1,\"ty\x00\x00"[:rng.IntN(12)]...)
		case 4: // a line lost
			if s, e := bytes.LastIndexByte(data[:at], '\n')+1, bytes.IndexByte(data[at:], '\n'); e >= 0 {
				data = append(data[:s], data[at+e+1:]...)
			}
		default: // a commit line that lies
			data = append(data, AppendCommit(nil, []byte("x"), rng.IntN(4))...)
		}
	}
	return data
}

// TestReaderMatchesReference: on random journals, framed and not, damaged
// anywhere, the Reader hands on the records and ends as the contract's
// rule says, whatever its blocks and workers.
func TestReaderMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for round := range 1000 {
		data := randomJournal(rng)
		want := referenceRead(data)
		for _, size := range []int{1, 97, 400, 1 << 20} {
			for _, workers := range []int{0, 2} {
				if got := readAll(data, size, workers); got.String() != want.String() {
					t.Fatalf("round %d, blocks of %d, %d workers:\n%q\ngot  %v\nwant %v", round, size, workers, data, got, want)
				}
			}
		}
	}
}

// TestReaderLargeCommits: commits beyond the cap are not valid; commits
// spanning many blocks are checked across them.
func TestReaderLargeCommits(t *testing.T) {
	var group []byte
	n := 0
	for len(group) <= maxCommit {
		group = append(group, lines(intent("b", strconv.Itoa(n), 1))...)
		n++
	}
	head := lines(intent("b", "first", 1))
	framed := AppendCommit(bytes.Clone(head), head, 1)
	big := append(append(bytes.Clone(framed), group...), AppendCommit(nil, group, n)...)
	last := lines(intent("b", "last", 1))
	fits := append(append(bytes.Clone(framed), group[len(group)-maxCommit/2:]...), last...)
	fitsN := bytes.Count(group[len(group)-maxCommit/2:], []byte("\n"))
	fits = append(fits, AppendCommit(nil, fits[len(framed):], fitsN+1)...)
	for name, data := range map[string][]byte{
		"too large, last":          big,
		"too large, then a commit": append(bytes.Clone(big), framed...),
		"fits":                     fits,
		"fits, torn after":         append(bytes.Clone(fits), `{"v":1`...),
	} {
		want := referenceRead(data)
		for _, size := range []int{64 << 10, 1 << 20} {
			if got := readAll(data, size, 2); got.String() != want.String() {
				t.Errorf("%s, blocks of %d:\ngot  %.300v\nwant %.300v", name, size, got, want)
			}
		}
	}
}

// FuzzReader: the Reader agrees with the reference, in small blocks too.
func FuzzReader(f *testing.F) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		f.Add(randomJournal(rng), uint16(100))
	}
	for _, tt := range tailCases {
		if len(tt.data) < 4096 {
			f.Add(tt.data, uint16(300))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, size uint16) {
		want := referenceRead(data)
		if got := readAll(data, int(size%4096)+1, 2); got.String() != want.String() {
			t.Fatalf("blocks of %d:\n%q\ngot  %v\nwant %v", int(size%4096)+1, data, got, want)
		}
	})
}
