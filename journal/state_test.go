package journal

import (
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/refundkit/refundkit/journal/arena"
)

// TestStateTransitions: what each record does to an item, from each state.
func TestStateTransitions(t *testing.T) {
	at := func(r *Record, d time.Duration) *Record { r.Time = t0.Add(d); return r }
	withAmount := func(r *Record, a int64) *Record { r.Amount = a; return r }
	withCharge := func(r *Record, ch, pi string) *Record { r.Charge, r.PaymentIntent = ch, pi; return r }
	withCurrency := func(r *Record, c string) *Record { r.Currency = c; return r }
	// sent is the state an intent of 500 on ch_i leaves.
	sent := func(st ItemState) ItemState {
		st.Charge, st.Sent, st.SentAmount = "ch_i", true, 500
		if st.Status == StatusInDoubt && st.SentAt == 0 {
			st.SentAt = t0.Unix() // when the attempt's first intent was journaled
		}
		return st
	}
	tests := []struct {
		name string
		recs []*Record
		want ItemState
		ok   bool
	}{
		{"nothing", nil, ItemState{}, false},
		{"intent: in doubt", []*Record{at(intent("b", "i", 1), 0)},
			sent(ItemState{Status: StatusInDoubt, Attempt: 1, Amount: 500}), true},
		{"intent then refunded", []*Record{at(intent("b", "i", 1), 0), withAmount(refunded("b", "i"), 400)},
			sent(ItemState{Status: StatusRefunded, Attempt: 1, Amount: 400, Refund: "re_i", Currency: "eur"}), true},
		{"refunded is sticky over intent", []*Record{refunded("b", "i"), intent("b", "i", 2)},
			ItemState{Status: StatusRefunded, Amount: 500, Refund: "re_i", Currency: "eur", Charge: "ch_i"}, true},
		{"refunded is sticky over final failure", []*Record{refunded("b", "i"), failed("b", "i", 1, 402, true)},
			ItemState{Status: StatusRefunded, Amount: 500, Refund: "re_i", Currency: "eur", Charge: "ch_i"}, true},
		{"refunded is sticky over a second refund, counted as an extra", []*Record{refunded("b", "i"), func() *Record { r := refunded("b", "i"); r.Refund = "re_other"; return r }()},
			ItemState{Status: StatusRefunded, Amount: 500, Refund: "re_i", Currency: "eur", Charge: "ch_i", Extras: "re_other"}, true},
		{"an extra journaled twice (two journals merged) is one extra", []*Record{refunded("b", "i"), func() *Record { r := refunded("b", "i"); r.Refund = "re_other"; return r }(),
			func() *Record { r := refunded("b", "i"); r.Refund = "re_other"; r.Source = SourceReconciled; return r }()},
			ItemState{Status: StatusRefunded, Amount: 500, Refund: "re_i", Currency: "eur", Charge: "ch_i", Extras: "re_other"}, true},
		{"an extra canceled is no extra", []*Record{refunded("b", "i"), func() *Record { r := refunded("b", "i"); r.Refund = "re_other"; return r }(),
			{V: 1, Type: TypeCanceled, Time: t0, Batch: "b", Item: "i", Refund: "re_other", Charge: "ch_i"}},
			ItemState{Status: StatusRefunded, Amount: 500, Refund: "re_i", Currency: "eur", Charge: "ch_i"}, true},
		{"a failed second refund is no extra", []*Record{refunded("b", "i"), func() *Record { r := refunded("b", "i"); r.Refund = "re_other"; r.Status = "failed"; return r }()},
			ItemState{Status: StatusRefunded, Amount: 500, Refund: "re_i", Currency: "eur", Charge: "ch_i"}, true},
		{"requires_action is pending", []*Record{func() *Record { r := refunded("b", "i"); r.Status = RequiresActionStatus; return r }()},
			ItemState{Status: StatusPending, Amount: 500, Refund: "re_i", Currency: "eur", Charge: "ch_i"}, true},
		// A refund the provider accepted and has not finished: nothing of
		// another run's but its end changes the item.
		{"pending", []*Record{at(intent("b", "i", 1), 0), pendingRefund("b", "i")},
			sent(ItemState{Status: StatusPending, Attempt: 1, Amount: 500, Refund: "re_i", Currency: "eur"}), true},
		{"pending is sticky over intent and retry", []*Record{at(intent("b", "i", 1), 0), pendingRefund("b", "i"), at(intent("b", "i", 2), time.Hour), failed("b", "i", 2, 500, false)},
			sent(ItemState{Status: StatusPending, Attempt: 1, Amount: 500, Refund: "re_i", Currency: "eur"}), true},
		{"pending then succeeded", []*Record{at(intent("b", "i", 1), 0), pendingRefund("b", "i"), withAmount(refunded("b", "i"), 500)},
			sent(ItemState{Status: StatusRefunded, Attempt: 1, Amount: 500, Refund: "re_i", Currency: "eur"}), true},
		{"pending then failed at the provider", []*Record{at(intent("b", "i", 1), 0), pendingRefund("b", "i"), failed("b", "i", 1, 0, true)},
			sent(ItemState{Status: StatusFailed, Attempt: 1, Amount: 500, Refund: "re_i", Code: "card_declined"}), true},
		{"a capture binds the item", []*Record{func() *Record {
			r := at(intent("b", "i", 1), 0)
			r.Charge, r.Capture = "", "2GG279541U471931P"
			return r
		}()},
			ItemState{Status: StatusInDoubt, Attempt: 1, Amount: 500, Capture: "2GG279541U471931P", Sent: true, SentAmount: 500, SentAt: t0.Unix()}, true},
		{"a psp_reference binds the item", []*Record{func() *Record {
			r := at(intent("b", "i", 1), 0)
			r.Charge, r.PSPReference = "", "8815658961765250"
			return r
		}()},
			ItemState{Status: StatusInDoubt, Attempt: 1, Amount: 500, PSPReference: "8815658961765250", Sent: true, SentAmount: 500, SentAt: t0.Unix()}, true},
		{"another psp_reference later says two plans met", []*Record{func() *Record {
			r := at(intent("b", "i", 1), 0)
			r.Charge, r.PSPReference = "", "8815658961765250"
			return r
		}(), func() *Record {
			r := failed("b", "i", 1, 0, false)
			r.Charge, r.PSPReference = "", "QFQTPCQ8HXSKGK82"
			return r
		}()},
			ItemState{Status: StatusInDoubt, Attempt: 1, Amount: 500, Code: "card_declined", PSPReference: "8815658961765250", Rebound: true, Sent: true, SentAmount: 500, SentAt: t0.Unix()}, true},
		{"final failure: failed", []*Record{at(intent("b", "i", 1), 0), failed("b", "i", 1, 402, true)},
			sent(ItemState{Status: StatusFailed, Attempt: 1, Amount: 500, Code: "card_declined"}), true},
		{"failed then intent: in doubt again", []*Record{at(intent("b", "i", 1), 0), failed("b", "i", 1, 402, true), at(intent("b", "i", 2), time.Hour)},
			sent(ItemState{Status: StatusInDoubt, Attempt: 2, Amount: 500, Code: "card_declined", SentAt: t0.Add(time.Hour).Unix()}), true},
		{"refunded clears the code", []*Record{at(intent("b", "i", 1), 0), failed("b", "i", 1, 429, false), refunded("b", "i")},
			sent(ItemState{Status: StatusRefunded, Attempt: 1, Amount: 500, Refund: "re_i", Currency: "eur"}), true},
		{"stripe's 500 burns the key", []*Record{at(intent("b", "i", 1), 0), failed("b", "i", 1, 500, false)},
			sent(ItemState{Status: StatusInDoubt, Attempt: 1, KeyBurned: true, Amount: 500, Code: "card_declined"}), true},
		// A gateway's answer is no answer: the refund may still be under way.
		{"502 does not burn", []*Record{at(intent("b", "i", 1), 0), failed("b", "i", 1, 502, false)},
			sent(ItemState{Status: StatusInDoubt, Attempt: 1, Amount: 500, Code: "card_declined"}), true},
		{"504 does not burn", []*Record{at(intent("b", "i", 1), 0), failed("b", "i", 1, 504, false)},
			sent(ItemState{Status: StatusInDoubt, Attempt: 1, Amount: 500, Code: "card_declined"}), true},
		{"503 does not burn", []*Record{at(intent("b", "i", 1), 0), failed("b", "i", 1, 503, false)},
			sent(ItemState{Status: StatusInDoubt, Attempt: 1, Amount: 500, Code: "card_declined"}), true},
		{"429 does not burn", []*Record{at(intent("b", "i", 1), 0), failed("b", "i", 1, 429, false)},
			sent(ItemState{Status: StatusInDoubt, Attempt: 1, Amount: 500, Code: "card_declined"}), true},
		{"no answer does not burn", []*Record{at(intent("b", "i", 1), 0), failed("b", "i", 1, 0, false)},
			sent(ItemState{Status: StatusInDoubt, Attempt: 1, Amount: 500, Code: "card_declined"}), true},
		{"500 of an older attempt does not burn", []*Record{at(intent("b", "i", 2), 0), failed("b", "i", 1, 500, false)},
			sent(ItemState{Status: StatusInDoubt, Attempt: 2, Amount: 500, Code: "card_declined"}), true},
		{"new attempt unburns", []*Record{at(intent("b", "i", 1), 0), failed("b", "i", 1, 500, false), at(intent("b", "i", 2), time.Hour)},
			sent(ItemState{Status: StatusInDoubt, Attempt: 2, Amount: 500, Code: "card_declined", SentAt: t0.Add(time.Hour).Unix()}), true},
		{"same attempt again keeps the burn", []*Record{at(intent("b", "i", 1), 0), failed("b", "i", 1, 500, false), at(intent("b", "i", 1), time.Hour)},
			sent(ItemState{Status: StatusInDoubt, Attempt: 1, KeyBurned: true, Amount: 500, Code: "card_declined"}), true},
		{"the attempt's last intent says what was sent", []*Record{at(intent("b", "i", 1), time.Hour), withCurrency(withAmount(at(intent("b", "i", 1), 0), 7), "jpy")},
			ItemState{Status: StatusInDoubt, Attempt: 1, Amount: 7, Charge: "ch_i", Sent: true, SentAmount: 7, SentCurrency: "jpy", SentAt: t0.Add(time.Hour).Unix()}, true},
		{"older attempt's intent changes nothing sent", []*Record{at(intent("b", "i", 2), 0), withAmount(at(intent("b", "i", 1), time.Hour), 7)},
			sent(ItemState{Status: StatusInDoubt, Attempt: 2, Amount: 500}), true},
		{"the first record binds the charge, and another charge later says two plans met", []*Record{at(intent("b", "i", 1), 0), withCharge(failed("b", "i", 1, 0, false), "ch_other", "")},
			sent(ItemState{Status: StatusInDoubt, Attempt: 1, Amount: 500, Code: "card_declined", Rebound: true}), true},
		{"a charge for an item bound to its payment intent says nothing", []*Record{withCharge(refunded("b", "i"), "", "pi_x"), withCharge(refunded("b", "i"), "ch_x", "")},
			ItemState{Status: StatusRefunded, Amount: 500, Refund: "re_i", Currency: "eur", PaymentIntent: "pi_x"}, true},
		{"a payment intent binds too", []*Record{withCharge(refunded("b", "i"), "", "pi_x")},
			ItemState{Status: StatusRefunded, Amount: 500, Refund: "re_i", Currency: "eur", PaymentIntent: "pi_x"}, true},
		{"canceled alone: nothing", []*Record{{V: 1, Type: TypeCanceled, Time: t0, Batch: "b", Item: "i", Refund: "re_x"}}, ItemState{}, false},
		{"canceled leaves a refund", []*Record{refunded("b", "i"), {V: 1, Type: TypeCanceled, Time: t0, Batch: "b", Item: "i", Refund: "re_x", Charge: "ch_x"}},
			ItemState{Status: StatusRefunded, Amount: 500, Refund: "re_i", Currency: "eur", Charge: "ch_i"}, true},
		{"canceled leaves doubt and binds nothing", []*Record{{V: 1, Type: TypeCanceled, Time: t0, Batch: "b", Item: "i", Refund: "re_x", Charge: "ch_x"}, at(intent("b", "i", 1), 0)},
			sent(ItemState{Status: StatusInDoubt, Attempt: 1, Amount: 500}), true},
		{"other items are apart", []*Record{refunded("b", "j"), intent("c", "i", 1), at(intent("b", "i", 1), 0)},
			sent(ItemState{Status: StatusInDoubt, Attempt: 1, Amount: 500}), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewState()
			for _, r := range tt.recs {
				s.Apply(r)
			}
			got, ok := s.Lookup("b", "i")
			if ok != tt.ok || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Lookup = %+v, %v\nwant     %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

// refState is State without its compact form: a plain map over Next. The
// compact State must give the same answers; what Next means is pinned by
// TestStateTransitions.
type refState map[[2]string]ItemState

func (s refState) apply(r *Record) {
	k := [2]string{r.Batch, r.Item}
	st := s[k]
	if next := Next(st, r); next != st { // a record that changes nothing makes no item
		s[k] = next
	}
}

var (
	longBatch = "b-" + strings.Repeat("x", 300)
	longItem  = strings.Repeat("long", arena.ChunkSize/4+1) // has an arena chunk of its own
)

// randomRecord draws records over few items so they collide, with the odd
// values the compact form must keep exactly.
func randomRecord(rng *rand.Rand) *Record {
	pick := func(vals ...string) string { return vals[rng.IntN(len(vals))] }
	r := &Record{
		V:          1,
		Type:       Type(pick("intent", "refunded", "failed", "canceled", "bogus")),
		Batch:      pick("b1", "b2", "", longBatch),
		Item:       pick("i1", "i2", "i3", "i4", "", longItem),
		Attempt:    rng.IntN(4) - 1,
		Amount:     rng.Int64N(1000) - 1,
		Refund:     pick("", "re_1", "re_2"),
		Charge:     pick("", "ch_1", "ch_2", "i1", "i4", longItem), // an item named by its charge, too
		Currency:   pick("", "usd", "jpy"),
		Code:       pick("", "card_declined", "api_error", "rate_limit"),
		HTTPStatus: []int{0, 400, 402, 429, 500, 502, 503}[rng.IntN(7)],
		Final:      rng.IntN(2) == 0,
	}
	if rng.IntN(10) == 0 {
		r.Attempt = 1 << 40
	}
	switch {
	case r.Charge != "":
	case rng.IntN(3) == 0:
		r.PaymentIntent = pick("pi_1", "i2")
	case rng.IntN(2) == 0:
		r.Capture = pick("2GG279541U471931P", "i3")
	case rng.IntN(2) == 0:
		r.PSPReference = pick("8815658961765250", "QFQTPCQ8HXSKGK82", "i4")
	}
	if r.Type == TypeRefunded {
		r.Status = pick("", "succeeded", PendingStatus, PendingStatus)
	}
	switch rng.IntN(6) {
	case 0:
		r.Time = time.Time{}
	case 1:
		r.Time = time.Now() // local zone and a monotonic reading
	case 2:
		r.Time = t0.In(time.FixedZone("", 3600)).Add(time.Duration(rng.IntN(5)) * time.Second)
	case 3:
		r.Time = time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC) // beyond UnixNano
	default:
		r.Time = t0.Add(time.Duration(rng.IntN(5)) * time.Second)
	}
	return r
}

func TestStateMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		s, ref := NewState(), refState{}
		for range rng.IntN(60) {
			r := randomRecord(rng)
			s.Apply(r)
			ref.apply(r)
		}
		if s.Len() != len(ref) {
			t.Fatalf("round %d: Len = %d, want %d", round, s.Len(), len(ref))
		}
		seen := 0
		s.Each(func(batch, item string, st ItemState) {
			seen++
			if want, ok := ref[[2]string{batch, item}]; !ok || !reflect.DeepEqual(st, want) {
				t.Fatalf("round %d: Each(%q, %.20q) = %+v, want %+v (%v)", round, batch, item, st, want, ok)
			}
		})
		if seen != len(ref) {
			t.Fatalf("round %d: Each saw %d items, want %d", round, seen, len(ref))
		}
		for k, want := range ref {
			if got, ok := s.Lookup(k[0], k[1]); !ok || !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d: Lookup(%q, %.20q) = %+v, %v; want %+v", round, k[0], k[1], got, ok, want)
			}
		}
		if _, ok := s.Lookup("b1", "absent"); ok {
			t.Fatal("Lookup found an absent item")
		}
		// In the order the state numbered them, as a resumed run asks:
		// Lookup's guess of the next item is right each time.
		s.Each(func(batch, item string, want ItemState) {
			if got, ok := s.Lookup(batch, item); !ok || !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d: in order, Lookup(%q, %.20q) = %+v, %v; want %+v", round, batch, item, got, ok, want)
			}
		})
	}
}

