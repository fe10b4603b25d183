package plan

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/refundkit/refundkit/refund"
)

// What a CSV column holds. Column names are matched case-insensitively and
// cells are trimmed of surrounding spaces, as spreadsheets add both freely.
type colKind uint8

const (
	colUnnamed colKind = iota // a header cell left empty: its cells must be too
	colBatch
	colItem
	colCharge
	colPaymentIntent
	colCapture
	colPSPReference
	colAmount
	colCurrency
	colReason
	colMetadata // metadata.<key>, or an unknown column kept by KeepColumns
)

var knownColumns = map[string]colKind{
	"batch":          colBatch,
	"item":           colItem,
	"charge":         colCharge,
	"payment_intent": colPaymentIntent,
	"capture":        colCapture,
	"psp_reference":  colPSPReference,
	"amount":         colAmount,
	"currency":       colCurrency,
	"reason":         colReason,
}

const knownColumnsHint = "known: charge, payment_intent, capture, psp_reference, amount, currency, reason, item, batch, metadata.<key>"

// isColumn reports whether s, a whole line, names a known column or a
// metadata one: a CSV header of one column, not an id.
func isColumn(s string) bool {
	s = strings.ToLower(s)
	_, known := knownColumns[s]
	return known || strings.HasPrefix(s, "metadata.")
}

type column struct {
	kind colKind
	key  string // metadata key when kind is colMetadata
}

// readCSV reads a CSV file whose first row names the columns, its fields
// separated by delim.
func readCSV(r io.Reader, c *collector, delim rune) error {
	cr := csv.NewReader(r)
	cr.Comma = delim
	cr.FieldsPerRecord = -1 // row widths are checked here, with a clearer message
	cr.ReuseRecord = true
	// Cells are trimmed anyway; leading space is skipped in the reader so a
	// quoted field after ", " reads as quoted. Not with tabs: the reader
	// would take a tab after a tab for space and drop an empty field.
	cr.TrimLeadingSpace = delim != Tab
	var columns []column
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			var perr *csv.ParseError
			if !errors.As(err, &perr) {
				return readError(c.name, err)
			}
			c.problem(perr.Line, "%s", csvMessage(perr))
			if columns == nil {
				return nil // no header: the rows cannot be read
			}
			continue
		}
		if blank(rec) {
			continue // spreadsheets export empty rows as ",,,,"
		}
		line, _ := cr.FieldPos(0)
		if columns == nil {
			var ok bool
			if columns, ok = c.header(line, rec); !ok {
				return nil
			}
			continue
		}
		c.csvRow(line, rec, columns)
	}
}

func csvMessage(e *csv.ParseError) string {
	switch {
	case e.StartLine != e.Line:
		// A quoted field ran on to later lines: where its row started
		// says more than a column.
		return fmt.Sprintf("%v (in the row starting at line %d)", e.Err, e.StartLine)
	case errors.Is(e.Err, csv.ErrQuote):
		// Often an unclosed quote at the end of the input, whose column
		// is past the end of the line.
		return e.Err.Error()
	}
	return fmt.Sprintf("%v, column %d", e.Err, e.Column)
}

func blank(rec []string) bool {
	for _, f := range rec {
		if strings.TrimSpace(f) != "" {
			return false
		}
	}
	return true
}

