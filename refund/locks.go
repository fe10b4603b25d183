package refund

// The payment locks: items of one charge or payment intent are processed
// one at a time within a run, so that one's look-up sees the other's
// refund.

import (
	"context"
	"errors"
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

// payment is what the engine knows of an item's payment while it works on
// the item: the names its locks take, and what the provider holds of it,
// read at most once and only when a check needs it.
type payment struct {
	keys  []string // its charge, capture or psp_reference, or its payment intent and the intent's charges
	info  PaymentInfo
	read  bool // info was asked for
	known bool // and the provider told (not ErrNoLookup)
}

// payment names the item's payment for the run's locks: its charge,
// capture or psp_reference, or its payment intent and the intent's charges (read at the
// provider), so that a payment named by its charge on one plan line and by
// its intent on another is one.
func (e *engine) payment(ctx context.Context, it *Item, attempt int, unsent bool) (p *payment, res Result, ok bool) {
	p = &payment{}
	switch {
	case it.Charge != "":
		p.keys = []string{it.Charge}
		return p, Result{}, true
	case it.Capture != "":
		p.keys = []string{it.Capture}
		return p, Result{}, true
	case it.PSPReference != "":
		p.keys = []string{it.PSPReference}
		return p, Result{}, true
	}
	res, ok = e.readPayment(ctx, it, attempt, unsent, p)
	p.keys = append([]string{it.PaymentIntent}, p.info.Charges...)
	return p, res, ok
}

// readPayment asks the provider for the item's payment, once. ok is false
// when the read failed; res then says what became of the item.
func (e *engine) readPayment(ctx context.Context, it *Item, attempt int, unsent bool, p *payment) (res Result, ok bool) {
	if p.read {
		return Result{}, true
	}
	res, ok = e.read(ctx, it, attempt, unsent, EndpointCharges, "read the payment", func(ctx context.Context) error {
		info, err := e.cfg.Provider.Payment(ctx, paymentOf(it))
		if errors.Is(err, ErrNoLookup) {
			return nil // nothing was asked
		}
		e.lists.Add(1) // a read of the payment, counted with the look-ups
		p.info, p.known = info, err == nil
		return err
	})
	p.read = ok
	return res, ok
}
