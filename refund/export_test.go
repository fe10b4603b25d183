package refund

import (
	"context"
	"io"
)

// ReadPlan runs readPlan, the engine's plan reader, over in and returns
// the items it read before its first error, for the tests of package
// refund_test that hold it against the other readers of plan items.
func ReadPlan(in io.Reader, name string) ([]Item, error) {
	out := make(chan []parsedLine)
	go readPlan(context.Background(), in, name, newPlanIndex(), out, nil)
	var items []Item
	var err error
	for batch := range out {
		for _, p := range batch {
			if err != nil {
				continue
			}
			if p.err != nil {
				err = p.err
				continue
			}
			items = append(items, p.item)
		}
	}
	return items, err
}
