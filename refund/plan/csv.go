package plan

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
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
		case isPayPalID(f):
			hint := ""
			if c.opts.IDs != IDsCapture {
				hint = ", or --ids capture for capture ids one a line"
			}
			c.problem(line, "no header row: %s looks like a PayPal id; want a first row naming the columns, such as capture,amount%s", refund.Show(f), hint)
			return nil, false
		case isAdyenID(f):
			hint := ""
			if c.opts.IDs != IDsPSPReference {
				hint = ", or --ids psp_reference for psp_reference ids one a line"
			}
			c.problem(line, "no header row: %s looks like an Adyen pspReference; want a first row naming the columns, such as psp_reference,amount%s", refund.Show(f), hint)
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
			col.kind = colUnnamed
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
		if name == "" {
			columns[i] = col
			continue
		}
		id := lower
		if col.kind == colMetadata {
			id = "metadata." + col.key
			if err := checkMetadataKey(col.key); err != nil {
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
		for _, d := range delimiters {
			if d != c.plan.delimiter && strings.ContainsRune(raw, d) {
				hint = fmt.Sprintf("; the header is read with %s between columns: for %s, give --delimiter %s", delimiterWords(c.plan.delimiter), delimiterWords(d), delimiterFlag(d))
				break
			}
		}
		c.problem(line, "unknown columns %s (%s; --keep-columns keeps others as metadata)%s", strings.Join(unknown, ", "), knownColumnsHint, hint)
		ok = false
	}
	_, charge := named["charge"]
	_, intent := named["payment_intent"]
	_, capture := named["capture"]
	_, psp := named["psp_reference"]
	if !charge && !intent && !capture && !psp {
		c.problem(line, "no charge, payment_intent, capture or psp_reference column (%s)", knownColumnsHint)
		ok = false
	}
	return columns, ok
}

// checkMetadataKey applies refund's rules for metadata keys once, to the
// header, instead of once per row.
func checkMetadataKey(key string) error { return refund.MetadataKeyError(key) }

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
		case colBatch:
			it.Batch = v
		case colItem:
			it.Item = v
		case colCharge:
			it.Charge = v
		case colPaymentIntent:
			it.PaymentIntent = v
		case colCapture:
			it.Capture = v
		case colPSPReference:
			it.PSPReference = v
		case colAmount:
			amount = v
		case colCurrency:
			it.Currency = v
		case colReason:
			it.Reason = v
		case colMetadata:
			if it.Metadata == nil {
				it.Metadata = make(map[string]string)
			}
			it.Metadata[col.key] = strings.Clone(v)
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
		if a != "" && len(b) == 2 && allDigits(a) && allDigits(b) { // cents
			return fmt.Sprintf(": is %s,%s an amount with a decimal comma? amounts are whole minor units, with no separator (12.50 EUR is 1250)", a, b)
		}
	}
	return ""
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
