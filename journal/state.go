package journal

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/refundkit/refundkit/journal/arena"
)

// Status is where an item stands according to a journal.
type Status uint8

const (
	// StatusUnknown: the journal holds nothing for the item.
	StatusUnknown Status = iota
	// StatusInDoubt: an intent with no final outcome; look the refund up
	// before any new call.
	StatusInDoubt
	// StatusRefunded: a refund exists for the item. Nothing more is sent.
	StatusRefunded
	// StatusFailed: Stripe refused the refund for good (Final failure).
	StatusFailed
	// StatusPending: the provider accepted a refund and has not finished it;
	// a later run asks how it ended.
	StatusPending
)

func (s Status) String() string {
	if names := [...]string{"unknown", "in_doubt", "refunded", "failed", "pending"}; int(s) < len(names) {
		return names[s]
	}
	return "unknown"
}

// ItemState is what a journal says about one item of one batch.
type ItemState struct {
	Status Status
	// Attempt is the highest attempt journaled (its intent's Key).
	Attempt int
	// KeyBurned: the provider saved an error answer (its own 500) under the
	// attempt's key, so a retry needs a new key.
	KeyBurned bool
	// Amount is the refunded amount (StatusRefunded) or the last requested one.
	Amount   int64
	Refund   string // refund id when StatusRefunded or StatusPending
	Currency string // the refund's currency when StatusRefunded
	Code     string // Stripe's error code of the last failure

	// The payment the item's first record named. A plan item that says
	// otherwise was edited after the journal was written.
	Charge, PaymentIntent, Capture, PSPReference string
	// Rebound: a later record names another payment of the same kind:
	// two plans merged into one journal (refund.CheckBinding refuses it).
	Rebound      bool
	Sent         bool   // an intent was journaled: SentAmount and SentCurrency are set
	SentAmount   int64  // requested amount of the last intent (0: the full remaining amount)
	SentCurrency string // currency of the last intent, "" when the plan gave none
	// Extras are the live refunds beyond the credited one (ExtraIDs): made
	// twice, reported until a journaled cancel takes each back.
	Extras string
	// Contradiction: the refund journaled again with another amount or
	// currency (refund.CheckBinding refuses to skip it; audit reports it).
	Contradiction string
	// SentAt is when the attempt's first intent was journaled (Unix seconds,
	// in doubt only): the key's age, for providers that expire keys.
	SentAt int64
}

// State folds records into per-item state (NewState). Apply must run
// alone; Lookup, Len and Each may run concurrently with each other.
// An item is a 40-byte pointer-free slot in an Index; what the compact
// form cannot hold is kept exactly in side maps.
type State struct {
	idx   *Index[slot]
	codes Interner // error codes and currencies

	// What a slot cannot hold, by item id; the slot's flags say which.
	attempts    map[uint32]int    // Attempt (flagAttemptSpilled)
	extras      map[uint32]string // Extras, for the few items that have any
	contras     map[uint32]string // Contradiction, for the few items that have one
	texts       map[uint32]string // Code, or Currency once refunded (flagCodeSpilled)
	currencies  map[uint32]string // SentCurrency (flagCurrencySpilled)
	sentAmounts map[uint32]int64  // SentAmount (flagSentSpilled)

	near     atomic.Uint32 // the id after the one Lookup found last: its guess
	touched  uint32        // keeps applyRun's loads from being optimized away
	holders  holders       // items by refund id, built by the first Holder
	twice    twice         // refund ids credited more than once, for SharedRefund
	payments payments      // items by target, built by the first OnPayment
}

// slot is one item's ItemState in compact form.
type slot struct {
	amount   int64
	refund   arena.Ref
	target   arena.Ref // the charge, payment intent, capture or psp_reference (kind)
	sentAt   int64
	attempt  int8
	kind     uint8  // of target: its index in payments
	code     uint16 // id in codes of Code; once refunded (Code is then ""), of Currency
	currency uint16 // id in codes of SentCurrency
	status   Status
	flags    uint8
}

const (
	flagKeyBurned       uint8 = 1 << iota
	flagAttemptSpilled        // Attempt is in State.attempts
	flagSent                  // an intent was journaled
	flagCurrencySpilled       // SentCurrency is in State.currencies
	flagSentFull              // SentAmount is 0 (the full remaining amount)
	flagSentSpilled           // SentAmount is in State.sentAmounts; else it is amount
	flagCodeSpilled           // Code (Currency once refunded) is in State.texts
	flagRebound               // Rebound
)

// NewState returns an empty state.
func NewState() *State { return &State{idx: NewIndex[slot]()} }

