// Package plan reads lists of charges, payment intents, captures or
// psp_references to refund (CSV, JSON lines or bare ids) into validated
// plan items of one batch, and splits a plan into shards.
//
// Read takes the whole input before it returns anything, so a bad line
// near the end cannot leave half a batch planned. Item ids are the input's
// item column, else the payment's own id: the same input yields the same
// ids, and so the same idempotency keys, on every run.
package plan

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/refundkit/refundkit/refund"
)

// Format is an input format.
type Format string

// Input formats. FormatAuto (or "") detects it from the first line that is
// not blank: "{" starts JSON lines, a bare id (with IDsCapture or
// IDsPSPReference, one of those) a list of ids, anything else a CSV header.
const (
	FormatAuto  Format = "auto"
	FormatCSV   Format = "csv"
	FormatJSONL Format = "jsonl"
	FormatIDs   Format = "ids"
)

// Options control Read.
type Options struct {
	Batch  string // written on every item; rows that name a batch must name this one
	Format Format // FormatAuto or "" detects it
	IDs    IDs    // what bare ids name; IDsStripe or "" reads them by prefix
	// Delimiter separates CSV fields: Comma, Semicolon or Tab; 0 tells it
	// from the header row (Plan.Delimiter).
	Delimiter rune
	// KeepColumns keeps unknown CSV columns and JSON fields as metadata.
	KeepColumns bool
	// MaxProblems bounds the problems a Rejection keeps (all are counted);
	// 0 means DefaultMaxProblems.
	MaxProblems int
}

// DefaultMaxProblems is how many problems Read keeps by default: enough to
// fix a file in one pass without flooding a terminal.
const DefaultMaxProblems = 20

// Rejection is what Read returns for an input with problems: the first
// ones in input order, each a *refund.InputError, and how many in all.
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

// Read reads every row of r, named name in messages, and returns the plan.
// Whatever is wrong with the input is a *Rejection, and no plan; other
// errors are I/O errors reading r or invalid opts.
func Read(r io.Reader, name string, opts Options) (*Plan, error) {
	if !refund.ValidBatch(opts.Batch) {
		return nil, fmt.Errorf("batch %s: want 1-64 characters of A-Z a-z 0-9 _ . - starting with a letter or digit", refund.Show(opts.Batch))
	}
	if opts.MaxProblems <= 0 {
		opts.MaxProblems = DefaultMaxProblems
	}
	format := opts.Format
	if format == "" {
		format = FormatAuto
	}
	switch format {
	case FormatAuto, FormatCSV, FormatJSONL, FormatIDs:
	default:
		return nil, fmt.Errorf("format %s: want csv, jsonl, ids or auto", refund.Show(string(format)))
	}
	switch opts.IDs {
	case "":
		opts.IDs = IDsStripe
	case IDsStripe, IDsCapture, IDsPSPReference:
	default:
		return nil, fmt.Errorf("ids %s: want stripe, capture or psp_reference", refund.Show(string(opts.IDs)))
	}
	switch opts.Delimiter {
	case 0, Comma, Semicolon, Tab:
	default:
		return nil, fmt.Errorf("delimiter %q: want , ; or tab", opts.Delimiter)
	}

	c := newCollector(name, opts)
	br := bufio.NewReaderSize(r, 64<<10)
	if ok, err := c.checkEncoding(br); err != nil || !ok {
		return c.result(err)
	}
	if format == FormatAuto {
		var err error
		if format, err = detect(br, opts.IDs); err != nil {
			return nil, readError(name, err)
		}
	}
	var err error
	switch format {
	case FormatCSV:
		delim, header := opts.Delimiter, 0
		if delim == 0 {
			var derr error
			if delim, header, derr = detectDelimiter(br); derr != nil {
				if _, ok := derr.(*delimiterError); !ok {
					return nil, readError(name, derr)
				}
				c.problem(header, "%v", derr)
				return c.result(nil)
			}
		}
		c.plan.delimiter = delim
		err = readCSV(br, c, delim)
	case FormatJSONL:
		err = readJSONL(br, c)
	case FormatIDs:
		err = readIDs(br, c)
	}
	if err == nil && c.total == 0 && c.plan.Len() == 0 {
		c.problem(0, "no charges or captures found")
	}
	return c.result(err)
}

// checkEncoding drops a UTF-8 byte order mark (Excel's "CSV UTF-8") and
// refuses what would read as garbage: UTF-16 exports, and old Mac ones
// whose lines end in a bare CR.
func (c *collector) checkEncoding(br *bufio.Reader) (ok bool, err error) {
	head, err := br.Peek(br.Size())
	if err != nil && err != io.EOF && err != bufio.ErrBufferFull {
		return false, readError(c.name, err)
	}
	switch {
	case bytes.HasPrefix(head, []byte("\xff\xfe")), bytes.HasPrefix(head, []byte("\xfe\xff")):
		c.problem(0, "UTF-16 text: save the file as UTF-8 (in Excel: CSV UTF-8)")
		return false, nil
	case bytes.IndexByte(head, '\n') < 0 && bytes.IndexByte(head, '\r') >= 0:
		c.problem(0, "lines end in CR alone (old Mac text): save the file with LF or CRLF line ends (in Excel: CSV UTF-8)")
		return false, nil
	case bytes.HasPrefix(head, []byte("\xef\xbb\xbf")):
		_, err = br.Discard(3)
		return true, err
	}
	return true, nil
}

// headLine returns the first line of br that is not blank, without its
// line end, and its number, as far as the buffer holds; nothing consumed.
func headLine(br *bufio.Reader) (line []byte, n int, err error) {
	head, err := br.Peek(br.Size())
	if err != nil && err != io.EOF && err != bufio.ErrBufferFull {
		return nil, 0, err
	}
	for l := range bytes.Lines(head) {
		n++
		if line = bytes.TrimRight(bytes.TrimSuffix(l, []byte("\n")), "\r"); len(bytes.TrimSpace(line)) > 0 {
			return line, n, nil
		}
	}
	return nil, n, nil
}

// detect picks the format from the first line that is not blank: with
// IDsCapture or IDsPSPReference, one valid id, no column name, is a list.
func detect(br *bufio.Reader, ids IDs) (Format, error) {
	line, _, err := headLine(br)
	if err != nil {
		return "", err
	}
	switch s := string(bytes.TrimSpace(line)); {
	case s == "":
		return FormatCSV, nil // blank so far: CSV reports it as empty
	case s[0] == '{':
		return FormatJSONL, nil
	case ids == IDsStripe && isID(s),
		ids == IDsCapture && refund.ValidCapture(s) && !isColumn(s),
		ids == IDsPSPReference && refund.ValidPSPReference(s) && !isColumn(s):
		return FormatIDs, nil
	}
	return FormatCSV, nil
}

// isID reports whether s looks like a charge or payment intent id: looser
// than refund's validation, it only decides the format.
func isID(s string) bool {
	return len(s) >= 4 && stripePrefix(s) && strings.Trim(s[3:], alnums) == ""
}

// stripePrefix reports whether s starts ch_, py_ or pi_.
func stripePrefix(s string) bool {
	return len(s) >= 3 && s[2] == '_' && (s[:2] == "ch" || s[:2] == "py" || s[:2] == "pi")
}

const alnums = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

// readError names the input in an error reading it, unless the error
// already names the file.
func readError(name string, err error) error {
	var pathErr *fs.PathError
	if errors.As(err, &pathErr) {
		return err
	}
	return fmt.Errorf("read %s: %w", name, err)
}
