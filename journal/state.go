package journal

import (
	"hash/maphash"

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
	// KeyBurned: Stripe saved an error answer (its own 500) under the current
	// attempt's key and will replay it forever, so a retry needs a new key.
	KeyBurned bool
	// Amount is the refunded amount (StatusRefunded) or the last requested one.
	Amount   int64
	Refund   string // refund id when StatusRefunded
	Currency string // the refund's currency when StatusRefunded
	Code     string // Stripe's error code of the last failure

	// What the journal binds the item to: the charge or payment intent its
	// first record named, and what its last intent asked for. A plan item
	// that says otherwise was edited after the journal was written.
	Charge, PaymentIntent string
	Sent                  bool   // an intent was journaled: SentAmount and SentCurrency are set
	SentAmount            int64  // requested amount of the last intent (0: the full remaining amount)
	SentCurrency          string // currency of the last intent, "" when the plan gave none
}

// State folds records into per-item state. The zero value is not usable;
// call NewState. Apply must not run concurrently with anything else;
// Lookup, Len and Each only read, and may run concurrently with each other.
//
// It holds millions of items in little memory: strings live in an
// append-only arena, batch names, error codes and currencies are interned,
// and the index is an open-addressing table of integers, so the garbage
// collector has no pointers to chase. Values that do not fit the compact
// form (an attempt beyond int32, a currency id beyond uint16) are kept
// exactly on the side.
type State struct {
	seed  maphash.Seed
	table []uint64 // open addressing: hash<<32 | slot index+1; 0 is empty
	slots [][]slot // chunks of slotChunk, so growing never copies them
	n     uint32   // slots in use

	strs       arena.Arena
	batches    []string // interned batch names by id
	batchIDs   map[string]uint32
	codes      []string // interned error codes and currencies by id; 0 is ""
	codeIDs    map[string]uint32
	lastBatch  string // the batch Apply saw last, and its id: journals come in runs of one batch
	lastBatchN uint32

	attempts    map[uint32]int    // Attempt of slots flagged attemptSpilled
	currencies  map[uint32]string // SentCurrency of slots flagged currencySpilled
	sentAmounts map[uint32]int64  // SentAmount of slots flagged sentSpilled
}

// slot is one item's ItemState in compact form.
type slot struct {
	amount   int64
	item     arena.Ref
	refund   arena.Ref
	target   arena.Ref // the charge, or the payment intent (flagIntent)
	attempt  int32
	code     uint32 // Code; once refunded (Code is then ""), Currency
	batch    uint32
	currency uint16 // id in codes, unless flagCurrencySpilled
	status   Status
	flags    uint8
}

const (
	flagKeyBurned       uint8 = 1 << iota
	flagAttemptSpilled        // Attempt is in State.attempts
	flagIntent                // target is a payment intent, not a charge
	flagSent                  // an intent was journaled
	flagCurrencySpilled       // SentCurrency is in State.currencies
	flagSentFull              // SentAmount is 0 (the full remaining amount)
	flagSentSpilled           // SentAmount is in State.sentAmounts; else it is amount
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
	if r.Type == TypeCanceled {
		// An extra refund canceled by audit: the item's own refund, if any,
		// is recorded by its refunded record and unaffected.
		return
	}
	st = Next(st, r)
	if !found {
		i = s.insert(r.Batch, r.Item)
	}
	s.put(i, st)
}

