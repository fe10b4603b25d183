package journal

import (
	"hash/maphash"
	"time"

	"github.com/refundkit/refundkit/journal/arena"
)

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
// call NewState. A State is not safe for concurrent use.
//
// It holds millions of items in little memory: strings live in an
// append-only arena, batch names and error codes are interned, and the
// index is an open-addressing table of integers, so the garbage collector
// has no pointers to chase. Values that do not fit the compact form (a
// timestamp with a zone or a monotonic reading, an attempt beyond int32)
// are kept exactly on the side.
type State struct {
	seed  maphash.Seed
	table []uint64 // open addressing: hash<<32 | slot index+1; 0 is empty
	slots [][]slot // chunks of slotChunk, so growing never copies them
	n     uint32   // slots in use

	strs     arena.Arena
	batches  []string // interned batch names by id
	batchIDs map[string]uint32
	codes    []string // interned error codes by id; 0 is ""
	codeIDs  map[string]uint32

	lastBatch   string // the batch of the last lookup, and its id
	lastBatchID uint32

	times    map[uint32]time.Time // LastIntent of slots flagged timeSpilled
	attempts map[uint32]int       // Attempt of slots flagged attemptSpilled
}

// slot is one item's ItemState in compact form.
type slot struct {
	lastIntent int64 // UnixNano of a UTC LastIntent (flagTime)
	amount     int64
	item       arena.Ref
	refund     arena.Ref
	attempt    int32
	code       uint32
	batch      uint32
	status     Status
	flags      uint8
}

const (
	flagKeyBurned      uint8 = 1 << iota
	flagTime                 // LastIntent is lastIntent nanoseconds, UTC
	flagTimeSpilled          // LastIntent is in State.times
	flagAttemptSpilled       // Attempt is in State.attempts
)

const slotChunk = 1 << 16

// NewState returns an empty state.
func NewState() *State {
	return &State{
		seed:     maphash.MakeSeed(),
		table:    make([]uint64, 1024),
		batchIDs: make(map[string]uint32),
		codes:    []string{""},
		codeIDs:  map[string]uint32{"": 0},
	}
}

// Lookup returns the state of item in batch; ok is false if the journal
// holds nothing for it.
func (s *State) Lookup(batch, item string) (st ItemState, ok bool) {
	i, ok := s.find(batch, item)
	if !ok {
		return ItemState{}, false
	}
	return s.get(i), true
}

// Len is the number of items the state knows.
func (s *State) Len() int { return int(s.n) }

// Each calls fn for every item, in no particular order.
func (s *State) Each(fn func(batch, item string, st ItemState)) {
	for i := range s.n {
		sl := s.slot(i)
		fn(s.batches[sl.batch], s.strs.Get(sl.item), s.get(i))
	}
}

