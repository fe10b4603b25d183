package journal

import (
	"fmt"
	"io"
	"os"
)

type MergeOptions struct {
	Compact bool
}

type MergeReport struct {
	Inputs     []MergeInput
	Records    int // records written
	Duplicates int // identical records collapsed into one
	Compacted  int // records left out by Compact
	Conflicts  []Conflict
}

type MergeInput struct {
	Path       string
	Records    int   // records read, torn tail excluded
	OutOfOrder bool  // ts went backwards somewhere: sorted in memory
	Torn       *Torn // a torn tail, left out of the output
}

// Conflict is two records that cannot both be true: two refunds of one
// item, a refund and a final failure, or one refund of two items (Batch
// and Item name the second). Both stay in the output.
type Conflict struct {
	Batch, Item string
	Reason      string // what disagrees
	First       string // file:line of the earlier record
	Second      string // file:line of the later record
}

func (c Conflict) String() string {
	return fmt.Sprintf("%s: batch %s item %s: %s (first at %s)", c.Second, c.Batch, c.Item, c.Reason, c.First)
}

// Merge writes the records of the journals at paths to out as one journal:
//   - sorted by ts, ties in the order of the inputs, then of their lines;
//     an input whose ts goes backwards is sorted in memory (OutOfOrder);
//   - identical records collapse into one;
//   - a torn tail is reported (MergeInput.Torn) and left out;
//   - corruption or an unknown version stops it with file:line (out is
//     then incomplete: write a temporary file and rename it);
//   - conflicting outcomes are all kept and reported, in merge order.
//
// Compact keeps per item only what its state needs: the first refunded
// record, else the last final failure, else (in doubt) every record from
// the first intent of its highest attempt, with the last failure before
// it if none follows; canceled records, and every record of an item in
// conflict or whose state the rule would not reproduce, are kept.
func Merge(paths []string, out io.Writer) (MergeReport, error) {
	return MergeWith(paths, out, MergeOptions{})
}

func MergeWith(paths []string, out io.Writer, opts MergeOptions) (MergeReport, error) {
	inOrder, err := checkOrder(paths)
	if err != nil {
		return MergeReport{}, err
	}
	found := &conflicts{paths: paths, found: []Conflict{}}
	if !opts.Compact {
		m := newMerger(paths, inOrder)
		m.outcomes = newOutcomeChecker(found, expectedItems(paths))
		report, err := m.run(out)
		m.outcomes.close()
		if err == nil {
			report.Conflicts = found.found
		}
		return report, err
	}
	// Compact: a first pass learns every item's history, a second writes.
	items := NewIndex[compactItem]()
	expect := expectedItems(paths)
	items.Reserve(expect)
	found.refunds.reserve(expect)
	m := newMerger(paths, inOrder)
	m.learn, m.conflicts = items, found
	if _, err := m.run(nil); err != nil {
		return MergeReport{}, err
	}
	second := newMerger(paths, inOrder)
	second.keep = items
	report, err := second.run(out)
	report.Conflicts = found.found
	return report, err
}

// expectedItems guesses the items at paths (ItemsIn), to size an index once.
func expectedItems(paths []string) int {
	var size int64
	for _, p := range paths {
		if info, err := os.Stat(p); err == nil {
			size += info.Size()
		}
	}
	return ItemsIn(size)
}
