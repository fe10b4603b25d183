package journal

import (
	"hash/maphash"
	"sync"
)

// holders finds an item by the refund it was credited with, so that one
// refund is never credited to two items. It is built on the first ask: a
// run that only skips settled items never pays for it. Refund ids are
// hashed (8 bytes an item); strings are compared only on a hash's hit.
type holders struct {
	once sync.Once
	seed maphash.Seed
	byID map[uint64]uint32 // hash of a refund id -> the first item credited with it
	// more holds the items whose refund id's hash another id took first.
	more map[string]uint32
}

// Holder returns the item credited with refund id (refunded or pending),
// if the state holds one. The item first credited with it is the one
// returned when, against the rule, several are.
func (s *State) Holder(id string) (batch, item string, ok bool) {
	h := &s.holders
	h.once.Do(func() {
		h.seed = maphash.MakeSeed()
		h.byID = make(map[uint64]uint32)
		for i := range uint32(s.idx.Len()) {
			if sl := s.slot(i); hasRefund(sl.status) {
				s.indexHolder(i, s.idx.strs.Get(sl.refund))
			}
		}
	})
	if id == "" {
		return "", "", false
	}
	i, found := h.byID[maphash.String(h.seed, id)]
	if found && s.idx.strs.Get(s.slot(i).refund) != id {
		i, found = h.more[id]
	}
	if !found {
		return "", "", false
	}
	batch, item = s.idx.Key(i)
	return batch, item, true
}

// indexHolder adds item i, credited with refund id, once the index is built.
func (s *State) indexHolder(i uint32, id string) {
	h := &s.holders
	if h.byID == nil || id == "" {
		return
	}
	k := maphash.String(h.seed, id)
	first, taken := h.byID[k]
	switch {
	case !taken:
		h.byID[k] = i
	case first != i && s.idx.strs.Get(s.slot(first).refund) != id:
		if h.more == nil {
			h.more = make(map[string]uint32)
		}
		if _, ok := h.more[id]; !ok {
			h.more[id] = i
		}
	}
}