// Apply folds one record into the state. A refunded item stays refunded
// whatever follows: a refund cannot be taken back by a later record.
func (s *State) Apply(r *Record) {
	i, found := s.find(r.Batch, r.Item)
	var st ItemState
	if found {
		if s.slot(i).status == StatusRefunded {
			return
		}
		st = s.get(i)
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
	if !found {
		i = s.insert(r.Batch, r.Item)
	}
	s.put(i, st)
}

func (s *State) slot(i uint32) *slot { return &s.slots[i/slotChunk][i%slotChunk] }

// get expands slot i into an ItemState.
func (s *State) get(i uint32) ItemState {
	sl := s.slot(i)
	st := ItemState{
		Status:    sl.status,
		Attempt:   int(sl.attempt),
		KeyBurned: sl.flags&flagKeyBurned != 0,
		Amount:    sl.amount,
		Refund:    s.strs.Get(sl.refund),
		Code:      s.codes[sl.code],
	}
	if sl.flags&flagAttemptSpilled != 0 {
		st.Attempt = s.attempts[i]
	}
	switch {
	case sl.flags&flagTime != 0:
		st.LastIntent = time.Unix(0, sl.lastIntent).UTC()
	case sl.flags&flagTimeSpilled != 0:
		st.LastIntent = s.times[i]
	}
	return st
}

// put stores st in slot i, exactly: what the compact form cannot hold goes
// to the side maps.
func (s *State) put(i uint32, st ItemState) {
	sl := s.slot(i)
	if sl.flags&flagAttemptSpilled != 0 {
		delete(s.attempts, i)
	}
	if sl.flags&flagTimeSpilled != 0 {
		delete(s.times, i)
	}
	sl.flags = 0
	sl.status = st.Status
	sl.amount = st.Amount
	if st.KeyBurned {
		sl.flags |= flagKeyBurned
	}
	sl.attempt = int32(st.Attempt)
	if int(sl.attempt) != st.Attempt {
		if s.attempts == nil {
			s.attempts = make(map[uint32]int)
		}
		s.attempts[i] = st.Attempt
		sl.flags |= flagAttemptSpilled
	}
	if st.Refund != s.strs.Get(sl.refund) {
		sl.refund = s.strs.Add(st.Refund)
	}
	if st.Code != s.codes[sl.code] {
		sl.code = s.internCode(st.Code)
	}
	if st.LastIntent != (time.Time{}) {
		// Compact only when the round trip gives back the very same value
		// (UTC, no monotonic reading, within UnixNano's range).
		ns := st.LastIntent.UnixNano()
		if time.Unix(0, ns).UTC() == st.LastIntent {
			sl.lastIntent = ns
			sl.flags |= flagTime
		} else {
			if s.times == nil {
				s.times = make(map[uint32]time.Time)
			}
			s.times[i] = st.LastIntent
			sl.flags |= flagTimeSpilled
		}
	}
}

func (s *State) internCode(code string) uint32 {
	id, ok := s.codeIDs[code]
	if !ok {
		code = s.strs.Get(s.strs.Add(code))
		id = uint32(len(s.codes))
		s.codes = append(s.codes, code)
		s.codeIDs[code] = id
	}
	return id
}

// batchID is the id of an interned batch name.
func (s *State) batchID(batch string) (uint32, bool) {
	if batch == s.lastBatch && s.lastBatch != "" {
		return s.lastBatchID, true
	}
	id, ok := s.batchIDs[batch]
	if ok {
		s.lastBatch, s.lastBatchID = s.batches[id], id
	}
	return id, ok
}

func (s *State) hash(batchID uint32, item string) uint32 {
	h := maphash.String(s.seed, item) ^ (uint64(batchID) * 0x9e3779b97f4a7c15)
	return uint32(h ^ h>>32)
}

// find returns the slot of (batch, item).
func (s *State) find(batch, item string) (uint32, bool) {
	b, ok := s.batchID(batch)
	if !ok {
		return 0, false
	}
	h := s.hash(b, item)
	mask := uint32(len(s.table) - 1)
	for pos := h & mask; ; pos = (pos + 1) & mask {
		e := s.table[pos]
		if e == 0 {
			return 0, false
		}
		if uint32(e>>32) == h {
			i := uint32(e) - 1
			sl := s.slot(i)
			if sl.batch == b && s.strs.Get(sl.item) == item {
				return i, true
			}
		}
	}
}

// insert adds a zero slot for (batch, item), which must not exist yet.
func (s *State) insert(batch, item string) uint32 {
	b, ok := s.batchID(batch)
	if !ok {
		batch = s.strs.Get(s.strs.Add(batch))
		b = uint32(len(s.batches))
		s.batches = append(s.batches, batch)
		s.batchIDs[batch] = b
	}
	if (s.n+1)*2 > uint32(len(s.table)) {
		s.grow()
	}
	i := s.n
	if i%slotChunk == 0 {
		s.slots = append(s.slots, make([]slot, slotChunk))
	}
	s.n++
	*s.slot(i) = slot{item: s.strs.Add(item), batch: b}
	s.place(s.hash(b, item), i)
	return i
}

func (s *State) place(h, i uint32) {
	mask := uint32(len(s.table) - 1)
	pos := h & mask
	for s.table[pos] != 0 {
		pos = (pos + 1) & mask
	}
	s.table[pos] = uint64(h)<<32 | uint64(i+1)
}

// grow doubles the table; the stored hashes spare rehashing the keys.
func (s *State) grow() {
	old := s.table
	s.table = make([]uint64, 2*len(old))
	for _, e := range old {
		if e != 0 {
			s.place(uint32(e>>32), uint32(e)-1)
		}
	}
}
