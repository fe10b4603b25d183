// Package plan reads lists of charges, payment intents, captures or
// psp_references to refund (CSV, JSON lines or bare ids) into validated
// plan items of one batch, and splits a plan into shards that workers run
// independently.
//
// Read takes the whole input before it returns anything: a plan is either
// complete and valid or not produced at all, so a bad line near the end of a
// file cannot leave half a batch planned.
//
// Item ids are stable: taken from the input's item column when given, else
// the charge, payment intent, capture or psp_reference id itself. The same
// input therefore yields the same ids, and so the same idempotency keys, on
// every run and machine, and editing one row does not renumber the others.
package plan

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/refundkit/refundkit/refund"
)

// Format is an input format.
type Format string

// Input formats. FormatAuto (or "") detects the format from the first
// non-blank line: "{" starts JSON lines, a bare ch_/py_/pi_ id (with
// IDsCapture, a bare capture id; with IDsPSPReference, a bare
// psp_reference) starts a list of ids, anything else is a CSV header row.
const (
	FormatAuto  Format = "auto"
	FormatCSV   Format = "csv"
	FormatJSONL Format = "jsonl"
	FormatIDs   Format = "ids"
)

// Options control Read.
type Options struct {
	// Batch is written on every item; rows that name a batch must name this one.
	Batch string
	// Format of the input; FormatAuto or "" detects it.
	Format Format
	// IDs says what bare ids name; IDsStripe or "" reads them by prefix.
	IDs IDs
	// Delimiter separates CSV fields: Comma, Semicolon or Tab; 0 tells it
	// from the header row (see Plan.Delimiter).
	Delimiter rune
	// KeepColumns keeps unknown CSV columns and JSON fields as refund
	// metadata (under their own name) instead of rejecting them.
	KeepColumns bool
	// MaxProblems bounds the problems a Rejection keeps (all are counted);
	// 0 means DefaultMaxProblems.
	MaxProblems int
}

// Read reads every row of r, named name in messages (a file name or
// <stdin>), and returns the plan. Whatever is wrong with the input is
// returned as a *Rejection listing each problem (a *refund.InputError
// naming its line and field, as refund and audit name it); then no
// plan is returned. Other errors are I/O errors reading r or invalid opts.
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

// checkEncoding drops a UTF-8 byte order mark, which Excel writes at the
// start of "CSV UTF-8" files, and refuses what would otherwise read as
// garbage: UTF-16 ("Unicode text") exports, whose every other byte is
// zero, and old Mac exports, whose lines end in a bare CR.
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

// detect picks the format from the first non-blank line, as far as it fits
// in the reader's buffer. Nothing is consumed. Capture ids and
// psp_references have no prefix to tell them by: with IDsCapture (or
// IDsPSPReference), a line that is one valid id and no column name starts
// a list of ids.
func detect(br *bufio.Reader, ids IDs) (Format, error) {
	head, err := br.Peek(br.Size())
	if err != nil && err != io.EOF && err != bufio.ErrBufferFull {
		return "", err
	}
	for len(head) > 0 {
		line := head
		if i := bytes.IndexByte(head, '\n'); i >= 0 {
			line, head = head[:i], head[i+1:]
		} else {
			head = nil
		}
		line = bytes.TrimSpace(line)
		switch {
		case len(line) == 0:
			continue
		case line[0] == '{':
			return FormatJSONL, nil
		case ids == IDsStripe && isID(string(line)),
			ids == IDsCapture && refund.ValidCapture(string(line)) && !isColumn(string(line)),
			ids == IDsPSPReference && refund.ValidPSPReference(string(line)) && !isColumn(string(line)):
			return FormatIDs, nil
		}
		return FormatCSV, nil
	}
	return FormatCSV, nil // blank so far: CSV reports it as empty
}

// isID reports whether s looks like a charge or payment intent id. It is
// looser than refund's validation on purpose: it only decides the format,
// and the row is validated later with a precise message.
func isID(s string) bool {
	if len(s) < 4 || !stripePrefix(s) {
		return false
	}
	for i := 3; i < len(s); i++ {
		if !isAlnum(s[i]) {
			return false
		}
	}
	return true
}

// stripePrefix reports whether s starts ch_, py_ or pi_.
func stripePrefix(s string) bool {
	return len(s) >= 3 && s[2] == '_' && (s[:2] == "ch" || s[:2] == "py" || s[:2] == "pi")
}

func isAlnum(b byte) bool {
	return b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

// readError names the input in an error reading it, unless the error
// already names the file.
func readError(name string, err error) error {
	var pathErr *fs.PathError
	if errors.As(err, &pathErr) {
		return err
	}
	return fmt.Errorf("read %s: %w", name, err)
}
