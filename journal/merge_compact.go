package journal

// compactItem is what compaction's first pass learns of an item, and the
// second answers from (same merge order, same sequence numbers).
type compactItem struct {
	outcomes firstOutcomes
	conflict bool // it keeps all its records

	// Status and attempt as Next makes them.
	status  Status
	attempt int

	// Records by sequence number, 1-based; 0 is none.
	firstRefunded int // the refunded record that settled it
	lastFinal     int // the last final failure
	lastFailure   int // the last failure of any kind
	failureBefore int // the last failure before attemptFrom
	attemptFrom   int // the first intent of the highest attempt
	sentIntent    int // the last intent Next took as what was sent
}

func (ci *compactItem) learn(r *Record, seq int) {
	// Sent starts false: next.Sent says Next took r as what was sent.
	prev := ItemState{Status: ci.status, Attempt: ci.attempt}
	next := Next(prev, r)
	ci.status, ci.attempt = next.Status, next.Attempt
	switch {
	case next.Status == StatusRefunded:
		if prev.Status != StatusRefunded {
			ci.firstRefunded = seq
		}
	case r.Type == TypeFailed:
		ci.lastFailure = seq
		if next.Status == StatusFailed {
			ci.lastFinal = seq
		}
	}
	if next.Attempt > prev.Attempt {
		ci.attemptFrom, ci.failureBefore = seq, ci.lastFailure
	}
	if next.Sent {
		ci.sentIntent = seq
	}
}

// keeps says whether the item's record seq stays in the output.
func (ci *compactItem) keeps(seq int) bool {
	switch {
	case ci.conflict:
		return true
	// A final item keeps its outcome and the intent that says what was sent.
	case ci.status == StatusRefunded:
		return seq == ci.firstRefunded || seq == ci.sentIntent
	case ci.status == StatusFailed:
		return seq == ci.lastFinal || seq == ci.sentIntent
	// In doubt: the records from the attempt's first intent on, with the
	// last failure before it if none follows, give the same state.
	case ci.status == StatusInDoubt && ci.attemptFrom > 0:
		return seq >= ci.attemptFrom || (ci.lastFailure < ci.attemptFrom && seq == ci.failureBefore)
	}
	return true
}
