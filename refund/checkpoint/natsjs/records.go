package natsjs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
)

// cached is an item's state as a read-only Load found it.
type cached struct {
	st    journal.ItemState
	known bool
}

// Append writes recs, of one held item, as one new value under the revision
// its claim last saw: if another run took it since, nothing is written and
// it is a *refund.LostClaimError.
func (c *Checkpoint) Append(recs ...*journal.Record) error {
	if c.readOnly {
		return newError("append", errors.New("the checkpoint was opened for reading only"))
	}
	if len(recs) == 0 {
		return nil
	}
	k := key{Batch: recs[0].Batch, Item: recs[0].Item}
	c.Mu.Lock()
	cl, err := c.HeldClaim(k)
	if err != nil {
		c.Mu.Unlock()
		return err
	}
	v := *cl.val
	v.Records = slices.Clip(v.Records)
	next, burned := cl.State, false
	for _, r := range recs {
		if r.Batch != k.Batch || r.Item != k.Item {
			c.Mu.Unlock()
			return newError("append", errors.New("records of two items in one append: each item's value is written alone"))
		}
		line, err := journal.MarshalLine(nil, r)
		if err != nil {
			c.Mu.Unlock()
			return newError("append", err)
		}
		v.Records = append(v.Records, json.RawMessage(line[:len(line)-1]))
		was := next
		next = journal.Next(next, r)
		burned = burned || next.KeyBurned && !was.KeyBurned
	}
	if burned {
		v.BurnPending, v.BurnRev = true, 0
	}
	rev := cl.rev
	c.Mu.Unlock()

	// Tried through an outage while the claim lasts: the write is a
	// compare-and-set either way.
	ctx, until := context.Background(), c.claimUntil(cl, time.Now())
	for _, r := range recs {
		if r.Type == journal.TypeRefunded && r.Refund != "" {
			if err := c.credit(ctx, until, r.Refund, k); err != nil {
				if unreachable(err) {
					c.Drop(k)
				}
				return err
			}
		}
	}
	body, _ := json.Marshal(&v)
	newRev, err := c.update(ctx, until, itemKey(k.Batch, k.Item), body, rev)
	switch {
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch):
		c.Drop(k)
		return &refund.LostClaimError{Batch: k.Batch, Item: k.Item, Why: "its ack-wait ran out and another worker took it (was this worker paused, or cut off from the servers?)"}
	case unreachable(err):
		c.Drop(k)
		return &refund.LostClaimError{Batch: k.Batch, Item: k.Item, Why: "a write of it was not acknowledged within its lease (was this worker paused, or cut off from the servers?): it may or may not be stored"}
	case err != nil:
		return c.Wrap("append", err)
	}
	c.Mu.Lock()
	defer c.Mu.Unlock()
	if burned {
		v.BurnPending, v.BurnRev = false, newRev
	}
	if c.Held[k] == cl {
		cl.rev, cl.val, cl.State, cl.Known = newRev, &v, next, true
	}
	c.Written.Records += int64(len(recs))
	c.Written.Fsyncs++
	return nil
}

// credit binds refund id to item k, unless another item holds it. A try
// whose answer was lost is found again as this item's binding.
func (c *Checkpoint) credit(ctx context.Context, until func() time.Time, id string, k key) error {
	body, _ := json.Marshal(itemRef{k.Batch, k.Item})
	err := c.retry(ctx, until, func(ctx context.Context) error {
		_, err := c.kv.Create(ctx, refundKey(id), body)
		return err
	})
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return c.Wrap("credit refund "+id, err)
	}
	var ref itemRef
	_, ok, err := c.getJSON(ctx, until, refundKey(id), &ref)
	switch {
	case err != nil:
		return c.Wrap("credit refund "+id, err)
	case ok && (ref.Batch != k.Batch || ref.Item != k.Item):
		return newError("credit refund "+id, fmt.Errorf("the checkpoint credits it to item %q of batch %q already: a refund is one item's", ref.Item, ref.Batch))
	}
	return nil
}

// Lookup returns what the checkpoint holds of an item: its claim's state
// when this run holds it, else what its value says now.
func (c *Checkpoint) Lookup(batch, item string) (journal.ItemState, bool, error) {
	k := key{Batch: batch, Item: item}
	if st, known, ok := c.HeldState(k); ok {
		return st, known, nil
	}
	c.Mu.Lock()
	if ch, ok := c.cache[k]; ok {
		c.Mu.Unlock()
		return ch.st, ch.known, nil
	}
	c.Mu.Unlock()
	if c.kv == nil {
		return journal.ItemState{}, false, nil
	}
	return c.stateOf(context.Background(), c.leaseFrom(time.Now()), k)
}

