package audit

import (
	"fmt"
	"hash/maphash"
	"strings"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/journal/arena"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/money"
)

// itemStatus is where an item stands by its latest record that is not a
// refund (a refund is recorded by flagRefunded and wins over it).
type itemStatus uint8

const (
	statusUnknown itemStatus = iota // no record: a plan item only
	statusInDoubt                   // an intent or a non-final failure last
	statusFailed                    // a final failure last
)

// Flags of an item slot.
const (
	flagInPlan       uint16 = 1 << iota
	flagInJournal           // at least one record names the item
	flagRefunded            // a refunded record names the item
	flagFinalFailure        // a final failure record names the item, and no refund record follows it
	flagIntent              // the target is a payment intent, not a charge
	flagGroupHead           // first item of its (batch, target) group
	flagExtras              // more than one refund id: see state.extras
	flagConflict            // see state.conflicts
	flagRequested           // the plan or an intent says what was asked (reqAmount: 0 is a full refund)
	// flagAllowed: refunded after refund held it for a refund made
	// elsewhere on its charge: a rerun with --allow-refunded-charges.
	flagAllowed
	// flagLive: a journal that a running refund holds names the item, so
	// it may be in flight (see Auditor.AddHeldJournal).
	flagLive
)

// itemSlot is one item in compact form: no pointers, so a million of them
// cost the garbage collector nothing to scan.
type itemSlot struct {
	amount      int64 // amount of the first refund journaled
	reqAmount   int64 // requested amount: the plan's, else the last intent's (0: full)
	item        arena.Ref
	target      arena.Ref // charge or payment intent
	refund      arena.Ref // first refund id journaled
	batch       uint32
	next        uint32 // 1 + index of the next item of the same group; 0: none
	code        uint32 // interned Stripe code of the last failure
	attempt     int32
	currency    uint16 // interned currency of the first refund
	reqCurrency uint16 // interned currency of the plan or intent
	status      itemStatus
	flags       uint16
}

// extraRefund is a second (or later) refund id journaled for one item.
type extraRefund struct {
	id       string
	amount   int64
	currency string
	attempt  int
}

// failure is the last final failure of an item, for its finding.
type failure struct {
	message    string
	httpStatus int
}

// state folds plan items and journal records into per-item state, keeping
// what audit needs that journal.State folds away: every refund id of an
// item, whether a final failure and a refund were both journaled, and which
// items share a charge.
type state struct {
	seed  maphash.Seed
	table []uint64 // open addressing: hash<<32 | slot index+1; 0 is empty
	slots [][]itemSlot
	n     uint32

	groups []uint64 // (batch, target) -> hash<<32 | index+1 of its first item
	ngroup uint32

	strs       arena.Arena
	batches    interner
	codes      interner
	currencies interner

	last      uint32 // slot of the last record applied, a cache for runs of records of one item
	lastValid bool
	touched   uint64 // keeps applyRun's loads from being optimized away

	extras    map[uint32][]extraRefund
	conflicts map[uint32][]string
	failures  map[uint32]failure
	// mismatches are the messages of answer_mismatch failures: the item
	// is in doubt, and the message names the refund Stripe answered with.
	mismatches map[uint32]string
	canceled   map[string]bool // refund ids journaled as canceled
	planned    bool            // a plan was added
	live       bool            // the records applied are of a journal a running refund holds
	// grouped: items are linked into groups as their targets become known.
	// Linking costs a table probe per item, and a journal read without a
	// plan or Stripe needs no groups, so it starts with groupItems.
	grouped bool
}

const slotChunk = 1 << 16

func newState() *state {
	return &state{
		seed:       maphash.MakeSeed(),
		table:      make([]uint64, 1024),
		groups:     make([]uint64, 1024),
		batches:    newInterner(),
		codes:      newInterner(),
		currencies: newInterner(),
		extras:     map[uint32][]extraRefund{},
		conflicts:  map[uint32][]string{},
		failures:   map[uint32]failure{},
		mismatches: map[uint32]string{},
		canceled:   map[string]bool{},
	}
}

func (s *state) slot(i uint32) *itemSlot { return &s.slots[i/slotChunk][i%slotChunk] }

func (s *state) str(r arena.Ref) string { return s.strs.Get(r) }

// addPlanItem records a planned item; false if the plan names it twice.
func (s *state) addPlanItem(batch, item, charge, intent string, amount int64, currency string, at origin) bool {
	i := s.upsertHashed(batch, item, s.hashItem(item))
	sl := s.slot(i)
	if sl.flags&flagInPlan != 0 {
		return false
	}
	sl.flags |= flagInPlan | flagRequested
	sl.reqAmount = amount
	sl.reqCurrency = uint16(s.currencies.id(currency))
	s.setTarget(i, sl, charge, intent, at)
	return true
}

// hashItem hashes an item name; it only reads the seed, so the scan's
// workers call it concurrently.
func (s *state) hashItem(item string) uint64 { return maphash.String(s.seed, item) }

