package plan

import (
	"fmt"
	"strings"

	"github.com/refundkit/refundkit/refund"
)

// DefaultMaxProblems is how many problems Read keeps when Options.MaxProblems
// is zero: enough to fix a file in one pass without flooding a terminal.
const DefaultMaxProblems = 20

// Rejection is what Read returns for an input with problems. It holds the
// first problems in input order, each a *refund.InputError (name:line:
// field: what is wrong, as refund and audit say it), and counts them all,
// so a large file with one systematic mistake is reported in a screenful.
// errors.As finds the first problem through it.
type Rejection struct {
	Problems []*refund.InputError // the first Options.MaxProblems problems, in input order
	Total    int                  // all problems found, including those not kept
}

// Error lists the problems kept, one a line, and how many more there were.
func (e *Rejection) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.Error())
	}
	if more := e.Total - len(e.Problems); more > 0 {
		fmt.Fprintf(&b, "\n%d more problems not shown", more)
	}
	return b.String()
}

// Unwrap is the problems kept, for errors.As and errors.Is.
func (e *Rejection) Unwrap() []error {
	errs := make([]error, len(e.Problems))
	for i, p := range e.Problems {
		errs[i] = p
	}
	return errs
}
