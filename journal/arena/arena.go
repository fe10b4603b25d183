// Package arena keeps many small strings end to end in large chunks that
// never move, so a string costs a 64-bit reference instead of a string
// header and an allocation of its own. The item index (journal.Index) keeps
// its keys and its users' strings here, so that the state of a journal of
// a million items stays small and holds no pointers for the garbage
// collector to follow.
package arena

import (
	"errors"
	"unsafe"
)

// ChunkSize is the size of the chunks strings are packed into; a string of
// ChunkSize-1 bytes or more gets a chunk of its own.
const ChunkSize = 1 << 20

// long marks a Ref to a string with a chunk of its own.
const long = ChunkSize - 1

// maxChunks is how many chunks a Ref can name: 24 bits, 16 TiB of strings.
const maxChunks = 1 << 24

// ErrFull is the panic of an Arena asked for more chunks than a Ref names,
// instead of a Ref that wraps around to another string.
var ErrFull = errors.New("arena: more than 2^24 chunks of strings")

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
		return refTo(len(a.chunks)-1, 0, long)
	}
	if a.fill == 0 || len(a.chunks[a.fill-1])+len(s) > ChunkSize {
		a.chunks = append(a.chunks, make([]byte, 0, ChunkSize))
		a.fill = len(a.chunks)
	}
	c := &a.chunks[a.fill-1]
	off := len(*c)
	*c = append(*c, s...)
	return refTo(a.fill-1, off, len(s))
}

// Suffix refers to the bytes of r's string from byte from on, sharing
// them rather than copying: false for a string with a chunk of its own.
func Suffix(r Ref, from int) (Ref, bool) {
	n := int(r & long)
	switch {
	case from == n:
		return 0, true
	case r == 0 || n == long || from < 0 || from > n:
		return 0, false
	}
	return r + Ref(from)<<20 - Ref(from), true
}

// refTo is the Ref of the n bytes at off in chunk c.
func refTo(c, off, n int) Ref {
	if c >= maxChunks {
		panic(ErrFull)
	}
	return Ref(c)<<40 | Ref(off)<<20 | Ref(n)
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
