package journal

import (
	"hash/maphash"
	"slices"
	"strings"
	"sync"
)

// holders finds an item by the refund it was credited with, built on the
// first ask: refund ids numbered in an IDTable beside their item, about
// 20 bytes a refund.
type holders struct {
	once   sync.Once
	seed   maphash.Seed
	ids    IDTable
	items  []uint32 // by id in ids: the item first credited with that refund
	hashes []uint64 // by id in ids: the refund id's hash (an item may hold several)
}

// Holder returns the item credited with refund id (its refund or an
// extra); the first one when, against the rule, several are.
func (s *State) Holder(id string) (batch, item string, ok bool) {
	h := &s.holders
	h.once.Do(func() {
		h.seed = maphash.MakeSeed()
		h.items = []uint32{} // built: put adds what later records credit
		for i := range uint32(s.idx.Len()) {
			if sl := s.slot(i); hasRefund(sl.status) {
				s.indexHolder(i, s.idx.strs.Get(sl.refund))
			} else if sl.status == StatusInDoubt {
				if st := s.get(i); st.Unsure() {
					s.indexHolder(i, st.Refund)
				}
			}
		}
		for i, ids := range s.extras { // refunds journaled as an item's extras
			for _, id := range strings.Split(ids, idSep) {
				s.indexHolder(i, id)
			}
		}
	})
	if id == "" {
		return "", "", false
	}
	i, found := s.holderOf(id)
	if !found {
		return "", "", false
	}
	batch, item = s.idx.Key(i)
	return batch, item, true
}

func (s *State) holderOf(id string) (uint32, bool) {
	h := &s.holders
	for c := range h.ids.Candidates(maphash.String(h.seed, id)) {
		if i := h.items[c]; s.credits(i, id) {
			return i, true
		}
	}
	return 0, false
}

func (s *State) credits(i uint32, id string) bool {
	if s.idx.strs.Get(s.slot(i).refund) == id {
		return true
	}
	return slices.Contains(strings.Split(s.extras[i], idSep), id)
}

// indexHolder adds item i once the index is built; the first keeps an id.
func (s *State) indexHolder(i uint32, id string) {
	h := &s.holders
	if h.items == nil || id == "" {
		return
	}
	if _, taken := s.holderOf(id); taken {
		return
	}
	h.ids.Add(maphash.String(h.seed, id), func(c uint32) uint64 { return h.hashes[c] })
	h.items = append(h.items, i)
	h.hashes = append(h.hashes, maphash.String(h.seed, id))
}

// twice holds the hashes of refund ids credited to more than one item,
// found on the first SharedRefund: nearly always none, and then the
// holders index (0.3 s a million refunds) is never built.
type twice struct {
	once   sync.Once
	hashes map[uint64]bool
}

var creditSeed = maphash.MakeSeed()

// SharedRefund returns the item first credited with refund id when it is
// not batch's item (a journal concatenated or edited by hand). Not
// concurrently with Apply.
func (s *State) SharedRefund(id, batch, item string) (firstBatch, firstItem string, shared bool) {
	t := &s.twice
	t.once.Do(func() {
		var hashes []uint64
		for i := range uint32(s.idx.Len()) {
			sl := s.slot(i)
			if hasRefund(sl.status) || sl.status == StatusInDoubt && sl.refund != 0 {
				hashes = append(hashes, maphash.String(creditSeed, s.idx.strs.Get(sl.refund)))
			}
		}
		for _, ids := range s.extras {
			for _, x := range strings.Split(ids, idSep) {
				hashes = append(hashes, maphash.String(creditSeed, x))
			}
		}
		t.hashes = repeated(hashes)
	})
	if id == "" || !t.hashes[maphash.String(creditSeed, id)] {
		return "", "", false
	}
	b, it, ok := s.Holder(id)
	return b, it, ok && (b != batch || it != item)
}

// repeated returns the hashes that occur more than once, or nil: a bitmap
// of 2^26 buckets finds the busy ones, whose hashes alone are counted.
func repeated(hashes []uint64) map[uint64]bool {
	const bits = 26
	seen := make([]uint64, 1<<bits/64)
	busy := make([]uint64, 1<<bits/64)
	for _, h := range hashes {
		b := h >> (64 - bits)
		if seen[b/64]&(1<<(b%64)) != 0 {
			busy[b/64] |= 1 << (b % 64)
		}
		seen[b/64] |= 1 << (b % 64)
	}
	var count map[uint64]int
	for _, h := range hashes {
		if b := h >> (64 - bits); busy[b/64]&(1<<(b%64)) != 0 {
			if count == nil {
				count = map[uint64]int{}
			}
			count[h]++
		}
	}
	var twice map[uint64]bool
	for h, n := range count {
		if n > 1 {
			if twice == nil {
				twice = map[uint64]bool{}
			}
			twice[h] = true
		}
	}
	return twice
}

// PaymentItem is an item held on a payment, with its state: refund asks
// before a call, since a provider may not show another item's refund yet.
type PaymentItem struct {
	Batch, Item string
	State       ItemState
}

// payments finds the items of a payment (the target their first record
// bound them to), built on the first ask: targets numbered in an IDTable,
// each with a chain of its items through next (16 to 24 bytes an item).
type payments struct {
	once  sync.Once
	seed  maphash.Seed
	ids   IDTable
	first []uint32 // by target id: the id+1 of the item that heads its chain
	next  []uint32 // by item id: the id+1 of the next item on its target; 0 ends the chain
}

// OnPayment returns the items on a payment named by any of keys (a charge,
// or a payment intent and its charges), of every batch, in journal order.
func (s *State) OnPayment(keys ...string) []PaymentItem {
	p := &s.payments
	p.once.Do(func() {
		p.seed = maphash.MakeSeed()
		p.first = []uint32{} // built: put adds the items later records bind
		n := uint32(s.idx.Len())
		p.next = make([]uint32, n)
		for i := range n {
			s.indexPayment(i)
		}
	})
	var ids []uint32
	for k, key := range keys {
		if key == "" || slices.Contains(keys[:k], key) {
			continue
		}
		t, ok := s.paymentOf(key)
		if !ok {
			continue
		}
		for i := p.first[t]; i != 0; i = p.next[i-1] {
			ids = append(ids, i-1)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	slices.Sort(ids)
	out := make([]PaymentItem, len(ids))
	for k, i := range ids {
		batch, item := s.idx.Key(i)
		out[k] = PaymentItem{Batch: batch, Item: item, State: s.get(i)}
	}
	return out
}

func (s *State) paymentOf(target string) (uint32, bool) {
	p := &s.payments
	for t := range p.ids.Candidates(maphash.String(p.seed, target)) {
		if s.targetOf(p.first[t]-1) == target {
			return t, true
		}
	}
	return 0, false
}

func (s *State) targetOf(i uint32) string { return s.idx.strs.Get(s.slot(i).target) }

// indexPayment adds item i, just bound (put), once the index is built.
func (s *State) indexPayment(i uint32) {
	p := &s.payments
	target := s.targetOf(i)
	if p.first == nil || target == "" {
		return
	}
	for uint32(len(p.next)) <= i {
		p.next = append(p.next, 0)
	}
	t, ok := s.paymentOf(target)
	if !ok {
		t = p.ids.Add(maphash.String(p.seed, target), func(t uint32) uint64 {
			return maphash.String(p.seed, s.targetOf(p.first[t]-1))
		})
		p.first = append(p.first, 0)
	}
	p.next[i] = p.first[t]
	p.first[t] = i + 1
}
