package journal

import "time"

// Status is where an item stands according to a journal.
type Status uint8

const (
	// StatusUnknown: the journal holds nothing for the item.
	StatusUnknown Status = iota
	// StatusInDoubt: an intent with no final outcome. A refund may exist at
	// Stripe; it must be looked up before any new call.
	StatusInDoubt
	// StatusRefunded: a refund exists for the item. Nothing more is sent.
	StatusRefunded
	// StatusFailed: Stripe refused the refund for good (Final failure).
	StatusFailed
)

func (s Status) String() string {
	switch s {
	case StatusInDoubt:
		return "in_doubt"
	case StatusRefunded:
		return "refunded"
	case StatusFailed:
		return "failed"
	}
	return "unknown"
}

// ItemState is what a journal says about one item of one batch.
type ItemState struct {
	Status Status
	// Attempt is the highest attempt journaled; its key is Record.Key of that
	// attempt's intent.
	Attempt int
	// KeyBurned: Stripe saved an error answer (a 500) under the current
	// attempt's key and will replay it forever, so a retry needs a new key.
	KeyBurned bool
	// LastIntent is when the current attempt's latest intent was written; a
	// key older than Stripe's 24-hour replay window may be forgotten.
	LastIntent time.Time
	// Amount is the refunded amount (StatusRefunded) or the last requested one.
	Amount int64
	Refund string // refund id when StatusRefunded
	Code   string // Stripe's error code of the last failure
}

// State folds records into per-item state. The zero value is not usable;
// call NewState.
type State struct {
	items map[itemKey]ItemState
}

type itemKey struct{ batch, item string }

// NewState returns an empty state.
func NewState() *State { return &State{items: make(map[itemKey]ItemState)} }

// Lookup returns the state of item in batch; ok is false if the journal
// holds nothing for it.
func (s *State) Lookup(batch, item string) (st ItemState, ok bool) {
	st, ok = s.items[itemKey{batch, item}]
	return st, ok
}

// Len is the number of items the state knows.
func (s *State) Len() int { return len(s.items) }

// Each calls fn for every item, in no particular order.
func (s *State) Each(fn func(batch, item string, st ItemState)) {
	for k, v := range s.items {
		fn(k.batch, k.item, v)
	}
}

// Apply folds one record into the state. A refunded item stays refunded
// whatever follows: a refund cannot be taken back by a later record.
func (s *State) Apply(r *Record) {
	k := itemKey{r.Batch, r.Item}
	st := s.items[k]
	if st.Status == StatusRefunded {
		return
	}
	switch r.Type {
	case TypeIntent:
		if r.Attempt > st.Attempt {
			st.Attempt = r.Attempt
			st.KeyBurned = false
		}
		if r.Attempt == st.Attempt && r.Time.After(st.LastIntent) {
			st.LastIntent = r.Time
		}
		st.Status = StatusInDoubt
		st.Amount = r.Amount
	case TypeRefunded:
		st.Status = StatusRefunded
		st.Amount = r.Amount
		st.Refund = r.Refund
		st.Code = ""
	case TypeFailed:
		st.Code = r.Code
		if r.Final {
			st.Status = StatusFailed
		} else {
			st.Status = StatusInDoubt
			if r.HTTPStatus >= 500 && r.HTTPStatus != 503 && r.Attempt == st.Attempt {
				st.KeyBurned = true
			}
		}
	case TypeCanceled:
		// An extra refund canceled by audit: the item's own refund, if any,
		// is recorded by its refunded record and unaffected.
		return
	}
	s.items[k] = st
}
