package journal

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestIndexMatchesMap: ids are dense in the order first added, slots start
// zero and keep what is put there, and Find, Key and BatchOf agree with a
// plain map, across table growth, batch
// numbers of several varint bytes, empty names and items with an arena
// chunk of their own.
func TestIndexMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	x := NewIndex[[2]uint32]()
	ids := map[[2]string]uint32{}
	var keys [][2]string
	batches := []string{"", "b"}
	for i := range 300 { // past 128 and 16384: batch numbers of 2 and 3 bytes
		batches = append(batches, "batch-"+strconv.Itoa(i))
	}
	for i := range 20_000 {
		k := [2]string{batches[rng.IntN(len(batches))], strconv.Itoa(rng.IntN(5000))}
		switch i % 1000 {
		case 1:
			k[1] = ""
		case 2:
			k[1] = longItem
		}
		if i == 19_000 {
			for j := range 17_000 {
				id, _ := x.Add("many-"+strconv.Itoa(j), "i")
				*x.Slot(id) = [2]uint32{id, 1}
				keys = append(keys, [2]string{"many-" + strconv.Itoa(j), "i"})
				ids[keys[len(keys)-1]] = uint32(len(keys) - 1)
			}
		}
		id, added := x.Add(k[0], k[1])
		want, known := ids[k]
		if !known {
			want = uint32(len(keys))
			ids[k] = want
			keys = append(keys, k)
		}
		if id != want || added == known {
			t.Fatalf("Add(%q, %.20q) = %d, %v; want %d, %v", k[0], k[1], id, added, want, !known)
		}
		if sl := *x.Slot(id); added && sl != [2]uint32{} || !added && sl != [2]uint32{id, 1} {
			t.Fatalf("slot of %d: %v", id, sl)
		}
		*x.Slot(id) = [2]uint32{id, 1}
	}
	if x.Len() != len(keys) {
		t.Fatalf("Len = %d, want %d", x.Len(), len(keys))
	}
	for id, k := range keys {
		if got, ok := x.Find(k[0], k[1]); !ok || got != uint32(id) {
			t.Fatalf("Find(%q, %.20q) = %d, %v; want %d", k[0], k[1], got, ok, id)
		}
		if sl := *x.Slot(uint32(id)); sl != [2]uint32{uint32(id), 1} {
			t.Fatalf("slot of %d: %v", id, sl)
		}
		if b, item := x.Key(uint32(id)); b != k[0] || item != k[1] {
			t.Fatalf("Key(%d) = %q, %.20q; want %q, %.20q", id, b, item, k[0], k[1])
		}
		if b := x.Batches().Name(x.BatchOf(uint32(id))); b != k[0] {
			t.Fatalf("BatchOf(%d) names %q, want %q", id, b, k[0])
		}
	}
	for _, k := range [][2]string{{"b", "absent"}, {"no-such-batch", "1"}, {"b", longItem + "x"}} {
		if id, ok := x.Find(k[0], k[1]); ok {
			t.Errorf("Find(%q, %.20q) = %d, want absent", k[0], k[1], id)
		}
	}
}

// TestIndexReserve: reserving first gives the same ids as growing.
func TestIndexReserve(t *testing.T) {
	x := NewIndex[struct{}]()
	x.Add("b", "before")
	x.Reserve(10_000)
	for i := range 10_000 {
		if id, added := x.Add("b", strconv.Itoa(i)); !added || id != uint32(i+1) {
			t.Fatalf("Add(%d) = %d, %v; want %d, true", i, id, added, i+1)
		}
	}
	if id, ok := x.Find("b", "before"); !ok || id != 0 {
		t.Fatalf("Find(before) = %d, %v after Reserve", id, ok)
	}
}

// TestIDTableProbes: keys whose hashes share the position bits, or all
// bits, are told apart by the caller's comparison, and a tag match of
// another key is passed over.
func TestIDTableProbes(t *testing.T) {
	for _, c := range []struct {
		name string
		hash func(k int) uint64
	}{
		{"same hash", func(int) uint64 { return 42 }},
		{"same position, other tags", func(k int) uint64 { return uint64(k)<<50 | 7 }},
		{"same tag, other positions", func(k int) uint64 { return 1<<63 | uint64(k) }},
		{"spread", func(k int) uint64 { return uint64(k) * 0x9e3779b97f4a7c15 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			var tab IDTable
			var keys []int
			hashOf := func(id uint32) uint64 { return c.hash(keys[id]) }
			find := func(k int) (uint32, bool) {
				for id := range tab.Candidates(c.hash(k)) {
					if keys[id] == k {
						return id, true
					}
				}
				return 0, false
			}
			if _, ok := find(1); ok {
				t.Fatal("an empty table found a key")
			}
			for k := range 3000 {
				if id := tab.Add(c.hash(k), hashOf); id != uint32(k) {
					t.Fatalf("Add(%d) = %d", k, id)
				}
				keys = append(keys, k)
			}
			for k := range 3000 {
				if id, ok := find(k); !ok || id != uint32(k) {
					t.Fatalf("find(%d) = %d, %v", k, id, ok)
				}
			}
			if _, ok := find(3000); ok {
				t.Fatal("found an absent key")
			}
		})
	}
}

// TestIDTableFull: past MaxIDs keys the table panics with ErrTableFull
// instead of wrapping its ids around.
func TestIDTableFull(t *testing.T) {
	tab := IDTable{n: MaxIDs}
	defer func() {
		if err, _ := recover().(error); !errors.Is(err, ErrTableFull) {
			t.Fatalf("recovered %v, want ErrTableFull", err)
		}
	}()
	tab.Add(1, func(uint32) uint64 { return 1 })
}

func TestInterner(t *testing.T) {
	var in Interner
	if in.Name(0) != "" || in.Len() != 1 {
		t.Fatalf("zero Interner: Name(0) = %q, Len = %d", in.Name(0), in.Len())
	}
	if id, ok := in.Lookup("eur"); ok {
		t.Fatalf("Lookup(eur) = %d before ID", id)
	}
	buf := []byte("eur")
	for i, name := range []string{"", string(buf), "usd", "eur", "", "jpy"} {
		want := map[string]uint32{"": 0, "eur": 1, "usd": 2, "jpy": 3}[name]
		if id := in.ID(name); id != want {
			t.Fatalf("step %d: ID(%q) = %d, want %d", i, name, id, want)
		}
		if id, ok := in.Lookup(name); !ok || id != want {
			t.Fatalf("step %d: Lookup(%q) = %d, %v", i, name, id, ok)
		}
	}
	buf[0] = 'x' // the interner keeps its own copy
	if in.Name(1) != "eur" || in.Name(3) != "jpy" || in.Len() != 4 {
		t.Fatalf("Name(1) = %q, Name(3) = %q, Len = %d", in.Name(1), in.Name(3), in.Len())
	}
}
