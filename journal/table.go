package journal

import (
	"errors"
	"iter"
)

// IDTable numbers keys its user keeps, 0, 1, 2, ... in the order added:
// the module's one open-addressing table. A slot is 4 bytes: id+1 and, in
// the bits ids do not need yet (at most half full), bits of the key's
// hash, so a probe rarely looks at another key. The zero value is empty.
type IDTable struct {
	slots []uint32 // id+1 | tag<<bits; 0 is empty
	bits  uint     // len(slots) is 1<<bits
	n     uint32

	touched uint32 // keeps resize's loads from being optimized away
}

const MaxIDs = 1 << 31

// ErrTableFull is the panic of an IDTable past MaxIDs keys, or an Interner
// past 2^32 strings: never wrapped around in silence.
var ErrTableFull = errors.New("journal: more than 2^31 items in one index")

const minTableBits = 10

func (t *IDTable) Len() int { return int(t.n) }

// Candidates yields the ids whose slot matches hash h, in probe order; the
// caller compares keys and stops at its own.
func (t *IDTable) Candidates(h uint64) iter.Seq[uint32] {
	return func(yield func(uint32) bool) {
		slots, bits := t.slots, t.bits
		if slots == nil {
			return
		}
		mask := uint32(len(slots) - 1)
		tag := t.tag(h)
		for pos := uint32(h) & mask; ; pos = (pos + 1) & mask {
			e := slots[pos]
			if e == 0 || e>>bits == tag && !yield(e&mask-1) {
				return
			}
		}
	}
}

func (t *IDTable) tag(h uint64) uint32 { return uint32(h >> (32 + t.bits)) }

// Add numbers a new key of hash h and returns its id; hashOf gives an id's
// hash, for growing. It panics with ErrTableFull past MaxIDs keys.
func (t *IDTable) Add(h uint64, hashOf func(id uint32) uint64) uint32 {
	if t.n >= MaxIDs {
		panic(ErrTableFull)
	}
	if uint64(t.n+1)*2 > uint64(len(t.slots)) {
		t.resize(max(t.bits+1, minTableBits), hashOf)
	}
	id := t.n
	t.n++
	t.place(h, id)
	return id
}

// Reserve grows the table for n more keys at once (capped at MaxIDs).
func (t *IDTable) Reserve(n int, hashOf func(id uint32) uint64) {
	want := min(uint64(t.n)+uint64(max(n, 0)), MaxIDs)
	bits := max(t.bits, minTableBits)
	for uint64(1)<<bits < 2*want {
		bits++
	}
	if t.slots == nil || bits > t.bits {
		t.resize(bits, hashOf)
	}
}

// Touch loads the slot where the probe for h starts, to overlap cache misses.
func (t *IDTable) Touch(h uint64) uint32 {
	if t.slots == nil {
		return 0
	}
	return t.slots[uint32(h)&uint32(len(t.slots)-1)]
}

// resize places every key again, hashing a span at a time and touching
// its slots first so that their cache misses overlap.
func (t *IDTable) resize(bits uint, hashOf func(id uint32) uint64) {
	t.slots, t.bits = make([]uint32, 1<<bits), bits
	mask := uint32(len(t.slots) - 1)
	const span = 64
	var hashes [span]uint64
	for from := uint32(0); from < t.n; from += span {
		to := min(from+span, t.n)
		for id := from; id < to; id++ {
			hashes[id-from] = hashOf(id)
		}
		for _, h := range hashes[:to-from] {
			t.touched += t.slots[uint32(h)&mask]
		}
		for id := from; id < to; id++ {
			t.place(hashes[id-from], id)
		}
	}
}

func (t *IDTable) place(h uint64, id uint32) {
	mask := uint32(len(t.slots) - 1)
	pos := uint32(h) & mask
	for t.slots[pos] != 0 {
		pos = (pos + 1) & mask
	}
	t.slots[pos] = id + 1 | t.tag(h)<<t.bits
}
