package journal

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
)

// judge walks the lines of a journal in order: it checks commit lines
// that reach into earlier blocks, finds the first wrong line, gathers what
// decide needs of what follows, and says which records are kept (safe).
type judge struct {
	name     string
	nextLine int   // number of the next block's first line
	end      int64 // input offset past the last block judged

	// The run of record lines since the last line that is not a record:
	// only they can be a later commit's records.
	windowStart int
	windowOff   int64

	last         commitPos // the last valid commit line, if haveLast
	haveLast     bool
	marksAfter   int  // lines that are not records after it
	lastIsCommit bool // what is kept ends in a valid commit line
	endN         int  // the last line judged is a commit line in the exact form naming endN records; else -1
	safe         int  // lines before this one are kept for sure

	problem *problem // the first line that is wrong
	facts   facts    // what is known of the lines after it

	done bool
	err  error
	torn *Torn
}

type commitPos struct {
	line int
	end  int64 // offset just past it: where a torn tail is cut
}

type problem struct {
	line   int
	offset int64
	kind   lineKind
	err    error
	inside int // a syntax error: where a whole record starts inside it (recordInside), else 0
}

type facts struct {
	following bool  // some line follows it
	later     bool  // a valid commit line follows it
	eof       bool  // the whole input has been read
	size      int64 // the input's size, once eof
	// Once eof, of the lines after the last valid commit line:
	records  int // how many are records
	lastLine int // the number of the last one
	endN     int // it is a commit line in the exact form naming endN records; else -1
}

// decide is the one place that tells a torn tail from corruption, for the
// first wrong line p, the last valid commit line before it (c, or nil) and
// what follows (known false: not yet settled).
//   - Another version is refused wherever it is.
//   - A valid commit line after p acknowledged records after it: corrupt.
//   - After c, the tail from c's end is torn (never acknowledged), unless
//     it is more than one write: longer than a commit, or ending in a
//     commit line naming fewer records than it holds.
//   - With no c (older journals), only a last line a crash explains (no
//     '\n', not JSON, too long) is torn, unless it hides a whole record.
func decide(name string, p *problem, c *commitPos, f facts) (torn *Torn, err error, known bool) {
	corrupt := func(reason string) (*Torn, error, bool) {
		return nil, &CorruptError{Path: name, Line: p.line, Offset: p.offset, Reason: reason}, true
	}
	switch {
	case p.kind == lineVersion:
		return nil, &lineError{path: name, line: p.line, err: p.err}, true
	case f.later:
		return corrupt(p.err.Error())
	case c != nil && f.eof:
		switch tail := f.size - c.end; {
		case tail > int64(maxCommit+maxCommitLine):
			return corrupt(tailTooLong(p.err, tail, c.line))
		case f.endN >= 0 && f.records > f.endN:
			return corrupt(tailTooManyRecords(p.err, f.lastLine, f.endN, f.records, c.line))
		}
		return &Torn{Path: name, Line: c.line + 1, Offset: c.end, Bytes: int(f.size - c.end)}, nil, true
	case c != nil:
		return nil, nil, false
	case f.following:
		return corrupt(p.err.Error())
	case !f.eof:
		return nil, nil, false
	}
	tear := &Torn{Path: name, Line: p.line, Offset: p.offset, Bytes: int(f.size - p.offset)}
	switch {
	case p.kind == lineUnended || p.kind == lineLong:
		return tear, nil, true
	case p.kind == lineBad && errors.As(p.err, new(*syntaxError)):
		if p.inside > 0 {
			return corrupt(fmt.Sprintf("a complete record starts at byte %d, after an incomplete one: the journal was appended to without repair", p.inside+1))
		}
		return tear, nil, true
	}
	return corrupt(p.err.Error())
}

func (j *judge) block(b *block, retained []*block) {
	b.firstLine = j.nextLine
	j.nextLine += len(b.ends)
	j.end = b.start + b.size
	for i := range b.marks {
		m := &b.marks[i]
		line := b.firstLine + int(m.line)
		if j.problem == nil && !j.haveLast {
			j.safe = line // no commit yet: records stream as they come
		}
		valid := m.kind == lineCommit && j.commitValid(b, m, line, retained)
		switch {
		case j.problem == nil && valid:
			j.last, j.haveLast = commitPos{line: line, end: b.endOffset(int(m.line))}, true
			j.safe, j.marksAfter = line+1, 0
		case j.problem == nil:
			j.marksAfter++
			j.found(b, m, line)
		default:
			j.marksAfter++
			j.facts.following = true
			j.facts.later = j.facts.later || valid
		}
		if j.problem != nil && j.settle() {
			return
		}
		j.windowStart, j.windowOff = line+1, b.endOffset(int(m.line))
	}
	lastLine := len(b.ends) - 1
	if n := len(b.marks); n > 0 && int(b.marks[n-1].line) == lastLine {
		j.endN = -1
		if m := &b.marks[n-1]; m.kind == lineCommit {
			j.endN = int(m.records)
		}
		j.lastIsCommit = j.problem == nil && j.endN >= 0
	} else if lastLine >= 0 {
		j.lastIsCommit, j.endN = false, -1
		if j.problem != nil && !j.facts.following {
			j.facts.following = true
			j.settle()
		}
	}
	if j.problem == nil && !j.haveLast {
		j.safe = j.nextLine
	}
}

