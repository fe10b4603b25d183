package journal

import (
	"encoding/binary"
	"errors"
	"hash/maphash"
	"iter"
	"math"
	"strings"
	"unsafe"

	"github.com/refundkit/refundkit/journal/arena"
)

// Index numbers the (batch, item) pairs of journals densely, in the order
// first added, each with a slot of type S beside its key: the module's one
// item index (State's and audit's). A key is a reference into the index's
// arena, the table 4 bytes a slot (IDTable): no pointers for the GC, and
// S must hold none. Writes must run alone; reads may run concurrently.
type Index[S any] struct {
	seed    maphash.Seed
	ids     IDTable
	entries [][]entry[S] // by id, in chunks of entryChunk so growing never copies
	strs    arena.Arena
	batches Interner
	last    uint32 // the id Add returned last: records come in runs of one item
	scratch []byte
}

type entry[S any] struct {
	key  arena.Ref // the batch number as a uvarint, then the item
	slot S
}

const entryChunk = 1 << 16

func NewIndex[S any]() *Index[S] { return &Index[S]{seed: maphash.MakeSeed()} }

// Slot is the slot of id, zero when the item was added.
func (x *Index[S]) Slot(id uint32) *S { return &x.entries[id/entryChunk][id%entryChunk].slot }

func (x *Index[S]) Len() int { return x.ids.Len() }

// Arena keeps the index's keys and its users' strings; not for concurrent use.
func (x *Index[S]) Arena() *arena.Arena { return &x.strs }

// Batches numbers the batch names; BatchOf gives an item's number.
func (x *Index[S]) Batches() *Interner { return &x.batches }

// HashItem only reads the seed: readers may hash in parallel.
func (x *Index[S]) HashItem(item string) uint64 { return maphash.String(x.seed, item) }

// HashIn hashes s within batch b as keys are hashed, for a user's own
// IDTable of (batch, string) pairs (audit's groups by charge).
func (x *Index[S]) HashIn(b uint32, s string) uint64 { return mix(x.HashItem(s), b) }

func (x *Index[S]) Find(batch, item string) (uint32, bool) {
	return x.FindHashed(batch, item, x.HashItem(item))
}

func (x *Index[S]) FindHashed(batch, item string, ih uint64) (uint32, bool) {
	b, ok := x.batches.Lookup(batch)
	if !ok {
		return 0, false
	}
	return x.find(b, item, mix(ih, b))
}

// FindNear tries the item numbered hint first: a caller walking items in
// about the order added then pays no hash and no probe.
func (x *Index[S]) FindNear(batch, item string, hint uint32) (uint32, bool) {
	if b, ok := x.batches.Lookup(batch); ok && hint < uint32(x.ids.Len()) && x.is(hint, b, item) {
		return hint, true
	}
	return x.Find(batch, item)
}

// Add returns the id of (batch, item), numbering it if new (added).
func (x *Index[S]) Add(batch, item string) (id uint32, added bool) {
	return x.AddHashed(batch, item, x.HashItem(item))
}

func (x *Index[S]) AddHashed(batch, item string, ih uint64) (id uint32, added bool) {
	b := x.batches.ID(batch)
	if x.ids.n > 0 && x.is(x.last, b, item) {
		return x.last, false
	}
	h := mix(ih, b)
	if id, ok := x.find(b, item, h); ok {
		x.last = id
		return id, false
	}
	return x.insert(b, item, h), true
}

// Key returns the batch and item of id, in the arena's memory.
func (x *Index[S]) Key(id uint32) (batch, item string) {
	b, item := x.key(id)
	return x.batches.Name(b), item
}

func (x *Index[S]) BatchOf(id uint32) uint32 {
	b, _ := x.key(id)
	return b
}

func (x *Index[S]) Reserve(n int) { x.ids.Reserve(n, x.rehash) }

// Touch loads the table slot where the lookup for ih starts (guessing the
// last batch), so that a caller overlaps the cache misses of many lookups.
func (x *Index[S]) Touch(ih uint64) uint32 { return x.ids.Touch(mix(ih, x.batches.last)) }

// TouchSpan is how many items a caller touches before it folds them.
const TouchSpan = 256

func (x *Index[S]) TouchAll(ihs []uint64) uint32 {
	var t uint32
	for _, ih := range ihs[:min(len(ihs), TouchSpan)] {
		t += x.Touch(ih)
	}
	return t
}

