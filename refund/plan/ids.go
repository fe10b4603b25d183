package plan

import (
	"bufio"
	"bytes"
	"errors"
	"io"

	"github.com/refundkit/refundkit/refund"
)

// readIDs reads one charge (ch_, py_) or payment intent (pi_) id a line:
// each is a refund of the full remaining amount, its id the item id.
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
		case !isID(s):
			c.problem(line, "%s: want one charge (ch_, py_) or payment intent (pi_) id a line", refund.Show(s))
			continue
		case s[:3] == "pi_":
			it.PaymentIntent = s
		default:
			it.Charge = s
		}
		c.add(line, &it, false)
	}
}