// Lookup returns the state of item in batch; false if none.
func (s *State) Lookup(batch, item string) (st ItemState, ok bool) {
	// A resumed run asks in plan order: the item after the last one found
	// comes first.
	i, ok := s.idx.FindNear(batch, item, s.near.Load())
	if !ok {
		return ItemState{}, false
	}
	s.near.Store(i + 1)
	return s.get(i), true
}

// Len is the number of items the state knows.
func (s *State) Len() int { return s.idx.Len() }

// Each calls fn for every item, in the order the journal first named them.
func (s *State) Each(fn func(batch, item string, st ItemState)) {
	for i := range uint32(s.idx.Len()) {
		batch, item := s.idx.Key(i)
		fn(batch, item, s.get(i))
	}
}

// Apply folds one record into the state (Next); a record that changes
// nothing makes no item.
func (s *State) Apply(r *Record) { s.applyHashed(r, s.idx.HashItem(r.Item)) }

// applyRun applies recs a span at a time, touching the table slots of a
// span first so that their cache misses overlap.
func (s *State) applyRun(recs []Record, hashes []uint64) {
	for from := 0; from < len(recs); from += TouchSpan {
		to := min(from+TouchSpan, len(recs))
		s.touched += s.idx.TouchAll(hashes[from:to])
		for i := from; i < to; i++ {
			s.applyHashed(&recs[i], hashes[i])
		}
	}
}

func (s *State) applyHashed(r *Record, ih uint64) {
	b := s.idx.batches.ID(r.Batch)
	h := mix(ih, b)
	i, found := s.idx.find(b, r.Item, h)
	var st ItemState
	if found {
		st = s.get(i)
	}
	next := Next(st, r)
	if next == st {
		return
	}
	if !found {
		i = s.idx.insert(b, r.Item, h)
	}
	s.put(i, &st, &next)
}

// Next is the state of an item after record r, given its state st before:
// the one definition of what a record means for its item.
func Next(st ItemState, r *Record) ItemState {
	if r.Type != TypeCanceled && rebinds(&st, r) {
		st.Rebound = true
	}
	if r.Type == TypeRefunded && st.Contradiction == "" && st.Credited() && r.Refund == st.Refund {
		if why := differs(&st, r); why != "" {
			st.Contradiction = why
		}
	}
	if hasRefund(st.Status) && r.Refund != "" && r.Refund != st.Refund {
		switch {
		case r.Type == TypeRefunded && !DeadStatus(r.Status):
			st.Extras = withID(st.Extras, r.Refund) // a second refund for the item
		case r.Type == TypeCanceled || r.Type == TypeRefunded:
			st.Extras = withoutID(st.Extras, r.Refund) // an extra ended
		}
		return st
	}
	switch {
	case st.Status == StatusRefunded && undoes(&st, r):
		// Its own refund said again in a status that is not done: read on.
	case st.Status == StatusRefunded, r.Type == TypeCanceled:
		return st
	}
	if st.Status == StatusPending && !settles(r) {
		// The provider holds a refund under way: no intent or retry of
		// another run changes that, only how that refund ended.
		return st
	}
	if st.payments() == [4]string{} {
		st.Charge, st.PaymentIntent, st.Capture, st.PSPReference = r.Charge, r.PaymentIntent, r.Capture, r.PSPReference
	}
	switch r.Type {
	case TypeIntent:
		if r.Attempt > st.Attempt {
			st.Attempt = r.Attempt
			st.KeyBurned = false
			st.SentAt = 0
		}
		if r.Attempt == st.Attempt && st.SentAt == 0 {
			st.SentAt = r.Time.Unix()
		}
		st.Status = StatusInDoubt
		if r.Attempt == st.Attempt {
			// An older attempt's intent later in the file (merged journals,
			// a clock stepped back) says nothing new about what is sent.
			st.Amount = r.Amount
			st.Sent, st.SentAmount, st.SentCurrency = true, r.Amount, r.Currency
		}
	case TypeRefunded:
		if OutcomeOf(r.Status) == OutcomeUnknown {
			// A status not on the list: in doubt with its refund kept, settled
			// only by the provider's word on that refund.
			if st.Unsure() && st.Refund != r.Refund {
				st.Extras = withID(st.Extras, st.Refund) // it may hold money too
			}
			st.Status, st.Code, st.Currency = StatusInDoubt, CodeStatusUnknown, ""
			st.Refund, st.Amount = r.Refund, r.Amount
			st.KeyBurned = false
			break
		}
		if DeadStatus(r.Status) {
			// An older build journaled a failed or canceled refund as refunded.
			st.Status, st.Code, st.Currency = StatusFailed, "refund_"+r.Status, ""
			st.KeyBurned, st.SentAt = false, 0
			break
		}
		st.Status = StatusRefunded
		if Unfinished(r.Status) {
			st.Status = StatusPending
		}
		st.Extras = withoutID(st.Extras, r.Refund) // credited now, no extra
		st.Amount = r.Amount
		st.Refund = r.Refund
		st.Currency = r.Currency
		st.Code = ""
		st.KeyBurned = false // no key is used for it again
		st.SentAt = 0
	case TypeFailed:
		st.Code = r.Code
		st.Currency = "" // a pending refund's, which failed
		if r.Final {
			st.Status = StatusFailed
			st.KeyBurned = false
			st.SentAt = 0
		} else {
			st.Status = StatusInDoubt
			// Only the provider's own 500 is an answer saved under the key; a
			// gateway's 502 or 504 may hide a refund under way.
			if r.HTTPStatus == HTTPStatusSaved && r.Attempt == st.Attempt {
				st.KeyBurned = true
			}
		}
	}
	return st
}