func (c *Checkpoint) stateOf(ctx context.Context, until func() time.Time, k key) (journal.ItemState, bool, error) {
	var v itemValue
	_, ok, err := c.getJSON(ctx, until, itemKey(k.Batch, k.Item), &v)
	if err != nil || !ok {
		return journal.ItemState{}, false, c.Wrap("lookup", err)
	}
	return v.fold(itemKey(k.Batch, k.Item))
}

// Holder returns the item the checkpoint credits with refund id.
func (c *Checkpoint) Holder(id string) (batch, item string, ok bool, err error) {
	if c.kv == nil || id == "" {
		return "", "", false, nil
	}
	var ref itemRef
	_, ok, err = c.getJSON(context.Background(), c.leaseFrom(time.Now()), refundKey(id), &ref)
	if err != nil {
		return "", "", false, c.Wrap("holder", err)
	}
	return ref.Batch, ref.Item, ok, nil
}

// OnPayment returns the items with records, of every batch, that took the
// lock of a payment among keys (Import indexes its own), with their states,
// in the order they first took it.
func (c *Checkpoint) OnPayment(keys []string) ([]journal.PaymentItem, error) {
	if c.kv == nil || len(keys) == 0 {
		return nil, nil
	}
	ctx, until := context.Background(), c.leaseFrom(time.Now())
	seen := map[key]bool{}
	var out []journal.PaymentItem
	for _, p := range slices.Compact(slices.Sorted(slices.Values(keys))) {
		var pv paymentValue
		if _, _, err := c.getJSON(ctx, until, paymentKey(p), &pv); err != nil {
			return nil, c.Wrap("items on payment", err)
		}
		for _, r := range pv.Items {
			k := key{Batch: r.Batch, Item: r.Item}
			if seen[k] {
				continue
			}
			seen[k] = true
			st, known, held := c.HeldState(k)
			if !held {
				var err error
				if st, known, err = c.stateOf(ctx, until, k); err != nil {
					return nil, err
				}
			}
			if known {
				out = append(out, journal.PaymentItem{Batch: r.Batch, Item: r.Item, State: st})
			}
		}
	}
	return out, nil
}

// A payment's lock: one item of a payment at a time, beaten by its holder,
// fenced by a waiter when the holder stops.
func (c *Checkpoint) LockPayments(ctx context.Context, batch, item string, keys []string) (func(), error) {
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	k := key{Batch: batch, Item: item}
	c.Mu.Lock()
	cl, err := c.HeldClaim(k)
	c.Mu.Unlock()
	if err != nil {
		return nil, err
	}
	me := lockValue{Batch: batch, Item: item, Gen: cl.val.Gen, Worker: c.Worker, Lease: int64(c.Lease())}
	var taken []string
	giveUp := func() {
		c.unlock(me, taken)
		c.Mu.Lock()
		cl.payments = nil
		c.Mu.Unlock()
	}
	for _, p := range keys {
		var w lockWatch
		err := c.Await(ctx, func() error { return c.Holds(ctx, batch, item) }, func() (got bool, err error) {
			// Tried again through an outage while the lease may last.
			err = c.retry(ctx, c.claimUntil(cl, time.Now()), func(ctx context.Context) (err error) {
				got, err = c.tryLock(ctx, p, me, &w)
				return err
			})
			return got, c.Wrap("lock payment", err)
		})
		if err != nil {
			giveUp()
			return nil, err
		}
		taken = append(taken, p)
		// Beaten from now on, while the next ones are waited for.
		c.Mu.Lock()
		cl.lock, cl.payments = me, slices.Clone(taken)
		c.Mu.Unlock()
	}
	return giveUp, nil
}

// lockWatch is a waiter's view of a lock held by another claim: the
// revision it last saw, and since when by this host's monotonic clock.
type lockWatch struct {
	rev   uint64
	since time.Time
}

// stale reports whether the lock, at revision rev, has not changed for
// longer than its holder's renewals allow.
func (w *lockWatch) stale(rev uint64, l *lockValue, fallback time.Duration) bool {
	if w.since.IsZero() || w.rev != rev {
		w.rev, w.since = rev, time.Now()
		return false
	}
	return time.Since(w.since) > l.staleAfter(fallback)
}

