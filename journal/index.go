package journal

import (
	"encoding/binary"
	"hash/maphash"
	"unsafe"

	"github.com/refundkit/refundkit/journal/arena"
)

// Index numbers the items of journals: each (batch, item) pair gets a dense
// id, 0, 1, 2, ... in the order first added, and a slot of type S beside
// its key, where its user keeps the item's state: journal.State and audit
// keep theirs here. It is the one item index of the module.
//
// It holds millions of items in little memory and no pointers for the
// garbage collector to follow (S must hold none either): a key is 8 bytes
// of reference to the item's name, behind its batch's number, in the
// index's arena, which takes its users' strings too; the table is 4 bytes
// a slot (IDTable). A key and its slot share a cache line or two, so a
// lookup costs the misses of the table, the slot and the name.
//
// Add, AddHashed, Reserve and writes to slots must not run concurrently
// with anything else; the rest only reads, and may run concurrently.
type Index[S any] struct {
	seed    maphash.Seed
	ids     IDTable
	entries [][]entry[S] // by id, in chunks of entryChunk so growing never copies
	strs    arena.Arena
	batches Interner
	last    uint32 // the id Add returned last: records come in runs of one item
	scratch []byte
}

// entry is an item: its key and its user's slot.
type entry[S any] struct {
	key  arena.Ref // the batch number as a uvarint, then the item
	slot S
}

const entryChunk = 1 << 16

// NewIndex returns an empty index.
func NewIndex[S any]() *Index[S] { return &Index[S]{seed: maphash.MakeSeed()} }

// Slot is the slot of id, zero when the item was added.
func (x *Index[S]) Slot(id uint32) *S { return &x.entries[id/entryChunk][id%entryChunk].slot }

// Len is how many items the index numbers.
func (x *Index[S]) Len() int { return x.ids.Len() }

// Arena is where the index keeps its keys; its users keep their strings
// there too. It is not safe for concurrent use.
func (x *Index[S]) Arena() *arena.Arena { return &x.strs }

// Batches numbers the batch names; BatchOf gives an item's number.
func (x *Index[S]) Batches() *Interner { return &x.batches }

// HashItem hashes an item's name for FindHashed and AddHashed. It only
// reads the seed, so that readers may hash in parallel.
func (x *Index[S]) HashItem(item string) uint64 { return maphash.String(x.seed, item) }

// HashIn hashes s within batch number b as the index hashes its keys: for
// a user's own IDTable of (batch, string) pairs (audit's groups by charge).
func (x *Index[S]) HashIn(b uint32, s string) uint64 { return mix(x.HashItem(s), b) }

// Find returns the id of (batch, item); false if the index holds no such item.
func (x *Index[S]) Find(batch, item string) (uint32, bool) {
	return x.FindHashed(batch, item, x.HashItem(item))
}

// FindHashed is Find for an item that hashes to ih (HashItem).
func (x *Index[S]) FindHashed(batch, item string, ih uint64) (uint32, bool) {
	b, ok := x.batches.Lookup(batch)
	if !ok {
		return 0, false
	}
	return x.find(b, item, mix(ih, b))
}

// FindNear is Find for a caller that walks the items in about the order
// they were added (a plan against the journal of its own run): the item
// numbered hint is tried first, and a hit costs no hash and no probe of the
// table, only the look at a key that is likely in cache already.
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

// Add returns the id of (batch, item), numbering it if it is new; added
// says it was.
func (x *Index[S]) Add(batch, item string) (id uint32, added bool) {
	return x.AddHashed(batch, item, x.HashItem(item))
}

// AddHashed is Add for an item that hashes to ih (HashItem).
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

// Key returns the batch and item of id. The strings share the arena's
// memory and stay valid as long as the index.
func (x *Index[S]) Key(id uint32) (batch, item string) {
	b, item := x.key(id)
	return x.batches.Name(b), item
}

// BatchOf is the number of id's batch in Batches.
func (x *Index[S]) BatchOf(id uint32) uint32 {
	b, _ := x.key(id)
	return b
}

// Reserve grows the index for about n more items at once.
func (x *Index[S]) Reserve(n int) { x.ids.Reserve(n, x.rehash) }

// Touch loads the table slot where the lookup of an item that hashes to ih
// starts, guessing its batch is the last one added: a caller about to look
// up many items overlaps their cache misses by touching them first.
func (x *Index[S]) Touch(ih uint64) uint32 { return x.ids.Touch(mix(ih, x.batches.last)) }

// TouchSpan is how many items a caller touches (Touch) before it folds
// them: enough for their cache misses to overlap, few enough that the
// slots are still in cache when their turn comes.
const TouchSpan = 256

// TouchAll touches the slots of items hashing to ihs, at most TouchSpan.
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

// insert numbers (b, item), which the index does not hold, of hash h.
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

// is reports whether id is the item (b, item).
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

// itemRef refers to id's item name in the arena, without a copy: users
// whose strings often equal the item (a charge named as its own item)
// keep this instead of a copy.
func (x *Index[S]) itemRef(id uint32) (arena.Ref, bool) {
	ref := x.entries[id/entryChunk][id%entryChunk].key
	k := x.strs.Get(ref)
	_, item := splitKey(k)
	return arena.Suffix(ref, len(k)-len(item))
}

// key splits the key of id into its batch number and item.
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

// rehash is the table hash of id's key, for the table to move it.
func (x *Index[S]) rehash(id uint32) uint64 {
	return x.HashIn(x.key(id))
}

// mix combines an item's hash with its batch number into the table hash.
func mix(ih uint64, b uint32) uint64 { return ih ^ uint64(b)*0x9e3779b97f4a7c15 }
