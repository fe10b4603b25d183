// Package plan reads lists of charges to refund (CSV, JSON lines or bare
// ids) into validated plan items of one batch, and splits a plan into
// shards that workers run independently.
//
// Read takes the whole input before it returns anything: a plan is either
// complete and valid or not produced at all, so a bad line near the end of a
// file cannot leave half a batch planned.
//
// Item ids are stable: taken from the input's item column when given, else
// the charge or payment intent id itself. The same input therefore yields
// the same ids, and so the same idempotency keys, on every run and machine,
// and editing one row does not renumber the others.
package plan

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/refundkit/refundkit/refund"
)

// Format is an input format.
type Format string

// Input formats. FormatAuto (or "") detects the format from the first
// non-blank line: "{" starts JSON lines, a bare ch_/py_/pi_ id starts a list
// of ids, anything else is a CSV header row.
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
	// KeepColumns keeps unknown CSV columns and JSON fields as refund
	// metadata (under their own name) instead of rejecting them.
	KeepColumns bool
	// MaxProblems bounds the problems an InputError keeps (all are counted);
	// 0 means DefaultMaxProblems.
	MaxProblems int
}

// maxLine bounds one line of JSON lines or ids input. Metadata allows 40
// values of 500 bytes, so real lines are far shorter.
const maxLine = 1 << 20

// Read reads every row of r, named name in messages (a file name or
// <stdin>), and returns the plan items in input order. Whatever is wrong
// with the input is returned as an *InputError listing each problem with
// its line; then no items are returned. Other errors are I/O errors reading
// r or invalid opts.
func Read(r io.Reader, name string, opts Options) ([]refund.Item, error) {
	if !refund.ValidBatch(opts.Batch) {
		return nil, fmt.Errorf("batch %s: want 1-64 characters of A-Z a-z 0-9 _ . - starting with a letter or digit", show(opts.Batch))
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
		return nil, fmt.Errorf("format %s: want csv, jsonl, ids or auto", show(string(format)))
	}

	c := newCollector(name, opts)
	br := bufio.NewReaderSize(r, 64<<10)
	if ok, err := c.skipBOM(br); err != nil || !ok {
		return nil, c.result(err)
	}
	if format == FormatAuto {
		var err error
		if format, err = detect(br); err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
	}
	var err error
	switch format {
	case FormatCSV:
		err = readCSV(br, c)
	case FormatJSONL:
		err = readJSONL(br, c)
	case FormatIDs:
		err = readIDs(br, c)
	}
	if err == nil && c.total == 0 && len(c.items) == 0 {
		c.problem(0, "no charges found")
	}
	return c.items, c.result(err)
}

// skipBOM drops a UTF-8 byte order mark, which Excel writes at the start of
// "CSV UTF-8" files, and refuses UTF-16 ("Unicode text") exports, whose
// every other byte is zero.
func (c *collector) skipBOM(br *bufio.Reader) (ok bool, err error) {
	head, err := br.Peek(3)
	if err != nil && err != io.EOF {
		return false, fmt.Errorf("read %s: %w", c.name, err)
	}
	switch {
	case bytes.HasPrefix(head, []byte("\xef\xbb\xbf")):
		_, err = br.Discard(3)
		return true, err
	case bytes.HasPrefix(head, []byte("\xff\xfe")), bytes.HasPrefix(head, []byte("\xfe\xff")):
		c.problem(0, "UTF-16 text: save the file as UTF-8 (in Excel: CSV UTF-8)")
		return false, nil
	}
	return true, nil
}

// detect picks the format from the first non-blank line, as far as it fits
// in the reader's buffer. Nothing is consumed.
func detect(br *bufio.Reader) (Format, error) {
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
		case isID(string(line)):
			return FormatIDs, nil
		}
		break
	}
	return FormatCSV, nil
}

// isID reports whether s looks like a charge or payment intent id. It is
// looser than refund's validation on purpose: it only decides the format,
// and the row is validated later with a precise message.
func isID(s string) bool {
	if len(s) < 4 || s[2] != '_' || !(s[:2] == "ch" || s[:2] == "py" || s[:2] == "pi") {
		return false
	}
	for i := 3; i < len(s); i++ {
		if !isAlnum(s[i]) {
			return false
		}
	}
	return true
}