func (x *Index[S]) find(b uint32, item string, h uint64) (uint32, bool) {
	for id := range x.ids.Candidates(h) {
		if x.is(id, b, item) {
			return id, true
		}
	}
	return 0, false
}

func (x *Index[S]) insert(b uint32, item string, h uint64) uint32 {
	x.scratch = append(binary.AppendUvarint(x.scratch[:0], uint64(b)), item...)
	ref := x.strs.Add(unsafe.String(unsafe.SliceData(x.scratch), len(x.scratch)))
	id := x.ids.Add(h, x.rehash)
	if id%entryChunk == 0 {
		x.entries = append(x.entries, make([]entry[S], entryChunk))
	}
	x.entries[id/entryChunk][id%entryChunk].key = ref
	x.last = id
	return id
}

func (x *Index[S]) is(id, b uint32, item string) bool {
	k := x.strs.Get(x.entries[id/entryChunk][id%entryChunk].key)
	if b >= 0x80 {
		return keyIs(k, b, item)
	}
	return len(k) == 1+len(item) && k[0] == byte(b) && k[1:] == item
}

func keyIs(k string, b uint32, item string) bool {
	kb, kitem := splitKey(k)
	return kb == b && kitem == item
}

// itemRef refers to id's item name without a copy, for users whose
// strings often equal it (a charge named as its own item).
func (x *Index[S]) itemRef(id uint32) (arena.Ref, bool) {
	ref := x.entries[id/entryChunk][id%entryChunk].key
	k := x.strs.Get(ref)
	_, item := splitKey(k)
	return arena.Suffix(ref, len(k)-len(item))
}

func (x *Index[S]) key(id uint32) (uint32, string) {
	return splitKey(x.strs.Get(x.entries[id/entryChunk][id%entryChunk].key))
}

// splitKey splits a key: the batch number as a uvarint, then the item.
func splitKey(k string) (uint32, string) {
	if k[0] < 0x80 { // batch numbers below 128: one byte
		return uint32(k[0]), k[1:]
	}
	return splitLong(k)
}

func splitLong(k string) (uint32, string) {
	b, n := binary.Uvarint(unsafe.Slice(unsafe.StringData(k), min(len(k), binary.MaxVarintLen32)))
	return uint32(b), k[n:]
}

func (x *Index[S]) rehash(id uint32) uint64 {
	return x.HashIn(x.key(id))
}

func mix(ih uint64, b uint32) uint64 { return ih ^ uint64(b)*0x9e3779b97f4a7c15 }

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

// MaxIDs is how many keys an IDTable numbers (at most half full).
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

// Interner numbers the few distinct strings of a kind (batches, codes,
// currencies): 0 is "", the others in the order first seen. The zero value
// is empty. ID writes; Lookup, Name and Len may run concurrently.
type Interner struct {
	names []string // by id; names[0] is "" once any other was added
	ids   map[string]uint32
	last  uint32 // the id ID returned last: names come in runs
}

// ID returns the id of name, numbering it if new (ErrTableFull past 2^32).
func (in *Interner) ID(name string) uint32 {
	if int(in.last) < len(in.names) && in.names[in.last] == name {
		return in.last
	}
	return in.id(name)
}

func (in *Interner) id(name string) uint32 {
	if name == "" {
		return 0
	}
	id, ok := in.ids[name]
	if !ok {
		if in.ids == nil {
			in.names, in.ids = []string{""}, map[string]uint32{}
		}
		if uint64(len(in.names)) > math.MaxUint32 {
			panic(ErrTableFull)
		}
		name = strings.Clone(name)
		id = uint32(len(in.names))
		in.names = append(in.names, name)
		in.ids[name] = id
	}
	in.last = id
	return id
}

func (in *Interner) Lookup(name string) (uint32, bool) {
	if int(in.last) < len(in.names) && in.names[in.last] == name {
		return in.last, true
	}
	if name == "" {
		return 0, true
	}
	id, ok := in.ids[name]
	return id, ok
}

func (in *Interner) Name(id uint32) string {
	if id == 0 {
		return ""
	}
	return in.names[id]
}

// Len is how many ids there are, counting the one of "".
func (in *Interner) Len() int { return max(len(in.names), 1) }