// TestStateManyItems crosses table growth and arena chunks.
func TestStateManyItems(t *testing.T) {
	s, ref := NewState(), refState{}
	for i := range 70_000 { // past a slot chunk, several arena chunks and table doublings
		r := refunded("b", strings.Repeat("x", i%7)+strconv.Itoa(i))
		r.Refund = "re_" + strings.Repeat("y", i%50) + strconv.Itoa(i)
		if i%3 == 0 {
			r = intent("b2", strconv.Itoa(i), 1+i%3)
		}
		s.Apply(r)
		ref.apply(r)
	}
	if s.Len() != len(ref) {
		t.Fatalf("Len = %d, want %d", s.Len(), len(ref))
	}
	for k, want := range ref {
		if got, ok := s.Lookup(k[0], k[1]); !ok || !reflect.DeepEqual(got, want) {
			t.Fatalf("Lookup(%q, %q) = %+v, %v; want %+v", k[0], k[1], got, ok, want)
		}
	}
}

// TestStateManyCodes: past 65,535 distinct codes and currencies, the ones
// a 16-bit slot field cannot number are kept exactly on the side.
func TestStateManyCodes(t *testing.T) {
	s, ref := NewState(), refState{}
	apply := func(r *Record) { s.Apply(r); ref.apply(r) }
	for i := range 1<<16 + 100 {
		item := strconv.Itoa(i)
		in := intent("b", item, 1)
		in.Currency = "c" + item
		apply(in)
		f := failed("b", item, 1, 500, false)
		f.Code = "code_" + item
		apply(f)
		if i%3 == 0 {
			r := refunded("b", item)
			r.Currency = "r" + item
			apply(r)
			f := failed("b", item, 2, 402, true) // a refunded item stays as it is
			f.Code = "late_" + item
			apply(f)
		}
	}
	for k, want := range ref {
		if got, ok := s.Lookup(k[0], k[1]); !ok || !reflect.DeepEqual(got, want) {
			t.Fatalf("Lookup(%q, %q) = %+v, %v; want %+v", k[0], k[1], got, ok, want)
		}
	}
}

// TestSlotSize guards the memory of a million-item resume: an item is a
// 40-byte slot beside its 8-byte key in the index, besides its strings and
// the table (TestStateMemory counts all).
func TestSlotSize(t *testing.T) {
	if got := unsafe.Sizeof(entry[slot]{}); got != 48 {
		t.Errorf("an item's entry is %d bytes, want 48", got)
	}
}

// pendingRefund is the refunded record of a refund the provider accepted
// and has not finished.
func pendingRefund(batch, item string) *Record {
	r := refunded(batch, item)
	r.Status = PendingStatus
	return r
}
