package plan

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"github.com/refundkit/refundkit/refund"
)

// readJSONL reads one plan item a line, in the grammar refund and audit
// read (refund.ItemDecoder), so that a plan can be read back (to re-shard
// it, say). As plan's input, a line may leave out what plan fills in: the
// batch (which, when given, must be the batch being planned) and the item
// id; and --keep-columns keeps unknown fields as metadata.
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
