package plan

import (
	"bufio"
	"io"
)

// readIDs reads one charge (ch_, py_) or payment intent (pi_) id a line:
// each is a refund of the full remaining amount, its id the item id.
func readIDs(br *bufio.Reader, c *collector) error {
	lr := lineReader{br: br}
	for {
		text, tooLong, err := lr.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return readError(c.name, err)
		}
		switch {
		case tooLong:
			c.problem(lr.line, "line longer than %d bytes", maxLine)
			continue
		case len(text) == 0:
			continue
		}
		s := string(text)
		r := row{line: lr.line}
		switch {
		case !isID(s):
			c.problem(lr.line, "%s: want one charge (ch_, py_) or payment intent (pi_) id a line", show(s))
			continue
		case s[:3] == "pi_":
			r.paymentIntent = s
		default:
			r.charge = s
		}
		c.add(&r)
	}
}
