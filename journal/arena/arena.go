// Package arena keeps many small strings end to end in large chunks that
// never move, so a string costs a 64-bit reference instead of a string
// header and an allocation of its own. The per-item state of a journal of a
// million items (journal.State, the merge's outcome log, audit's state)
// stays small and holds no pointers for the garbage collector to follow.
package arena

import "unsafe"

// ChunkSize is the size of the chunks strings are packed into; a string of
// ChunkSize-1 bytes or more gets a chunk of its own.
const ChunkSize = 1 << 20

// long marks a Ref to a string with a chunk of its own.
const long = ChunkSize - 1

// Ref is a string in an Arena: chunk<<40 | offset<<20 | length. The zero
// Ref is the empty string.
type Ref uint64

// Arena holds strings; the zero value is empty and ready to use. It is not
// safe for concurrent use.
type Arena struct {
	chunks [][]byte
	fill   int // 1 + index of the chunk being filled; 0 before the first
}

// Add copies s into the arena.
func (a *Arena) Add(s string) Ref {
	if s == "" {
		return 0
	}
	if len(s) >= long {
		a.chunks = append(a.chunks, []byte(s))
		return Ref(len(a.chunks)-1)<<40 | long
	}
	if a.fill == 0 || len(a.chunks[a.fill-1])+len(s) > ChunkSize {
		a.chunks = append(a.chunks, make([]byte, 0, ChunkSize))
		a.fill = len(a.chunks)
	}
	c := &a.chunks[a.fill-1]
	off := len(*c)
	*c = append(*c, s...)
	return Ref(a.fill-1)<<40 | Ref(off)<<20 | Ref(len(s))
}

// Get returns the string r refers to. It shares the arena's memory, which
// is never written again, so it stays valid as long as the arena.
func (a *Arena) Get(r Ref) string {
	if r == 0 {
		return ""
	}
	c := a.chunks[r>>40]
	n := int(r & long)
	if n == long {
		return unsafe.String(unsafe.SliceData(c), len(c))
	}
	off := int(r >> 20 & long)
	return unsafe.String(&c[off], n)
}
