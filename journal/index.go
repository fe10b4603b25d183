package journal

import (
	"encoding/binary"
	"hash/maphash"
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
	b, ok := x.batches.Lookup(batch)
	if !ok {
		return 0, false
	}
	if hint < uint32(x.ids.Len()) && x.is(hint, b, item) {
		return hint, true
	}
	return x.find(b, item, mix(x.HashItem(item), b))
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
