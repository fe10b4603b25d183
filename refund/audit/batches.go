package audit

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// BatchMismatchError is an audit with a plan of other batches than the
// journals': one mistake in the inputs, said once instead of a finding for
// every item.
type BatchMismatchError struct {
	Plan     []string // the plan's batches, sorted
	Journals []string // the journals' batches, sorted
}

func (e *BatchMismatchError) Error() string {
	return fmt.Sprintf("the plan is %s and the journals are %s: no batch is in both, so nothing was audited; give the plan of the journals' batch (or the journals of the plan's)",
		batchNames(e.Plan), batchNames(e.Journals))
}

// batchNames names batches for people: "batch B", "batches A, B".
func batchNames(bs []string) string {
	const most = 5
	if len(bs) == 1 {
		return "batch " + bs[0]
	}
	if len(bs) > most {
		return fmt.Sprintf("batches %s and %d more", strings.Join(bs[:most], ", "), len(bs)-most)
	}
	return "batches " + strings.Join(bs, ", ")
}

// batchMismatch is a *BatchMismatchError when a plan was added, the
// journals hold records, and no batch is both planned and journaled.
func (s *state) batchMismatch() error {
	if !s.planned {
		return nil
	}
	planned, journaled := map[string]bool{}, map[string]bool{}
	last, lastFlags := "", uint16(0) // items of one batch come in runs
	for i := range s.n {
		batch, _ := s.idx.Key(i)
		flags := s.slot(i).flags & (flagInPlan | flagInJournal)
		if batch == last && flags == lastFlags {
			continue
		}
		last, lastFlags = batch, flags
		if flags&flagInPlan != 0 && flags&flagInJournal != 0 {
			return nil // an item in both
		}
		// Cloned: the error outlives the arena the batch points into.
		if flags&flagInPlan != 0 {
			planned[strings.Clone(batch)] = true
		}
		if flags&flagInJournal != 0 {
			journaled[strings.Clone(batch)] = true
		}
	}
	if len(planned) == 0 || len(journaled) == 0 {
		return nil
	}
	for b := range journaled {
		if planned[b] {
			return nil
		}
	}
	return &BatchMismatchError{Plan: slices.Sorted(maps.Keys(planned)), Journals: slices.Sorted(maps.Keys(journaled))}
}