// header maps the header row to columns, or reports why it cannot.
func (c *collector) header(line int, rec []string) ([]column, bool) {
	for _, f := range rec {
		switch f = strings.TrimSpace(f); {
		case isID(f):
			c.problem(line, "no header row: %s is an id; want a first row naming the columns, such as charge,amount", refund.Show(f))
			return nil, false
		case isPayPalID(f), isAdyenID(f):
			what, ids := "a PayPal id", IDsCapture
			if isAdyenID(f) {
				what, ids = "an Adyen pspReference", IDsPSPReference
			}
			hint := ""
			if c.opts.IDs != ids {
				hint = fmt.Sprintf(", or --ids %s for %s ids one a line", ids, ids)
			}
			c.problem(line, "no header row: %s looks like %s; want a first row naming the columns, such as %s,amount%s", refund.Show(f), what, ids, hint)
			return nil, false
		}
	}
	columns := make([]column, len(rec))
	named := map[string]int{} // column name or metadata key -> 1-based column
	var unknown []string
	raw := "" // the unknown names as given, for the delimiter hint
	ok := true
	for i, f := range rec {
		name := strings.TrimSpace(f)
		lower := strings.ToLower(name)
		col := column{kind: knownColumns[lower]}
		switch {
		case name == "":
			continue // colUnnamed: its cells must be empty
		case col.kind != colUnnamed:
		case strings.HasPrefix(lower, "metadata."):
			col = column{kind: colMetadata, key: name[len("metadata."):]}
		case c.opts.KeepColumns:
			col = column{kind: colMetadata, key: name}
		default:
			unknown = append(unknown, refund.Show(name))
			raw += name
			continue
		}
		id := lower
		if col.kind == colMetadata {
			id = "metadata." + col.key
			if err := refund.MetadataKeyError(col.key); err != nil { // once, not once per row
				c.problem(line, "column %s: %v", refund.Show(name), err)
				ok = false
			}
		}
		if prev, dup := named[id]; dup {
			if col.kind == colMetadata {
				c.problem(line, "column %s: metadata key %s already comes from column %d", refund.Show(name), refund.Show(col.key), prev)
			} else {
				c.problem(line, "column %s repeats column %d", refund.Show(name), prev)
			}
			ok = false
		}
		named[id] = i + 1
		columns[i] = col
	}
	if len(unknown) > 0 {
		hint := ""
		for _, dl := range delimiters {
			if dl.r != c.plan.delimiter && strings.ContainsRune(raw, dl.r) {
				hint = fmt.Sprintf("; the header is read with %s between columns: for %s, give --delimiter %s", delimiterOf(c.plan.delimiter).words, dl.words, dl.flag)
				break
			}
		}
		c.problem(line, "unknown columns %s (%s; --keep-columns keeps others as metadata)%s", strings.Join(unknown, ", "), knownColumnsHint, hint)
		ok = false
	}
	if !slices.ContainsFunc([]string{"charge", "payment_intent", "capture", "psp_reference"}, func(k string) bool { return named[k] > 0 }) {
		c.problem(line, "no charge, payment_intent, capture or psp_reference column (%s)", knownColumnsHint)
		ok = false
	}
	return columns, ok
}

// csvRow turns one data row into an item for the collector.
func (c *collector) csvRow(line int, rec []string, columns []column) {
	if len(rec) < len(columns) || !blank(rec[len(columns):]) {
		c.problem(line, "%d fields, the header has %d%s", len(rec), len(columns), c.decimalCommaHint(rec, columns))
		return
	}
	var it refund.Item
	amount := ""
	for i, col := range columns {
		v := strings.TrimSpace(rec[i])
		if v == "" {
			continue
		}
		switch col.kind {
		case colUnnamed:
			c.problem(line, "value %s in column %d, which has no name in the header", refund.Show(v), i+1)
			return
		case colMetadata:
			if it.Metadata == nil {
				it.Metadata = make(map[string]string)
			}
			it.Metadata[col.key] = strings.Clone(v)
		default:
			*[...]*string{colBatch: &it.Batch, colItem: &it.Item, colCharge: &it.Charge, colPaymentIntent: &it.PaymentIntent,
				colCapture: &it.Capture, colPSPReference: &it.PSPReference, colAmount: &amount, colCurrency: &it.Currency, colReason: &it.Reason}[col.kind] = v
		}
	}
	if amount != "" {
		var err error
		if it.Amount, err = refund.ParseAmount(amount); err != nil {
			if !c.otherBatch(line, it.Batch) { // the batch is named first, as for any row
				if separated(amount) {
					// 12,50 or 1.250 is never read as 1250 or 12: which was
					// meant depends on the currency and the locale.
					err = &refund.InputError{Field: "amount", Err: fmt.Errorf("%s: want a positive whole number of minor units, with no decimal or thousands separator (12.50 EUR is 1250)", refund.Show(amount))}
				}
				c.fail(line, err)
			}
			return
		}
	}
	c.add(line, &it, true)
}

// separated reports an amount written with a decimal or thousands
// separator: digits in groups split by one of . , ' or a space.
func separated(s string) bool {
	groups, sep := 0, byte(0)
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		if j == i {
			return false // a group of no digits
		}
		groups++
		if j == len(s) {
			break
		}
		switch s[j] {
		case '.', ',', '\'', ' ':
			if sep == 0 {
				sep = s[j]
			}
		default:
			return false
		}
		i = j + 1
		if i == len(s) {
			return false // ends in a separator
		}
	}
	return groups > 1
}