func isAlnum(b byte) bool {
	return b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

// row is one input row as read, before validation: empty strings are
// absent values.
type row struct {
	line          int
	batch         string
	item          string
	charge        string
	paymentIntent string
	amount        string // decimal digits of minor units; "" is the full remaining amount
	currency      string
	reason        string
	metadata      map[string]string
}

// targetSeen is what duplicate detection remembers of a charge or payment
// intent: lines of its first row, of a row without an item id, and of a row
// without an amount (0 when none).
type targetSeen struct{ first, bare, full int32 }

// collector validates rows as the readers produce them, detects duplicates
// over the whole input and gathers problems.
type collector struct {
	name     string
	opts     Options
	items    []refund.Item
	problems []Problem
	total    int
	// targets holds every charge and payment intent listed. Rows without an
	// item id take their target as id, so targets also answers "is this id
	// taken by such a row" and explicit only needs the ids given in the input.
	targets  map[string]targetSeen
	explicit map[string]int32 // item ids given in the input -> line
	// currencies interns currency codes: a million rows share a few strings.
	currencies map[string]string
}

func newCollector(name string, opts Options) *collector {
	return &collector{
		name:       name,
		opts:       opts,
		targets:    make(map[string]targetSeen),
		explicit:   make(map[string]int32),
		currencies: make(map[string]string),
	}
}

// problem records a problem at line (0: the whole input).
func (c *collector) problem(line int, format string, args ...any) {
	c.total++
	if len(c.problems) < c.opts.MaxProblems {
		c.problems = append(c.problems, Problem{Name: c.name, Line: line, Msg: fmt.Sprintf(format, args...)})
	}
}

// result is Read's error: an I/O error first, else the problems, if any.
// With either, the items are dropped.
func (c *collector) result(ioErr error) error {
	if ioErr != nil {
		c.items = nil
		return ioErr
	}
	if c.total > 0 {
		c.items = nil
		return &InputError{Problems: c.problems, Total: c.total}
	}
	return nil
}

// add validates one row and appends its item, or records why it cannot.
func (c *collector) add(r *row) {
	if r.batch != "" && r.batch != c.opts.Batch {
		c.problem(r.line, "batch %s: the plan is for batch %s", show(r.batch), c.opts.Batch)
		return
	}
	amount, err := parseAmount(r.amount)
	if err != nil {
		c.problem(r.line, "%v", err)
		return
	}
	for k, v := range r.metadata {
		// Excel's plain "CSV" export is Windows-1252: catch it here rather
		// than let JSON encoding turn accented letters into U+FFFD.
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			c.problem(r.line, "metadata %s: not UTF-8 text (in Excel, save as CSV UTF-8)", show(k))
			return
		}
	}
	it := refund.Item{
		Batch:         c.opts.Batch,
		Item:          r.item,
		Charge:        r.charge,
		PaymentIntent: r.paymentIntent,
		Amount:        amount,
		Currency:      lowerASCII(r.currency),
		Reason:        r.reason,
		Metadata:      r.metadata,
	}
	derived := it.Item == ""
	if derived {
		it.Item = it.Target()
	}
	if err := it.Validate(); err != nil {
		if derived {
			// Name the bad charge, not the item id made from it.
			probe := it
			probe.Item = "x"
			if perr := probe.Validate(); perr != nil {
				err = perr
			} else {
				err = fmt.Errorf("%s %s: longer than 128 characters: give the row an item id", targetKind(&it), show(it.Target()))
			}
		}
		c.problem(r.line, "%v", err)
		return
	}
	if c.duplicate(r.line, &it, derived) {
		return
	}
	c.keep(r.line, it, derived)
}

// duplicate reports a problem and returns true when the item's id or
// target was already listed. A target may appear on several rows only to
// be refunded in parts: each row with its own item id and an amount.
func (c *collector) duplicate(line int, it *refund.Item, derived bool) bool {
	target, kind := it.Target(), targetKind(it)
	if seen, ok := c.targets[target]; ok {
		const parts = ": refunding a %s in parts needs an amount on every row"
		switch {
		case derived:
			c.problem(line, "%s %s already listed at line %d", kind, target, seen.first)
			return true
		case seen.bare != 0:
			c.problem(line, "%s %s already listed at line %d", kind, target, seen.bare)
			return true
		case seen.full != 0:
			c.problem(line, "%s %s already listed at line %d"+parts, kind, target, seen.full, kind)
			return true
		case it.Amount == 0:
			c.problem(line, "%s %s already listed at line %d"+parts, kind, target, seen.first, kind)
			return true
		}
	}
	if at, ok := c.explicit[it.Item]; ok {
		c.problem(line, "item %s already listed at line %d", it.Item, at)
		return true
	}
	if !derived {
		// An id given here may equal a target listed without an item id.
		if seen, ok := c.targets[it.Item]; ok && seen.bare != 0 {
			c.problem(line, "item %s already listed at line %d", it.Item, seen.bare)
			return true
		}
	}
	return false
}

// keep appends a valid item and remembers its ids. Strings are copied out
// of the reader's line so the line itself can be freed.
func (c *collector) keep(line int, it refund.Item, derived bool) {
	it.Charge = strings.Clone(it.Charge)
	it.PaymentIntent = strings.Clone(it.PaymentIntent)
	target := it.Target()
	if derived {
		it.Item = target // shares the target's bytes
	} else {
		it.Item = strings.Clone(it.Item)
		c.explicit[it.Item] = int32(line)
	}
	if it.Currency != "" {
		cur, ok := c.currencies[it.Currency]
		if !ok {
			cur = strings.Clone(it.Currency)
			c.currencies[cur] = cur
		}
		it.Currency = cur
	}
	it.Reason = internReason(it.Reason)
	seen, ok := c.targets[target]
	if !ok {
		seen.first = int32(line)
	}
	if derived {
		seen.bare = int32(line)
	}
	if it.Amount == 0 {
		seen.full = int32(line)
	}
	c.targets[target] = seen
	c.items = append(c.items, it)
}

func targetKind(it *refund.Item) string {
	if it.Charge != "" {
		return "charge"
	}
	return "payment_intent"
}

// internReason returns refund's own copy of a valid reason.
func internReason(r string) string {
	for _, ok := range refund.Reasons {
		if r == ok {
			return ok
		}
	}
	return r
}

// lowerASCII lower-cases ASCII letters: currency codes are written USD as
// often as usd, and Stripe wants usd. Anything else is left for Validate
// to reject.
func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] >= 'A' && s[i] <= 'Z' {
			return strings.ToLower(s)
		}
	}
	return s
}

// errAmount is the message for every amount that is not a positive whole
// number of minor units.
const errAmount = "amount %s: want a positive whole number of minor units"

// parseAmount parses minor units: decimal digits only, so 10.00, -5, +5,
// 1e3 and 1,000 are refused rather than guessed at. "" is 0, the full
// remaining amount.
func parseAmount(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf(errAmount, show(s))
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("amount %s: too large", show(s))
	}
	if err != nil || n == 0 {
		return 0, fmt.Errorf(errAmount, show(s))
	}
	return n, nil
}
