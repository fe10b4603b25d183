// Package arena keeps many small strings end to end in large chunks that
// never move: a string costs a 64-bit reference and no pointer for the GC.
package arena

import (
	"errors"
	"unsafe"
)

// ChunkSize is a chunk's size; a string of ChunkSize-1 bytes or more gets
// one of its own.
const ChunkSize = 1 << 20

// long marks a Ref to a string with a chunk of its own.
const long = ChunkSize - 1

// maxChunks is how many chunks a Ref names: 16 TiB of strings.
const maxChunks = 1 << 24

// ErrFull is the panic of an Arena past maxChunks: no Ref wraps around.
var ErrFull = errors.New("arena: more than 2^24 chunks of strings")

// Ref is a string in an Arena: chunk<<40 | offset<<20 | length. The zero
// Ref is the empty string.
type Ref uint64

// Arena holds strings; the zero value is empty. Not for concurrent use.
type Arena struct {
	chunks [][]byte
	fill   int // 1 + index of the chunk being filled; 0 before the first
}

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

// Suffix shares r's string from byte from on; false for a long string.
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

func refTo(c, off, n int) Ref {
	if c >= maxChunks {
		panic(ErrFull)
	}
	return Ref(c)<<40 | Ref(off)<<20 | Ref(n)
}

// Get returns r's string, in memory never written again.
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