func (st *ItemState) ExtraIDs() []string {
	if st.Extras == "" {
		return nil
	}
	return strings.Split(st.Extras, idSep)
}

// idSep separates the ids of Extras: no refund id holds a NUL.
const idSep = "\x00"

func withID(ids, id string) string {
	switch {
	case ids == "":
		return id
	case slices.Contains(strings.Split(ids, idSep), id):
		return ids
	}
	return ids + idSep + id
}

func withoutID(ids, id string) string {
	if ids == "" {
		return ids
	}
	return strings.Join(slices.DeleteFunc(strings.Split(ids, idSep), func(x string) bool { return x == id }), idSep)
}

// rebinds reports a record naming another payment of the kind st is
// bound to; a record of the other kind (a backfill) says nothing.
func rebinds(st *ItemState, r *Record) bool {
	bound, named := st.payments(), r.payments()
	for k, p := range bound {
		if p != "" && named[k] != "" && named[k] != p {
			return true
		}
	}
	return false
}

// payments are an item's payment fields, in their order on disk; the
// first one set is its target.
func (st *ItemState) payments() [4]string {
	return [4]string{st.Charge, st.PaymentIntent, st.Capture, st.PSPReference}
}

// hasRefund: the statuses whose Currency is set and Code is not.
func hasRefund(s Status) bool { return s == StatusRefunded || s == StatusPending }

// differs says how refunded record r contradicts st's refund: another
// amount or currency. A field left out says nothing.
func differs(st *ItemState, r *Record) string {
	switch {
	case r.Amount != 0 && st.Amount != 0 && r.Amount != st.Amount:
		return fmt.Sprintf("refund %s is journaled with amount %d, and again with %d", r.Refund, st.Amount, r.Amount)
	case r.Currency != "" && st.Currency != "" && r.Currency != st.Currency:
		return fmt.Sprintf("refund %s is journaled in %s, and again in %s", r.Refund, st.Currency, r.Currency)
	}
	return ""
}

// undoes reports a record that takes back refunded item st's done: its
// refund again in a status not done, or a final failure naming it.
func undoes(st *ItemState, r *Record) bool {
	if r.Refund == "" || r.Refund != st.Refund {
		return false
	}
	return r.Type == TypeRefunded && !Done(r.Status) || r.Type == TypeFailed && r.Final
}

// Unsure reports an item in doubt because its refund is journaled in a
// status not on the list (CodeStatusUnknown).
func (st *ItemState) Unsure() bool {
	return st.Status == StatusInDoubt && st.Code == CodeStatusUnknown && st.Refund != ""
}

// Credited reports an item credited with st.Refund: refunded, pending,
// or Unsure. The one definition, for the engine too.
func (st *ItemState) Credited() bool { return hasRefund(st.Status) || st.Unsure() }

// settles reports whether r ends a pending refund.
func settles(r *Record) bool {
	return r.Type == TypeRefunded && !Unfinished(r.Status) || r.Type == TypeFailed && r.Final
}

func (s *State) slot(i uint32) *slot { return s.idx.Slot(i) }

