package journal

import (
	"hash/maphash"
	"slices"
	"sync"
)

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
