package audit

import (
	"fmt"
	"slices"
	"strings"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/journal/arena"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/money"
)

// itemStatus is where an item stands by its latest record that is not a
// refund (flagRefunded wins over it).
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
	flagFinalFailure        // a final failure names the item, and no refund record follows it
	flagIntent              // the target is a payment intent, not a charge
	flagCapture             // the target is a capture (PayPal)
	flagPSPReference        // the target is a psp_reference (Adyen)
	flagPending             // its refund was journaled pending, no end of it since (state.pendingSince)
	flagGroupHead           // first item of its (batch, target) group
	flagExtras              // more than one refund id (state.extras)
	flagConflict            // state.conflicts
	flagRequested           // the plan or an intent says what was asked (reqAmount: 0 is a full refund)
	flagAllowed             // refunded after refund held it: a rerun with --allow-refunded-charges
	flagLive                // a journal a running refund holds names it: it may be in flight
)

// itemSlot is one item in compact form, its slot in the index: no
// pointers, so a million of them cost the garbage collector nothing.
type itemSlot struct {
	amount      int64     // amount of the first refund journaled
	reqAmount   int64     // requested amount: the plan's, else the last intent's (0: full)
	target      arena.Ref // charge, payment intent, capture or psp_reference (flags say which)
	refund      arena.Ref // first refund id journaled
	next        uint32    // 1 + id of the next item of the same group; 0: none
	code        uint32    // interned Stripe code of the last failure
	currency    uint32    // interned currency of the first refund
	reqCurrency uint32    // interned currency of the plan or intent
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

// state folds plan items and journal records into per-item state, keeping
// what journal.State folds away: every refund id of an item, a final
// failure beside a refund, and which items share a charge.
type state struct {
	idx *journal.Index[itemSlot] // the items and their slots; its arena holds their strings
	n   uint32                   // items: idx.Len()

	groups journal.IDTable // (batch, target) -> group id
	heads  []uint32        // by group id: the group's first item

	codes      journal.Interner
	currencies journal.Interner

	touched uint64 // keeps applyRun's loads from being optimized away

	extras       map[uint32][]extraRefund
	conflicts    map[uint32][]string
	failures     map[uint32]string // messages of the last final failures
	mismatches   map[uint32]string // messages of answer_mismatch failures
	pendingSince map[uint32]int64  // when a refund was journaled pending (flagPending), Unix seconds
	// sentAt is when the last attempt journaled for an item was first sent
	// (Unix seconds), sentAttempt which attempt: how old its key is.
	sentAt      map[uint32]int64
	sentAttempt map[uint32]int
	canceled    map[string]bool     // refund ids journaled as canceled
	planned     bool                // a plan was added
	live        bool                // the records applied are of a journal a running refund holds
	refundHash  func(string) uint64 // when set, hashes refund ids instead of the index (tests)
	// grouped: items are linked into groups as their targets become known
	// (from groupItems on: a journal read alone needs no groups).
	grouped bool
}

func newState() *state {
	return &state{
		idx:        journal.NewIndex[itemSlot](),
		extras:     map[uint32][]extraRefund{},
		conflicts:  map[uint32][]string{},
		failures:   map[uint32]string{},
		mismatches: map[uint32]string{},
		canceled:   map[string]bool{},

		pendingSince: map[uint32]int64{},
		sentAt:       map[uint32]int64{},
		sentAttempt:  map[uint32]int{},
	}
}

func (s *state) slot(i uint32) *itemSlot { return s.idx.Slot(i) }

func (s *state) str(r arena.Ref) string { return s.idx.Arena().Get(r) }

// addPlanItem records a planned item; false if the plan names it twice.
func (s *state) addPlanItem(batch, item string, p refund.Payment, amount int64, currency string, at origin) bool {
	i := s.upsert(batch, item, s.hashItem(item))
	sl := s.slot(i)
	if sl.flags&flagInPlan != 0 {
		return false
	}
	sl.flags |= flagInPlan | flagRequested
	sl.reqAmount = amount
	sl.reqCurrency = s.currencies.ID(currency)
	s.setTarget(i, sl, p, at)
	return true
}

// hashItem hashes an item name; it only reads the seed, so the scan's
// workers call it concurrently.
func (s *state) hashItem(item string) uint64 { return s.idx.HashItem(item) }

// applyRun folds records read from consecutive lines into the state.
func (s *state) applyRun(recs []*journal.Record, hashes []uint64, name string, first int) {
	// Touch the table slots of the run's items before folding: the loads
	// are independent, so their cache misses overlap.
	for from := 0; from < len(recs); from += journal.TouchSpan {
		to := min(from+journal.TouchSpan, len(recs))
		s.touched += uint64(s.idx.TouchAll(hashes[from:to]))
		for k := from; k < to; k++ {
			s.apply(recs[k], hashes[k], origin{name, first + k})
		}
	}
}

// apply folds one journal record, whose item hashes to ih, into the state.
func (s *state) apply(r *journal.Record, ih uint64, at origin) {
	if r.Type == journal.TypeRefunded && journal.DeadStatus(r.Status) {
		// No money moved: as the final failure refund now journals.
		x := *r
		x.Type, x.Final, x.Code = journal.TypeFailed, true, "refund_"+r.Status
		r = &x
	}
	if r.Type == journal.TypeRefunded && journal.OutcomeOf(r.Status) == journal.OutcomeUnknown {
		// Neither done nor failed: a finding, never a refund.
		x := *r
		x.Type, x.Code = journal.TypeFailed, journal.CodeStatusUnknown
		x.Message = fmt.Sprintf("%s: refund %s is journaled in status %q, which refundkit does not know: whether money moved cannot be told", at, r.Refund, r.Status)
		r = &x
	}
	if r.Type == journal.TypeCanceled {
		s.canceled[strings.Clone(r.Refund)] = true
		return
	}
	i := s.upsert(r.Batch, r.Item, ih)
	sl := s.slot(i)
	sl.flags |= flagInJournal
	if s.live {
		sl.flags |= flagLive
	}
	s.setTarget(i, sl, refund.Payment{Charge: r.Charge, PaymentIntent: r.PaymentIntent, Capture: r.Capture, PSPReference: r.PSPReference}, at)
	refunded := sl.flags&flagRefunded != 0
	switch r.Type {
	case journal.TypeIntent:
		if sl.flags&flagInPlan == 0 {
			sl.reqAmount = r.Amount
			sl.reqCurrency = s.currencies.ID(r.Currency)
		} else if sl.reqCurrency == 0 {
			sl.reqCurrency = s.currencies.ID(r.Currency) // the plan names none: what was sent
		}
		sl.flags |= flagRequested
		sl.status = statusInDoubt
		if s.sentAttempt[i] != r.Attempt {
			s.sentAttempt[i], s.sentAt[i] = r.Attempt, r.Time.Unix()
		}
	case journal.TypeRefunded:
		delete(s.sentAt, i)
		delete(s.sentAttempt, i)
		if sl.flags&flagFinalFailure != 0 {
			// A refund journaled after a final failure supersedes it
			// (--allow-refunded-charges, or backfill).
			sl.flags &^= flagFinalFailure
			if heldCode(s.codes.Name(sl.code)) {
				sl.flags |= flagAllowed
			}
		}
		if r.Amount <= 0 {
			s.conflict(i, sl, fmt.Sprintf("%s: refund %s journaled with amount %d, which no refund is", at, r.Refund, r.Amount))
		}
		switch {
		case !refunded:
			sl.flags |= flagRefunded
			sl.refund = s.idx.Arena().Add(r.Refund)
			sl.amount = r.Amount
			sl.currency = s.currencies.ID(r.Currency)
			if journal.Unfinished(r.Status) {
				sl.flags |= flagPending
				s.pendingSince[i] = r.Time.Unix()
			}
		case s.str(sl.refund) == r.Refund:
			switch {
			case sl.flags&flagPending == 0 && journal.Unfinished(r.Status):
				s.conflict(i, sl, fmt.Sprintf("%s: refund %s journaled done, then %s%s", at, r.Refund, r.Status, undone))
			case journal.Done(r.Status):
				s.redone(i, sl) // the provider's word again: done
			}
			if sl.flags&flagPending != 0 && !journal.Unfinished(r.Status) {
				sl.flags &^= flagPending // settled by a later run
				delete(s.pendingSince, i)
			}
			if first := s.currencies.Name(sl.currency); r.Amount != sl.amount || r.Currency != first {
				s.conflict(i, sl, fmt.Sprintf("%s: refund %s journaled again with amount %s, first with %s",
					at, r.Refund, money.Format(r.Amount, r.Currency), money.Format(sl.amount, first)))
			}
		default:
			if slices.ContainsFunc(s.extras[i], func(x extraRefund) bool { return x.id == r.Refund }) {
				return
			}
			sl.flags |= flagExtras
			s.extras[i] = append(s.extras[i], extraRefund{id: strings.Clone(r.Refund), amount: r.Amount, currency: strings.Clone(r.Currency), attempt: r.Attempt})
		}
	case journal.TypeFailed:
		sl.code = s.codes.ID(r.Code)
		if r.Final && sl.flags&flagPending != 0 && r.Refund == s.str(sl.refund) {
			// The pending refund ended failed or canceled: no money moved.
			sl.flags &^= flagPending | flagRefunded
			delete(s.pendingSince, i)
		}
		if r.Final {
			sl.flags |= flagFinalFailure
			sl.status = statusFailed
			s.failures[i] = strings.Clone(r.Message)
		} else {
			sl.status = statusInDoubt
			if r.Code == journal.CodeStatusUnknown && refunded && s.str(sl.refund) == r.Refund {
				s.conflict(i, sl, r.Message+", after it was journaled done"+undone)
			}
			if r.Code == refund.CodeAnswerMismatch || r.Code == journal.CodeStatusUnknown {
				s.mismatches[i] = strings.Clone(r.Message)
			}
		}
	}
}

// setTarget records the payment of an item and links the item into its
// group; a different target than before is a conflict.
func (s *state) setTarget(i uint32, sl *itemSlot, p refund.Payment, at origin) {
	t := p.ID()
	if t == "" {
		return
	}
	if sl.target == 0 {
		sl.target = s.idx.Arena().Add(t)
		switch {
		case p.Charge != "":
		case p.PaymentIntent != "":
			sl.flags |= flagIntent
		case p.Capture != "":
			sl.flags |= flagCapture
		default:
			sl.flags |= flagPSPReference
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

// paymentOf is target id as the payment of the kind flags say.
func paymentOf(id string, flags uint16) refund.Payment {
	switch {
	case flags&flagIntent != 0:
		return refund.Payment{PaymentIntent: id}
	case flags&flagCapture != 0:
		return refund.Payment{Capture: id}
	case flags&flagPSPReference != 0:
		return refund.Payment{PSPReference: id}
	}
	return refund.Payment{Charge: id}
}

// heldCode reports the codes refund journals when it holds an item, before
// any call, for a refund made elsewhere on its charge.
func heldCode(code string) bool {
	return code == refund.CodeRefundedByOtherBatch || code == refund.CodeRefundedOutside ||
		code == refund.CodeRefundedByOtherItem || code == refund.CodeRefundedUnattributed
}

// origin is where a plan item or record was read, for messages.
type origin struct {
	name string
	line int
}

func (o origin) String() string { return fmt.Sprintf("%s:%d", o.name, o.line) }

// undone ends the reason of a conflict that a later record of the refund
// as done takes back.
const undone = "; a later record of it as done settles it"

// redone drops the conflicts of item i that a done record takes back.
func (s *state) redone(i uint32, sl *itemSlot) {
	kept := slices.DeleteFunc(s.conflicts[i], func(r string) bool { return strings.HasSuffix(r, undone) })
	if len(kept) == 0 {
		delete(s.conflicts, i)
		sl.flags &^= flagConflict
		return
	}
	s.conflicts[i] = kept
}

func (s *state) conflict(i uint32, sl *itemSlot, reason string) {
	sl.flags |= flagConflict
	s.conflicts[i] = append(s.conflicts[i], reason)
}

// inSpans calls each for every item with a key, and its hash, touching t's
// slots a span at a time first so that the cache misses overlap.
func (s *state) inSpans(t *journal.IDTable, key func(*itemSlot) (string, bool), hash func(string) uint64, each func(i uint32, sl *itemSlot, h uint64)) uint64 {
	const span = 64
	var hashes [span]uint64
	var touched uint64
	for base := uint32(0); base < s.n; base += span {
		end := min(base+span, s.n)
		var keyed uint64 // bit k: item base+k has a key
		for i := base; i < end; i++ {
			if k, ok := key(s.slot(i)); ok {
				keyed |= 1 << (i - base)
				hashes[i-base] = hash(k)
				touched += uint64(t.Touch(hashes[i-base]))
			}
		}
		for i := base; i < end; i++ {
			if keyed&(1<<(i-base)) != 0 {
				each(i, s.slot(i), hashes[i-base])
			}
		}
	}
	return touched
}

// upsert returns the id of (batch, item), adding it if it is new; ih is
// hashItem(item).
func (s *state) upsert(batch, item string, ih uint64) uint32 {
	i, added := s.idx.AddHashed(batch, item, ih)
	if added {
		s.n++
	}
	return i
}

// groupItems links every item with a target into its group, and every
// item added from now on.
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

// link adds item i to the group of its batch and target.
func (s *state) link(i uint32, sl *itemSlot) {
	b, t := s.idx.BatchOf(i), s.str(sl.target)
	h := s.idx.HashIn(b, t)
	for g := range s.groups.Candidates(h) {
		head := s.heads[g]
		if hsl := s.slot(head); s.idx.BatchOf(head) == b && s.str(hsl.target) == t {
			sl.next, hsl.next = hsl.next, i+1
			return
		}
	}
	s.groups.Add(h, s.groupHash)
	s.heads = append(s.heads, i)
	sl.flags |= flagGroupHead
}

// groupHash is the table hash of group g, for the table to move it.
func (s *state) groupHash(g uint32) uint64 {
	head := s.heads[g]
	return s.idx.HashIn(s.idx.BatchOf(head), s.str(s.slot(head).target))
}

// members returns the items of the group headed by head, in the order they
// were first seen.
func (s *state) members(head uint32) []uint32 {
	out := []uint32{head}
	for n := s.slot(head).next; n != 0; n = s.slot(n - 1).next {
		out = append(out, n-1)
	}
	slices.Reverse(out[1:]) // linked newest first after the head
	return out
}
