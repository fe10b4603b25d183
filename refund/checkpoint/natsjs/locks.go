package natsjs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/refundkit/refundkit/refund"
)

// A payment's lock: one item of a payment at a time, beaten by its holder,
// fenced by a waiter when the holder stops.
func (c *Checkpoint) LockPayments(ctx context.Context, batch, item string, keys []string) (func(), error) {
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	k := key{Batch: batch, Item: item}
	c.Mu.Lock()
	cl := c.Held[k]
	c.Mu.Unlock()
	if cl == nil {
		return nil, &refund.LostClaimError{Batch: batch, Item: item, Why: "this run holds no claim of it"}
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
		for {
			if err := c.Holds(ctx, batch, item); err != nil {
				giveUp()
				return nil, err
			}
			// Tried again through an outage while the lease may last.
			var got bool
			err := c.retry(ctx, c.claimUntil(cl, time.Now()), func(ctx context.Context) (err error) {
				got, err = c.tryLock(ctx, p, me, &w)
				return err
			})
			if err != nil {
				giveUp()
				return nil, c.Wrap("lock payment", err)
			}
			if got {
				break
			}
			select {
			case <-time.After(c.PollWait()):
			case <-ctx.Done():
				giveUp()
				return nil, ctx.Err()
			}
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
	body, _ := json.Marshal(&pv)
	if ok {
		_, err = c.kv.Update(ctx, paymentKey(p), body, rev)
	} else {
		_, err = c.kv.Create(ctx, paymentKey(p), body)
	}
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
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

// fence ends the claim that holds payment p's lock l, whose holder renewed
// nothing for a whole lease: its item's generation is bumped under the
// revision read, as a later claim would, so its holder (paused, killed, cut
// off) can write nothing more for it, intents included, and so send nothing
// more.
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
	body, _ := json.Marshal(&nv)
	_, err = c.kv.Update(ctx, ik, body, rev)
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
		body, _ := json.Marshal(&pv)
		_, err = c.kv.Update(ctx, paymentKey(p), body, rev)
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return err == nil
		}
	}
	return false
}