func (j *judge) found(b *block, m *mark, line int) {
	p := &problem{line: line, offset: b.start + int64(b.lineStart(int(m.line))), kind: m.kind, err: m.err}
	if m.kind == lineBad && errors.As(m.err, new(*syntaxError)) {
		p.inside = recordInside(b.lineBytes(int(m.line)))
	}
	j.problem = p
	if int(m.line) < len(b.ends)-1 {
		j.facts.following = true
	}
}

func (j *judge) settle() bool {
	var c *commitPos
	if j.haveLast {
		c = &j.last
	}
	torn, err, known := decide(j.name, j.problem, c, j.facts)
	if known {
		j.done, j.torn, j.err = true, torn, err
		if torn != nil {
			// Once the tail is cut, the input ends where it started.
			j.lastIsCommit = c != nil && torn.Offset == c.end
		}
	}
	return known
}

func (j *judge) finish() {
	if j.problem == nil {
		j.safe = j.nextLine // records after the last commit line, nothing wrong after them
		j.done = true
		return
	}
	j.facts.eof, j.facts.size = true, j.end
	j.facts.lastLine, j.facts.endN = j.nextLine-1, j.endN
	if j.haveLast {
		j.facts.records = j.nextLine - 1 - j.last.line - j.marksAfter
	}
	j.settle()
}

func (j *judge) fail(err error) { j.done, j.err = true, err }

// needs: a later commit line's records start at most maxCommit back,
// after the last line that is not a record.
func (j *judge) needs(b *block) bool {
	end := b.start + b.size
	return end > j.windowOff && end > j.end-maxCommit
}

// commitValid checks commit line m of b, against earlier blocks if its
// records start there.
func (j *judge) commitValid(b *block, m *mark, line int, retained []*block) bool {
	if m.verdict != commitLookBack {
		return m.verdict == commitValid
	}
	n := int(m.records)
	first := line - n
	if first < j.windowStart {
		m.verdict, m.err = commitInvalid, tooFewRecords(n, line-j.windowStart)
		return false
	}
	to := b.start + int64(b.lineStart(int(m.line)))
	k := len(retained) - 1 // retained[k] holds line first
	for k > 0 && retained[k].firstLine > first {
		k--
	}
	if retained[k].firstLine > first { // released: more than maxCommit back
		m.verdict, m.err = commitInvalid, tooLarge()
		return false
	}
	from := retained[k].start + int64(retained[k].lineStart(first-retained[k].firstLine))
	if to-from > maxCommit {
		m.verdict, m.err = commitInvalid, tooLarge()
		return false
	}
	var crc uint32
	for ; k < len(retained); k++ {
		r := retained[k]
		lo, hi := max(from-r.start, 0), min(to-r.start, int64(len(r.data)))
		crc = crc32.Update(crc, castagnoli, r.data[lo:hi])
	}
	if crc != m.crc {
		m.verdict, m.err = commitInvalid, crcMismatch(n, m.crc, crc)
		return false
	}
	m.verdict = commitValid
	return true
}

func tailTooLong(err error, tail int64, commit int) string {
	return fmt.Sprintf("%v; the %d bytes after the last valid commit line (line %d) are more than one commit: the damage reaches acknowledged records", err, tail, commit)
}

func tailTooManyRecords(err error, line, n, records, commit int) string {
	return fmt.Sprintf("%v; the commit line at line %d names %d records, but %d record lines follow the last valid commit line (line %d): the damage reaches acknowledged records", err, line, n, records, commit)
}

// recordInside finds a whole record inside a line that is not JSON: a
// crash never leaves one after a partial record, so such a line is an
// append to a torn journal, not torn itself.
func recordInside(line []byte) int {
	for i := 1; i < len(line); i++ {
		j := bytes.Index(line[i:], []byte(`{"v":`))
		if j < 0 {
			return 0
		}
		i += j
		var r Record
		_, err := decodeLine(line[i:], string(line[i:]), &r)
		if err == nil || errors.As(err, new(*VersionError)) {
			return i
		}
	}
	return 0
}
