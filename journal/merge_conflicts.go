package journal

import (
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"unsafe"

	"github.com/refundkit/refundkit/journal/arena"
)

// location is a record's input and line.
type location struct{ input, line int }

func (l location) String(paths []string) string { return fmt.Sprintf("%s:%d", paths[l.input], l.line) }

// outcomeLog keeps every outcome record (refunded, final failure) in the
// order written, compactly; conflicts are found at the end by grouping
// them per item. Appending keeps the merge loop off a large hash table.
type outcomeLog struct {
	seed    maphash.Seed
	strs    arena.Arena
	recs    [][]outcomeRec // chunks of outcomeChunk, so growing never copies
	n       int
	scratch []byte
}

const outcomeChunk = 1 << 14

func (o *outcomeLog) rec(i uint32) *outcomeRec { return &o.recs[i/outcomeChunk][i%outcomeChunk] }

type outcomeRec struct {
	hash   uint64    // of key
	key    arena.Ref // batch "\x00" item
	refund arena.Ref // refunded: the refund id; final failure: the code
	at     location
	seq    int
	final  bool // a final failure; else refunded
}

func newOutcomeLog() *outcomeLog { return &outcomeLog{seed: maphash.MakeSeed()} }

// addRecord logs r if it is an outcome.
func (o *outcomeLog) addRecord(r *Record, seq int, at location) {
	switch {
	case r.Type == TypeRefunded:
		o.add(false, r.Batch, r.Item, r.Refund, seq, at)
	case r.Type == TypeFailed && r.Final:
		o.add(true, r.Batch, r.Item, r.Code, seq, at)
	}
}

// add logs an outcome: a refund id, or the code of a final failure.
func (o *outcomeLog) add(final bool, batch, item, id string, seq int, at location) {
	o.scratch = append(append(append(o.scratch[:0], batch...), 0), item...)
	key := o.strs.Add(unsafe.String(unsafe.SliceData(o.scratch), len(o.scratch)))
	if o.n%outcomeChunk == 0 {
		o.recs = append(o.recs, make([]outcomeRec, outcomeChunk))
	}
	*o.rec(uint32(o.n)) = outcomeRec{
		hash: maphash.String(o.seed, o.strs.Get(key)), key: key, refund: o.strs.Add(id),
		at: at, seq: seq, final: final,
	}
	o.n++
}

// conflicts finds, per item, the outcomes that disagree with the item's
// first refund or first final failure, in merge order, and the items they
// concern.
func (o *outcomeLog) conflicts(paths []string) ([]Conflict, map[string]bool) {
	// Group by hash with a stable radix sort on its top 32 bits: outcomes
	// of one item end up together, in merge order.
	idx := make([]uint64, o.n)
	for i := range idx {
		idx[i] = o.rec(uint32(i)).hash&^(1<<32-1) | uint64(i)
	}
	tmp := make([]uint64, len(idx))
	for shift := 32; shift < 64; shift += 16 {
		var count [1 << 16]int
		for _, v := range idx {
			count[v>>shift&0xffff]++
		}
		sum := 0
		for i, c := range count {
			count[i], sum = sum, sum+c
		}
		for _, v := range idx {
			d := v >> shift & 0xffff
			tmp[count[d]] = v
			count[d]++
		}
		idx, tmp = tmp, idx
	}
	var (
		found []Conflict
		seqs  []int
		items = map[string]bool{}
	)
	for start := 0; start < len(idx); {
		end := start + 1
		for end < len(idx) && idx[end]>>32 == idx[start]>>32 {
			end++
		}
		if end-start > 1 {
			found, seqs = o.checkGroup(idx[start:end], paths, found, seqs, items)
		}
		start = end
	}
	order := make([]int, len(found))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return seqs[a] - seqs[b] })
	sorted := make([]Conflict, len(found))
	for i, j := range order {
		sorted[i] = found[j]
	}
	return sorted, items
}

// checkGroup runs the outcomes of one hash group, item by item, in merge
// order.
func (o *outcomeLog) checkGroup(group []uint64, paths []string, found []Conflict, seqs []int, items map[string]bool) ([]Conflict, []int) {
	done := make([]bool, len(group))
	for i := range group {
		if done[i] {
			continue
		}
		key := o.strs.Get(o.rec(uint32(group[i])).key)
		var refunded, failed *outcomeRec
		for j := i; j < len(group); j++ {
			r := o.rec(uint32(group[j]))
			if done[j] || o.strs.Get(r.key) != key {
				continue
			}
			done[j] = true
			var reason string
			var first *outcomeRec
			switch {
			case !r.final && refunded != nil && o.strs.Get(refunded.refund) != o.strs.Get(r.refund):
				reason, first = fmt.Sprintf("refunded as %s and as %s", o.strs.Get(refunded.refund), o.strs.Get(r.refund)), refunded
			case !r.final && failed != nil:
				reason, first = fmt.Sprintf("refunded as %s after failing for good (%s)", o.strs.Get(r.refund), o.strs.Get(failed.refund)), failed
			case r.final && refunded != nil:
				reason, first = fmt.Sprintf("failed for good (%s) after being refunded as %s", o.strs.Get(r.refund), o.strs.Get(refunded.refund)), refunded
			}
			switch {
			case !r.final && refunded == nil:
				refunded = r
			case r.final && failed == nil:
				failed = r
			}
			if reason != "" {
				batch, item, _ := strings.Cut(key, "\x00")
				found = append(found, Conflict{Batch: batch, Item: item, Reason: reason, First: first.at.String(paths), Second: r.at.String(paths)})
				seqs = append(seqs, r.seq)
				items[key] = true
			}
		}
	}
	return found, seqs
}
