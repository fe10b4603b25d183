package journal

import (
	"fmt"
	"io"
	"os"
)

// MergeOptions tune MergeWith.
type MergeOptions struct {
	// Compact keeps one final record per item (see Merge).
	Compact bool
}

// MergeReport says what a merge read and wrote.
type MergeReport struct {
	Inputs     []MergeInput
	Records    int // records written
	Duplicates int // identical records collapsed into one
	Compacted  int // records left out by Compact
	Conflicts  []Conflict
}

// MergeInput is what a merge found in one input.
type MergeInput struct {
	Path       string
	Records    int   // records read, torn tail excluded
	OutOfOrder bool  // ts went backwards somewhere: sorted in memory
	Torn       *Torn // a torn tail, left out of the output
}

// Conflict is two records that cannot both be true: two different refunds
// of one item, a refund and a final failure of one item, or one refund id
// credited to two items (Batch and Item name the second). Both stay in the
// output; people decide.
type Conflict struct {
	Batch, Item string
	Reason      string // what disagrees
	First       string // file:line of the earlier record
	Second      string // file:line of the later record
}

func (c Conflict) String() string {
	return fmt.Sprintf("%s: batch %s item %s: %s (first at %s)", c.Second, c.Batch, c.Item, c.Reason, c.First)
}

// Merge writes the records of the journals at paths (the shards of one
// batch, or the journals of runs on several machines) to out as one
// journal:
//
//   - Order: records are sorted by ts; records with the same ts keep the
//     order of the inputs as named, then their order within their input.
//     An input in ts order (as one Writer nearly always leaves it) is
//     streamed; an input whose ts ever goes backwards (concurrent appenders
//     can stamp a record before another that is written first) is sorted
//     in memory first, its lines kept there; MergeInput.OutOfOrder says so.
//   - Identical records (the same line once encoded) collapse into one.
//   - A torn tail of an input is reported (MergeInput.Torn) and left out.
//   - Corruption or an unknown version in any input stops the merge with
//     file:line, as Load does. Output already written to out is then
//     incomplete: write to a temporary file and rename it only on success.
//   - Conflicting outcomes for one item (two different refund ids, or a
//     refund and a final failure), and a refund id credited to a second
//     item, are all kept, and reported as Conflicts in merge order.
//
// With MergeOptions.Compact the output keeps, per item, only what its state
// needs: the refunded record (the first one, which State keeps); else the
// last final failure; else (in doubt) every record from the first intent of
// its highest attempt on, with the last failure before it if none follows,
// which keeps the attempt, its key's age, whether the key is burned and the
// last error code. Canceled records are all kept. An item with a conflict,
// or whose state the rule would not reproduce (a clock that stepped back),
// keeps all its records.
func Merge(paths []string, out io.Writer) (MergeReport, error) {
	return MergeWith(paths, out, MergeOptions{})
}

// MergeWith is Merge with options.
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
	// Compact: a first pass learns every item's history, a second writes
	// what it must keep.
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

// expectedItems guesses how many items the journals at paths hold
// (ItemsIn), so that an item index is sized once instead of growing by
// doubling. A guess too low only lets the index grow.
func expectedItems(paths []string) int {
	var size int64
	for _, p := range paths {
		if info, err := os.Stat(p); err == nil {
			size += info.Size()
		}
	}
	return ItemsIn(size)
}