// decimalCommaHint says, for a comma-separated row with one field more
// than its header where the amount is digits and the next field two
// digits, that the amount may have a decimal comma: 12,50 read as two
// fields.
func (c *collector) decimalCommaHint(rec []string, columns []column) string {
	if c.plan.delimiter != Comma || len(rec) != len(columns)+1 {
		return ""
	}
	for i, col := range columns {
		if col.kind != colAmount {
			continue
		}
		a, b := strings.TrimSpace(rec[i]), strings.TrimSpace(rec[i+1])
		if a != "" && len(b) == 2 && strings.Trim(a+b, "0123456789") == "" { // cents
			return fmt.Sprintf(": is %s,%s an amount with a decimal comma? amounts are whole minor units, with no separator (12.50 EUR is 1250)", a, b)
		}
	}
	return ""
}

// Delimiters plan reads CSV with: Excel writes semicolons where the decimal
// separator is a comma, tabs for "Text (Tab delimited)".
const (
	Comma     = ','
	Semicolon = ';'
	Tab       = '\t'
)

// delimiters are the ones detected, the default first: the words a
// sentence names each by, each as --delimiter takes it on a shell's
// command line, and the names ParseDelimiter reads.
var delimiters = []delimiter{
	{Comma, "commas", ",", []string{",", "comma"}},
	{Semicolon, "semicolons", "';'", []string{";", "semicolon"}},
	{Tab, "tabs", "tab", []string{"\t", `\t`, "tab"}},
}

// ParseDelimiter reads a --delimiter value: , ; or tab (also comma,
// semicolon, \t), or auto (0).
func ParseDelimiter(s string) (rune, error) {
	lower := strings.ToLower(s)
	if lower == "" || lower == "auto" {
		return 0, nil
	}
	for _, d := range delimiters {
		if slices.Contains(d.names, lower) {
			return d.r, nil
		}
	}
	return 0, fmt.Errorf("delimiter %q: want , ; or tab (or auto, to tell it from the header row)", s)
}

type delimiter struct {
	r           rune
	words, flag string
	names       []string
}

// delimiterOf is d's entry in delimiters.
func delimiterOf(d rune) *delimiter {
	for i := range delimiters {
		if delimiters[i].r == d {
			return &delimiters[i]
		}
	}
	return &delimiters[0]
}

// delimiterError is a header row that more than one delimiter reads as well.
type delimiterError struct{ candidates []rune }

func (e *delimiterError) Error() string {
	names, flags := make([]string, len(e.candidates)), make([]string, len(e.candidates))
	for i, d := range e.candidates {
		names[i], flags[i] = delimiterOf(d).words, "--delimiter "+delimiterOf(d).flag
	}
	return fmt.Sprintf("header row: %s separate names in it and no one of them reads as the columns better: say which delimits them (%s)",
		strings.Join(names, " and "), strings.Join(flags, " or "))
}

// detectDelimiter tells the delimiter of a CSV input from its header row,
// the first line that is not blank, and says that line's number. None of
// the delimiters outside quotes: comma; one: it; more: the one that splits
// it into the most known column names, a tie a *delimiterError. The rows
// are never looked at: a decimal comma must not pass for a delimiter.
func detectDelimiter(br *bufio.Reader) (d rune, header int, err error) {
	line, header, err := headLine(br)
	if err != nil {
		return 0, 0, err
	}
	var found []rune
	for _, d := range delimiters {
		if unquotedIndex(line, byte(d.r)) {
			found = append(found, d.r)
		}
	}
	switch len(found) {
	case 0:
		return Comma, header, nil
	case 1:
		return found[0], header, nil
	}
	best, bestScore, tie := rune(0), -1, false
	for _, d := range found {
		switch s := knownNames(line, d); {
		case s > bestScore:
			best, bestScore, tie = d, s, false
		case s == bestScore:
			tie = true
		}
	}
	if tie {
		return 0, header, &delimiterError{candidates: found}
	}
	return best, header, nil
}

// unquotedIndex reports whether b holds c outside double quotes.
func unquotedIndex(b []byte, c byte) bool {
	quoted := false
	for _, x := range b {
		switch {
		case x == '"':
			quoted = !quoted
		case x == c && !quoted:
			return true
		}
	}
	return false
}

// knownNames counts the cells of line, split by d, that name a column.
func knownNames(line []byte, d rune) int {
	cr := csv.NewReader(bytes.NewReader(line))
	cr.Comma = d
	cr.LazyQuotes = true
	rec, err := cr.Read()
	if err != nil {
		return 0
	}
	n := 0
	for _, f := range rec {
		if isColumn(strings.TrimSpace(f)) {
			n++
		}
	}
	return n
}
