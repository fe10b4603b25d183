package journal

// compactPlan learns, in a first pass, which records each item needs, and
// answers for each record in the second pass (same merge order, same
// sequence numbers).
type compactPlan struct {
	state *State
	items []compactItem // by State slot
}

// compactItem is what an item's history says to keep. Sequence numbers
// are 1-based; 0 is none.
type compactItem struct {
	firstRefunded int // the refunded record State keeps
	lastFinal     int // the last final failure
	lastFailure   int // the last failure of any kind
	failureBefore int // the last failure before attempt
	attempt       int // the first intent of the highest attempt
	sentIntent    int // the last intent of the highest attempt: what was sent

	keepAll bool
	from    int // in doubt: keep every record from here on
	one     int // the one record kept (refunded or failed), or the failure before from
	intent  int // kept besides one: the intent that binds a final item to what was sent
}

func (p *compactPlan) learn(r *Record, seq int) {
	if r.Type == TypeCanceled {
		return
	}
	i, found := p.state.find(r.Batch, r.Item)
	var prev ItemState
	if found {
		prev = p.state.get(i)
	}
	p.state.Apply(r)
	if !found {
		i, _ = p.state.find(r.Batch, r.Item)
		p.items = append(p.items, compactItem{})
	}
	ci := &p.items[i]
	if prev.Status == StatusRefunded {
		return // State ignores it; so does the compacted journal
	}
	switch r.Type {
	case TypeRefunded:
		ci.firstRefunded = seq
	case TypeFailed:
		ci.lastFailure = seq
		if r.Final {
			ci.lastFinal = seq
		}
	case TypeIntent:
		if r.Attempt > prev.Attempt {
			ci.attempt, ci.failureBefore = seq, ci.lastFailure
		}
		if r.Attempt >= prev.Attempt {
			ci.sentIntent = seq
		}
	}
}

// decide settles what each item keeps, from its final state.
func (p *compactPlan) decide(conflicts map[string]bool) {
	p.state.Each(func(batch, item string, st ItemState) {
		i, _ := p.state.find(batch, item)
		ci := &p.items[i]
		if conflicts[batch+"\x00"+item] {
			ci.keepAll = true
			return
		}
		switch st.Status {
		// A final item keeps its outcome and the intent that says what was
		// sent, so a plan edited afterwards is still refused.
		case StatusRefunded:
			ci.one, ci.intent = ci.firstRefunded, ci.sentIntent
		case StatusFailed:
			ci.one, ci.intent = ci.lastFinal, ci.sentIntent
		case StatusInDoubt:
			// The records from the attempt's first intent on give the same
			// state: older attempts' intents after it change nothing.
			if ci.attempt == 0 {
				ci.keepAll = true
				return
			}
			ci.from = ci.attempt
			if ci.lastFailure < ci.attempt {
				ci.one = ci.failureBefore
			}
		default:
			ci.keepAll = true
		}
	})
}

// keeps says whether the record numbered seq stays in the compacted output.
func (p *compactPlan) keeps(r *Record, seq int) bool {
	if r.Type == TypeCanceled {
		return true
	}
	i, ok := p.state.find(r.Batch, r.Item)
	if !ok {
		return true // cannot happen: the first pass saw every record
	}
	ci := &p.items[i]
	return ci.keepAll || seq == ci.one || (ci.intent > 0 && seq == ci.intent) || (ci.from > 0 && seq >= ci.from)
}
