package plan

import (
	"fmt"
	"strconv"
	"strings"
)

// DefaultMaxProblems is how many problems Read keeps when Options.MaxProblems
// is zero: enough to fix a file in one pass without flooding a terminal.
const DefaultMaxProblems = 20

// Problem is one thing wrong with an input.
type Problem struct {
	Name string // the input's name: a file name, or <stdin>
	Line int    // 1-based line the problem was found on; 0 for the whole input
	Msg  string // what is wrong, lower-case
}

// String is the problem as people read it: name:line: msg.
func (p Problem) String() string {
	if p.Line == 0 {
		return p.Name + ": " + p.Msg
	}
	return p.Name + ":" + strconv.Itoa(p.Line) + ": " + p.Msg
}

// InputError is what Read returns for an input with problems. It holds the
// first problems in input order and counts them all, so a large file with
// one systematic mistake is reported in a screenful.
type InputError struct {
	Problems []Problem // the first Options.MaxProblems problems, in input order
	Total    int       // all problems found, including those not kept
}

// Error lists the problems kept, one a line, and how many more there were.
func (e *InputError) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.String())
	}
	if more := e.Total - len(e.Problems); more > 0 {
		fmt.Fprintf(&b, "\n%d more problems not shown", more)
	}
	return b.String()
}

// show renders an input value inside a message: bare when it is plain
// printable ASCII, else quoted, and cut short so one wild cell cannot
// produce a megabyte of error text.
func show(s string) string {
	plain := s != ""
	for i := 0; i < len(s) && plain; i++ {
		plain = s[i] > ' ' && s[i] < 0x7f && s[i] != '"' && s[i] != '\\'
	}
	if !plain {
		return strconv.Quote(cut(s))
	}
	return cut(s)
}

// cut shortens s to 64 bytes, marking the cut.
func cut(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}
