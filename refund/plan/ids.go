package plan

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/refundkit/refundkit/refund"
)

// IDs says what the bare ids of an input name.
type IDs string

// What bare ids name. Capture ids and pspReferences have no prefix to tell
// them by, so they are read only when the caller says so: a guess could
// plan refunds of the wrong payments.
const (
	IDsStripe       IDs = "stripe"        // ch_/py_ a charge, pi_ a payment intent
	IDsCapture      IDs = "capture"       // every id a capture
	IDsPSPReference IDs = "psp_reference" // every id an Adyen pspReference
)

// readIDs reads one id a line (by IDs), each a refund of the full
// remaining amount, its id the item id.
func readIDs(br *bufio.Reader, c *collector) error {
	lines := refund.NewLineReader(br, c.name)
	for {
		text, line, err := lines.Next()
		var ie *refund.InputError
		switch {
		case err == io.EOF:
			return nil
		case errors.As(err, &ie):
			c.fail(line, ie)
			continue
		case err != nil:
			return readError(c.name, err)
		}
		text = bytes.TrimSpace(text)
		if len(text) == 0 {
			continue
		}
		s := string(text)
		var it refund.Item
		switch {
		case c.opts.IDs == IDsCapture:
			if !refund.ValidCapture(s) {
				c.problem(line, "%s: want one capture id a line (1-128 of A-Z a-z 0-9 _ . : - starting with a letter or digit)", refund.Show(s))
				continue
			}
			it.Capture = s
		case c.opts.IDs == IDsPSPReference:
			if !refund.ValidPSPReference(s) {
				c.problem(line, "%s: want one psp_reference a line (16 of A-Z 0-9)", refund.Show(s))
				continue
			}
			it.PSPReference = s
		case !isID(s):
			hint := ""
			switch {
			case isAdyenID(s):
				hint = "; for psp_reference ids, give --ids psp_reference"
			case refund.ValidCapture(s) && !stripePrefix(s):
				hint = "; for capture ids, give --ids capture"
			}
			c.problem(line, "%s: want one charge (ch_, py_) or payment intent (pi_) id a line%s", refund.Show(s), hint)
			continue
		case s[:3] == "pi_":
			it.PaymentIntent = s
		default:
			it.Charge = s
		}
		c.add(line, &it, false)
	}
}

// isPayPalID reports whether s has the shape of a PayPal id: 17 capitals
// and digits, with a digit. It only picks a hint for a message.
func isPayPalID(s string) bool {
	if len(s) != 17 {
		return false
	}
	digit := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			digit = true
		case c < 'A' || c > 'Z':
			return false
		}
	}
	return digit
}

// isAdyenID reports whether s has the shape of an Adyen pspReference, with
// a digit. It only picks a hint for a message.
func isAdyenID(s string) bool {
	return refund.ValidPSPReference(s) && strings.ContainsAny(s, "0123456789")
}

// readJSONL reads one plan item a line, in refund's grammar (so a plan can
// be read back), batch and item id left to plan to fill in.
func readJSONL(br *bufio.Reader, c *collector) error {
	items := refund.NewItemReader(br, c.name)
	items.Decoder = refund.ItemDecoder{Input: true, KeepUnknown: c.opts.KeepColumns}
	var it refund.Item // one for every line: add keeps its fields, not it
	for {
		var line int
		var err error
		it, line, err = items.Next()
		var ie *refund.InputError
		switch {
		case err == io.EOF:
			return nil
		case errors.As(err, &ie):
			if errors.Is(ie.Err, refund.ErrUnknownField) {
				ie.Err = fmt.Errorf("%w (--keep-columns keeps others as metadata)", ie.Err)
			}
			c.fail(line, ie)
		case err != nil:
			return readError(c.name, err)
		default:
			c.add(line, &it, false)
		}
	}
}