// Next is the state of an item after record r, given its state st before
// (the zero ItemState for an item the journal did not hold). It is the one
// definition of what a record means for its item; Apply stores its result.
func Next(st ItemState, r *Record) ItemState {
	if st.Status == StatusRefunded || r.Type == TypeCanceled {
		return st
	}
	if st.Charge == "" && st.PaymentIntent == "" {
		st.Charge, st.PaymentIntent = r.Charge, r.PaymentIntent
	}
	switch r.Type {
	case TypeIntent:
		if r.Attempt > st.Attempt {
			st.Attempt = r.Attempt
			st.KeyBurned = false
		}
		st.Status = StatusInDoubt
		if r.Attempt == st.Attempt {
			// An older attempt's intent later in the file (merged journals,
			// a clock stepped back) says nothing new about what is sent.
			st.Amount = r.Amount
			st.Sent, st.SentAmount, st.SentCurrency = true, r.Amount, r.Currency
		}
	case TypeRefunded:
		st.Status = StatusRefunded
		st.Amount = r.Amount
		st.Refund = r.Refund
		st.Currency = r.Currency
		st.Code = ""
		st.KeyBurned = false // no key is used for it again
	case TypeFailed:
		st.Code = r.Code
		if r.Final {
			st.Status = StatusFailed
			st.KeyBurned = false
		} else {
			st.Status = StatusInDoubt
			// Only Stripe's own 500 is an answer saved under the key. A
			// gateway's 502 or 504 is no answer: the refund may still be
			// under way, and only the same key keeps a retry from making a
			// second one.
			if r.HTTPStatus == 500 && r.Attempt == st.Attempt {
				st.KeyBurned = true
			}
		}
	}
	return st
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
		Sent:      sl.flags&flagSent != 0,
	}
	// What an intent asked is what was refunded, or the full amount, but
	// for the odd item: one field serves, and the odd ones go to a map.
	switch {
	case sl.flags&flagSentSpilled != 0:
		st.SentAmount = s.sentAmounts[i]
	case sl.flags&flagSentFull == 0 && st.Sent:
		st.SentAmount = sl.amount
	}
	if sl.flags&flagAttemptSpilled != 0 {
		st.Attempt = s.attempts[i]
	}
	if st.Status == StatusRefunded {
		st.Code, st.Currency = "", st.Code
	}
	if sl.flags&flagIntent != 0 {
		st.PaymentIntent = s.strs.Get(sl.target)
	} else {
		st.Charge = s.strs.Get(sl.target)
	}
	if sl.flags&flagCurrencySpilled != 0 {
		st.SentCurrency = s.currencies[i]
	} else {
		st.SentCurrency = s.codes[sl.currency]
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
	if sl.flags&flagCurrencySpilled != 0 {
		delete(s.currencies, i)
	}
	if sl.flags&flagSentSpilled != 0 {
		delete(s.sentAmounts, i)
	}
	sl.flags = 0
	sl.status = st.Status
	sl.amount = st.Amount
	switch {
	case st.SentAmount == 0:
		sl.flags |= flagSentFull
	case st.SentAmount != st.Amount:
		if s.sentAmounts == nil {
			s.sentAmounts = make(map[uint32]int64)
		}
		s.sentAmounts[i] = st.SentAmount
		sl.flags |= flagSentSpilled
	}
	if st.KeyBurned {
		sl.flags |= flagKeyBurned
	}
	if st.Sent {
		sl.flags |= flagSent
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
	text := st.Code
	if st.Status == StatusRefunded {
		text = st.Currency // a refunded item has no error code
	}
	if text != s.codes[sl.code] {
		sl.code = s.internCode(text)
	}
	target := st.Charge
	if target == "" && st.PaymentIntent != "" {
		target = st.PaymentIntent
		sl.flags |= flagIntent
	}
	if target != s.strs.Get(sl.target) {
		sl.target = s.strs.Add(target)
	}
	var cur uint32
	if st.SentCurrency != "" {
		cur = s.internCode(st.SentCurrency)
	}
	sl.currency = uint16(cur)
	if uint32(sl.currency) != cur {
		if s.currencies == nil {
			s.currencies = make(map[uint32]string)
		}
		s.currencies[i] = st.SentCurrency
		sl.flags |= flagCurrencySpilled
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

// batchID is the id of an interned batch name. It only reads, so that
// lookups may run concurrently.
func (s *State) batchID(batch string) (uint32, bool) {
	if batch == s.lastBatch && batch != "" {
		return s.lastBatchN, true
	}
	id, ok := s.batchIDs[batch]
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
	s.lastBatch, s.lastBatchN = s.batches[b], b
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