// tryLock takes the lock of payment p for me, if it is free, or ends the
// claim of a holder that stopped beating it.
func (c *Checkpoint) tryLock(ctx context.Context, p string, me lockValue, w *lockWatch) (bool, error) {
	var pv paymentValue
	rev, ok, err := getJSON(ctx, c.kv, paymentKey(p), &pv)
	if err != nil {
		return false, err
	}
	if ok && pv.Lock != nil && !pv.Lock.sameClaim(me) {
		free, err := c.lockFree(ctx, pv.Lock, me)
		if err != nil {
			return false, err
		}
		if !free {
			if !w.stale(rev, pv.Lock, c.Lease()) {
				return false, nil
			}
			if free, err = c.fence(ctx, p, pv.Lock); err != nil || !free {
				w.since = time.Now() // its holder wrote: alive, watch again
				return false, err
			}
		}
	}
	pv.Lock = &me
	pv.add(me.Batch, me.Item)
	_, err = putJSON(ctx, c.kv, paymentKey(p), &pv, rev, ok)
	if raced(err) {
		return false, nil // taken or changed a moment ago: look again
	}
	return err == nil, err
}

// lockFree reports whether lock l no longer stands in me's way: it is an
// earlier claim of the same item, or its item's claim has ended.
func (c *Checkpoint) lockFree(ctx context.Context, l *lockValue, me lockValue) (bool, error) {
	if l.Batch == me.Batch && l.Item == me.Item {
		return l.Gen <= me.Gen, nil
	}
	var v itemValue
	_, ok, err := getJSON(ctx, c.kv, itemKey(l.Batch, l.Item), &v)
	if err != nil || !ok {
		return !ok, err
	}
	return c.claimEnded(&v, l)
}

// claimEnded reports whether the claim lock l belongs to is over in v, its
// item's value: claimed again since, given back, or settled.
func (c *Checkpoint) claimEnded(v *itemValue, l *lockValue) (bool, error) {
	if v.Gen != l.Gen || v.Released {
		return true, nil
	}
	st, known, err := v.fold(itemKey(l.Batch, l.Item))
	if err != nil {
		return false, err
	}
	return settled(st, known, false), nil
}

// fence ends the claim holding payment p's lock l, unrenewed for a lease:
// bumping its item's generation under the revision read keeps its holder
// (paused, killed, cut off) from writing, so from sending, anything more.
func (c *Checkpoint) fence(ctx context.Context, p string, l *lockValue) (bool, error) {
	ik := itemKey(l.Batch, l.Item)
	var v itemValue
	rev, ok, err := getJSON(ctx, c.kv, ik, &v)
	if err != nil || !ok {
		return !ok, err
	}
	if ended, err := c.claimEnded(&v, l); err != nil || ended {
		return ended, err
	}
	nv := v
	nv.Gen++
	nv.Released = true
	nv.BurnRev, nv.BurnPending = v.burnRev(rev), false
	_, err = putJSON(ctx, c.kv, ik, &nv, rev, true)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	c.Warn(fmt.Sprintf("payment %s: its lock, held by item %q of batch %q (worker %s), was not renewed for %s: that claim is ended (its worker died, was paused or is cut off; it can write nothing more for the item, which is worked again once its ack-wait runs out)",
		p, l.Item, l.Batch, l.Worker, l.staleAfter(c.Lease())))
	return true, nil
}

// unlock gives up me's locks of keys; a failure leaves them to end with
// the claim.
func (c *Checkpoint) unlock(me lockValue, keys []string) {
	ctx, cancel := context.WithTimeout(context.Background(), c.Margin())
	defer cancel()
	for _, p := range keys {
		c.rewriteLock(ctx, p, me, func(pv *paymentValue) { pv.Lock = nil })
	}
}

// beat tells waiters that me's claim still holds its locks of keys.
func (c *Checkpoint) beat(ctx context.Context, me lockValue, keys []string) {
	for _, p := range keys {
		c.rewriteLock(ctx, p, me, func(pv *paymentValue) { pv.Lock.Beat++ })
	}
}

// rewriteLock applies change to payment p's value while me holds its lock;
// false when it does not, or the write failed.
func (c *Checkpoint) rewriteLock(ctx context.Context, p string, me lockValue, change func(*paymentValue)) bool {
	for try := 0; try < 4; try++ {
		var pv paymentValue
		rev, ok, err := getJSON(ctx, c.kv, paymentKey(p), &pv)
		if err != nil || !ok || pv.Lock == nil || !pv.Lock.sameClaim(me) {
			return false
		}
		change(&pv)
		_, err = putJSON(ctx, c.kv, paymentKey(p), &pv, rev, true)
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return err == nil
		}
	}
	return false
}