func (s *State) get(i uint32) ItemState {
	sl := s.slot(i)
	strs := &s.idx.strs
	st := ItemState{
		Status:    sl.status,
		Attempt:   int(sl.attempt),
		KeyBurned: sl.flags&flagKeyBurned != 0,
		Rebound:   sl.flags&flagRebound != 0,
		Amount:    sl.amount,
		Refund:    strs.Get(sl.refund),
		Sent:      sl.flags&flagSent != 0,
		SentAt:    sl.sentAt,
		// What an intent asked is nearly always what was refunded or the full
		// amount: one field serves, the odd ones spill.
		SentCurrency: s.codes.Name(uint32(sl.currency)),
	}
	switch {
	case sl.flags&flagSentSpilled != 0:
		st.SentAmount = s.sentAmounts[i]
	case sl.flags&flagSentFull == 0 && st.Sent:
		st.SentAmount = sl.amount
	}
	if sl.flags&flagAttemptSpilled != 0 {
		st.Attempt = s.attempts[i]
	}
	st.Extras, st.Contradiction = s.extras[i], s.contras[i] // nil maps read as ""
	text := s.codes.Name(uint32(sl.code))
	if sl.flags&flagCodeSpilled != 0 {
		text = s.texts[i]
	}
	if hasRefund(st.Status) {
		st.Currency = text
	} else {
		st.Code = text
	}
	*[...]*string{&st.Charge, &st.PaymentIntent, &st.Capture, &st.PSPReference}[sl.kind] = strs.Get(sl.target)
	if sl.flags&flagCurrencySpilled != 0 {
		st.SentCurrency = s.currencies[i]
	}
	return st
}

// put stores st in slot i, which holds was; only what changed is written.
func (s *State) put(i uint32, was, st *ItemState) {
	sl := s.slot(i)
	strs := &s.idx.strs
	flags := sl.flags
	sl.status, sl.amount, sl.sentAt = st.Status, st.Amount, st.SentAt
	setFlag(&flags, flagRebound, st.Rebound)
	setFlag(&flags, flagKeyBurned, st.KeyBurned)
	setFlag(&flags, flagSent, st.Sent)
	setFlag(&flags, flagSentFull, st.SentAmount == 0)
	setFlag(&flags, flagSentSpilled, spill(&s.sentAmounts, i, st.SentAmount, st.SentAmount == 0 || st.SentAmount == st.Amount, flags&flagSentSpilled != 0))
	if st.Attempt != was.Attempt {
		sl.attempt = int8(st.Attempt)
		setFlag(&flags, flagAttemptSpilled, spill(&s.attempts, i, st.Attempt, int(sl.attempt) == st.Attempt, flags&flagAttemptSpilled != 0))
	}
	if st.Contradiction != was.Contradiction {
		spill(&s.contras, i, st.Contradiction, st.Contradiction == "", was.Contradiction != "")
	}
	if st.Extras != was.Extras {
		spill(&s.extras, i, st.Extras, st.Extras == "", was.Extras != "")
		for _, id := range st.ExtraIDs() {
			s.indexHolder(i, id)
		}
	}
	if st.Refund != was.Refund || st.Credited() && !was.Credited() {
		sl.refund = strs.Add(st.Refund)
		if st.Credited() {
			s.indexHolder(i, st.Refund)
		}
	}
	if text, before := codeOf(st), codeOf(was); text != before {
		code := s.codes.ID(text)
		sl.code = uint16(code)
		setFlag(&flags, flagCodeSpilled, spill(&s.texts, i, text, uint32(sl.code) == code, flags&flagCodeSpilled != 0))
	}
	if st.SentCurrency != was.SentCurrency {
		cur := s.codes.ID(st.SentCurrency)
		sl.currency = uint16(cur)
		setFlag(&flags, flagCurrencySpilled, spill(&s.currencies, i, st.SentCurrency, uint32(sl.currency) == cur, flags&flagCurrencySpilled != 0))
	}
	if p := st.payments(); p != was.payments() {
		kind := max(slices.IndexFunc(p[:], func(s string) bool { return s != "" }), 0)
		sl.target, sl.kind = s.addTarget(i, p[kind]), uint8(kind)
		if was.payments() == [4]string{} {
			s.indexPayment(i) // bound now, once
		}
	}
	sl.flags = flags
}

func codeOf(st *ItemState) string {
	if hasRefund(st.Status) {
		return st.Currency
	}
	return st.Code
}

func setFlag(flags *uint8, f uint8, on bool) {
	if on {
		*flags |= f
	} else {
		*flags &^= f
	}
}

// spill keeps v in m under i when the slot cannot hold it (!fits), drops
// an earlier spill (was), and reports whether v is in m.
func spill[V any](m *map[uint32]V, i uint32, v V, fits, was bool) bool {
	switch {
	case !fits:
		if *m == nil {
			*m = make(map[uint32]V)
		}
		(*m)[i] = v
	case was:
		delete(*m, i)
	}
	return !fits
}

// addTarget refers to the item's own name when target equals it (plans
// name items by their charge), so the name is kept once.
func (s *State) addTarget(i uint32, target string) arena.Ref {
	if _, item := s.idx.key(i); item == target {
		if ref, ok := s.idx.itemRef(i); ok {
			return ref
		}
	}
	return s.idx.strs.Add(target)
}