// applyRun folds records read from consecutive lines into the state.
func (s *state) applyRun(recs []*journal.Record, hashes []uint64, name string, first int) {
	// Touch the table entries of the run's items before folding: the loads
	// are independent, so the CPU overlaps their cache misses instead of
	// stalling on each one in turn while it folds.
	// Guessing each record's batch as the last one seen spares a lookup;
	// a wrong guess only wastes a load.
	mask := uint32(len(s.table) - 1)
	batch := s.batches.last
	var touched uint64
	for _, h := range hashes[:len(recs)] {
		touched += s.table[mix(h, batch)&mask]
	}
	s.touched = touched
	for k, r := range recs {
		s.apply(r, hashes[k], origin{name, first + k})
	}
}

// apply folds one journal record, whose item hashes to ih, into the state.
func (s *state) apply(r *journal.Record, ih uint64, at origin) {
	if r.Type == journal.TypeCanceled {
		s.canceled[strings.Clone(r.Refund)] = true
		return
	}
	i := s.upsertHashed(r.Batch, r.Item, ih)
	sl := s.slot(i)
	sl.flags |= flagInJournal
	if s.live {
		sl.flags |= flagLive
	}
	s.setTarget(i, sl, r.Charge, r.PaymentIntent, at)
	if int64(r.Attempt) > int64(sl.attempt) && r.Attempt <= 1<<31-1 {
		sl.attempt = int32(r.Attempt)
	}
	refunded := sl.flags&flagRefunded != 0
	switch r.Type {
	case journal.TypeIntent:
		if sl.flags&flagInPlan == 0 {
			sl.reqAmount = r.Amount
			sl.reqCurrency = uint16(s.currencies.id(r.Currency))
		}
		sl.flags |= flagRequested
		sl.status = statusInDoubt
	case journal.TypeRefunded:
		if sl.flags&flagFinalFailure != 0 {
			// A refund journaled after a final failure supersedes it: the
			// item was taken up again (--allow-refunded-charges) or its
			// refund was found at Stripe (backfill).
			sl.flags &^= flagFinalFailure
			if heldCode(s.codes.name(sl.code)) {
				sl.flags |= flagAllowed
			}
		}
		switch {
		case !refunded:
			sl.flags |= flagRefunded
			sl.refund = s.strs.Add(r.Refund)
			sl.amount = r.Amount
			sl.currency = uint16(s.currencies.id(r.Currency))
		case s.str(sl.refund) == r.Refund:
			if r.Amount != sl.amount || r.Currency != s.currencies.name(uint32(sl.currency)) {
				s.conflict(i, sl, fmt.Sprintf("%s: refund %s journaled again with amount %s, first with %s",
					at, r.Refund, money.Format(r.Amount, r.Currency), money.Format(sl.amount, s.currencies.name(uint32(sl.currency)))))
			}
		default:
			for _, x := range s.extras[i] {
				if x.id == r.Refund {
					return
				}
			}
			sl.flags |= flagExtras
			s.extras[i] = append(s.extras[i], extraRefund{id: strings.Clone(r.Refund), amount: r.Amount, currency: strings.Clone(r.Currency), attempt: r.Attempt})
		}
	case journal.TypeFailed:
		sl.code = s.codes.id(r.Code)
		if r.Final {
			sl.flags |= flagFinalFailure
			sl.status = statusFailed
			s.failures[i] = failure{message: strings.Clone(r.Message), httpStatus: r.HTTPStatus}
		} else {
			sl.status = statusInDoubt
			if r.Code == refund.CodeAnswerMismatch {
				s.mismatches[i] = strings.Clone(r.Message)
			}
		}
	}
}

// setTarget records the charge or payment intent of an item and links the
// item into its group; a different target than before is a conflict.
func (s *state) setTarget(i uint32, sl *itemSlot, charge, intent string, at origin) {
	t, isIntent := charge, false
	if t == "" {
		t, isIntent = intent, intent != ""
	}
	if t == "" {
		return
	}
	if sl.target == 0 {
		sl.target = s.strs.Add(t)
		if isIntent {
			sl.flags |= flagIntent
		}
		if s.grouped {
			s.link(i, sl)
		}
		return
	}
	if old := s.str(sl.target); old != t {
		s.conflict(i, sl, fmt.Sprintf("%s: names %s, earlier lines name %s", at, t, old))
	}
}

// heldCode reports the codes of a final failure that refund journals when
// it holds an item, before any call, for a refund made elsewhere on its
// charge.
func heldCode(code string) bool {
	return code == refund.CodeRefundedByOtherBatch || code == refund.CodeRefundedOutside
}

// origin is where a plan item or record was read, for messages.
type origin struct {
	name string
	line int
}

func (o origin) String() string { return fmt.Sprintf("%s:%d", o.name, o.line) }

func (s *state) conflict(i uint32, sl *itemSlot, reason string) {
	sl.flags |= flagConflict
	s.conflicts[i] = append(s.conflicts[i], reason)
}

