package refund

// The payment locks: items of one charge or payment intent are processed
// one at a time within a run, so that one's look-up sees the other's
// refund.

import (
	"context"
	"slices"
	"sync"
)

// targetLocks serialise the items of one charge or payment intent within a
// run: exact, so unrelated items never wait on each other.
type targetLocks struct {
	mu sync.Mutex
	m  map[string]*targetLock
}

type targetLock struct {
	sync.Mutex
	users int
}

// lock takes the locks of keys, in sorted order so that two items that
// share some never wait on each other in a circle, and returns their release.
func (l *targetLocks) lock(keys ...string) (unlock func()) {
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	held := make([]*targetLock, len(keys))
	for i, k := range keys {
		l.mu.Lock()
		t := l.m[k]
		if t == nil {
			t = &targetLock{}
			l.m[k] = t
		}
		t.users++
		l.mu.Unlock()
		t.Lock()
		held[i] = t
	}
	return func() {
		for i := len(keys) - 1; i >= 0; i-- {
			t := held[i]
			t.Unlock()
			l.mu.Lock()
			if t.users--; t.users == 0 {
				delete(l.m, keys[i])
			}
			l.mu.Unlock()
		}
	}
}

// payment is what names the item's payment for the run's locks: its charge
// or capture, or its payment intent and the intent's charges, so that a
// payment named by its charge on one plan line and by its intent on
// another is one.
func (e *engine) payment(ctx context.Context, it *Item, attempt int, unsent bool) (keys []string, res Result, ok bool) {
	switch {
	case it.Charge != "":
		return []string{it.Charge}, Result{}, true
	case it.Capture != "":
		return []string{it.Capture}, Result{}, true
	}
	keys = []string{it.PaymentIntent}
	res, ok = e.read(ctx, it, attempt, unsent, EndpointCharges, "list the payment intent's charges", func(ctx context.Context) error {
		e.lists.Add(1) // a list call too, of charges
		ids, err := e.cfg.Provider.Charges(ctx, it.PaymentIntent)
		keys = append(keys, ids...)
		return err
	})
	return keys, res, ok
}
