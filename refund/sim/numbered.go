package sim

import (
	"strconv"
	"strings"
	"sync"
)

// Numbered holds things numbered from 1 in creation order, with ids of
// Prefix and at least Width digits (re_sim0000000001), found without a map;
// safe for concurrent use.
type Numbered[T any] struct {
	Prefix string
	Width  int

	mu    sync.RWMutex
	items []T
}

// ID is the id of number n.
func (l *Numbered[T]) ID(n int) string { return Padded(l.Prefix, l.Width, n) }

// Padded writes prefix and n with at least width digits.
func Padded(prefix string, width, n int) string {
	d := strconv.Itoa(n)
	if len(d) < width {
		d = strings.Repeat("0", width-len(d)) + d
	}
	return prefix + d
}

// Add numbers a new thing: mk gets its number and id and returns it.
func (l *Numbered[T]) Add(mk func(n int, id string) T) T {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.items) + 1
	t := mk(n, l.ID(n))
	l.items = append(l.items, t)
	return t
}

// Get finds the thing of id, which must be written as ID writes it.
func (l *Numbered[T]) Get(id string) (T, bool) {
	var zero T
	digits, ok := strings.CutPrefix(id, l.Prefix)
	if !ok || digits == "" {
		return zero, false
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n < 1 || l.ID(n) != id {
		return zero, false
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if n > len(l.items) {
		return zero, false
	}
	return l.items[n-1], true
}

// All is every thing so far, oldest first (shared: not to be modified).
func (l *Numbered[T]) All() []T {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.items[:len(l.items):len(l.items)]
}

// Map is fn of each of ts, in order.
func Map[T, U any](ts []T, fn func(T) U) []U {
	out := make([]U, len(ts))
	for i, t := range ts {
		out[i] = fn(t)
	}
	return out
}

// Store holds an API's payments by id; its lock also guards what the API
// keeps beside them. The zero value is empty.
type Store[T any] struct {
	sync.RWMutex
	M map[string]T
}

// Get is the thing of id, or the zero T.
func (st *Store[T]) Get(id string) T {
	st.RLock()
	defer st.RUnlock()
	return st.M[id]
}

// Has reports whether id is held; the caller holds the lock.
func (st *Store[T]) Has(id string) bool {
	_, ok := st.M[id]
	return ok
}

// Put holds t under id; the caller holds the lock.
func (st *Store[T]) Put(id string, t T) {
	if st.M == nil {
		st.M = make(map[string]T)
	}
	st.M[id] = t
}