// upsertHashed returns the slot of (batch, item), adding it if new; ih is
// hashItem(item).
func (s *state) upsertHashed(batch, item string, ih uint64) uint32 {
	if s.lastValid {
		sl := s.slot(s.last)
		if s.str(sl.item) == item && s.batches.name(sl.batch) == batch {
			return s.last
		}
	}
	b := s.batches.id(batch)
	h := mix(ih, b)
	mask := uint32(len(s.table) - 1)
	for pos := h & mask; ; pos = (pos + 1) & mask {
		e := s.table[pos]
		if e == 0 {
			break
		}
		if uint32(e>>32) == h {
			i := uint32(e) - 1
			sl := s.slot(i)
			if sl.batch == b && s.str(sl.item) == item {
				s.last, s.lastValid = i, true
				return i
			}
		}
	}
	if (s.n+1)*2 > uint32(len(s.table)) {
		s.table = grow(s.table)
	}
	i := s.n
	if i%slotChunk == 0 {
		s.slots = append(s.slots, make([]itemSlot, slotChunk))
	}
	s.n++
	*s.slot(i) = itemSlot{item: s.strs.Add(item), batch: b}
	place(s.table, h, i)
	s.last, s.lastValid = i, true
	return i
}

// reserve sizes the item table for about n more items, sparing the rehashes
// of growing it one doubling at a time.
func (s *state) reserve(n int) {
	want := uint64(s.n) + uint64(n)
	if want > 1<<30 {
		want = 1 << 30
	}
	size := uint64(len(s.table))
	for size < 2*want {
		size *= 2
	}
	if size > uint64(len(s.table)) {
		table := make([]uint64, size)
		for _, e := range s.table {
			if e != 0 {
				place(table, uint32(e>>32), uint32(e)-1)
			}
		}
		s.table = table
	}
}

// groupItems links every item with a target into its group, and every item
// added from now on as its target becomes known.
func (s *state) groupItems() {
	if s.grouped {
		return
	}
	s.grouped = true
	for i := range s.n {
		if sl := s.slot(i); sl.target != 0 {
			s.link(i, sl)
		}
	}
}

// find returns the slot of (batch, item) without adding it.
func (s *state) find(batch, item string) (uint32, bool) {
	b, ok := s.batches.ids[batch]
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
			if sl := s.slot(i); sl.batch == b && s.str(sl.item) == item {
				return i, true
			}
		}
	}
}

// link adds item i to the group of its batch and target.
func (s *state) link(i uint32, sl *itemSlot) {
	t := s.str(sl.target)
	h := s.hash(sl.batch, t)
	mask := uint32(len(s.groups) - 1)
	for pos := h & mask; ; pos = (pos + 1) & mask {
		e := s.groups[pos]
		if e == 0 {
			break
		}
		if uint32(e>>32) == h {
			head := s.slot(uint32(e) - 1)
			if head.batch == sl.batch && s.str(head.target) == t {
				sl.next, head.next = head.next, i+1
				return
			}
		}
	}
	if (s.ngroup+1)*2 > uint32(len(s.groups)) {
		s.groups = grow(s.groups)
	}
	s.ngroup++
	sl.flags |= flagGroupHead
	place(s.groups, h, i)
}

// members returns the items of the group headed by head, in the order they
// were first seen.
func (s *state) members(head uint32) []uint32 {
	out := []uint32{head}
	for n := s.slot(head).next; n != 0; n = s.slot(n - 1).next {
		out = append(out, n-1)
	}
	// Linked newest first after the head: put them back in order.
	for a, b := 1, len(out)-1; a < b; a, b = a+1, b-1 {
		out[a], out[b] = out[b], out[a]
	}
	return out
}

func (s *state) hash(batch uint32, str string) uint32 { return mix(s.hashItem(str), batch) }

// mix combines a string's hash with a batch id into a table hash.
func mix(h uint64, batch uint32) uint32 {
	h ^= uint64(batch) * 0x9e3779b97f4a7c15
	return uint32(h ^ h>>32)
}

func place(table []uint64, h, i uint32) {
	mask := uint32(len(table) - 1)
	pos := h & mask
	for table[pos] != 0 {
		pos = (pos + 1) & mask
	}
	table[pos] = uint64(h)<<32 | uint64(i+1)
}

// grow doubles a table; the stored hashes spare rehashing the keys.
func grow(old []uint64) []uint64 {
	table := make([]uint64, 2*len(old))
	for _, e := range old {
		if e != 0 {
			place(table, uint32(e>>32), uint32(e)-1)
		}
	}
	return table
}

// interner numbers the few distinct batch names, codes and currencies; id 0
// is the empty string.
type interner struct {
	names []string
	ids   map[string]uint32
	last  uint32
}

func newInterner() interner {
	return interner{names: []string{""}, ids: map[string]uint32{"": 0}}
}

func (in *interner) id(name string) uint32 {
	if in.names[in.last] == name {
		return in.last
	}
	id, ok := in.ids[name]
	if !ok {
		name = strings.Clone(name)
		id = uint32(len(in.names))
		in.names = append(in.names, name)
		in.ids[name] = id
	}
	in.last = id
	return id
}

func (in *interner) name(id uint32) string { return in.names[id] }
