package journal

import (
	"math"
	"strings"
)

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
