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

// Append writes recs, all of one item this run holds, as one new value of the
// item under the revision its claim last wrote or read: a claim another run
// took since fails with a *refund.LostClaimError, and nothing is written.
func (c *Checkpoint) Append(recs ...*journal.Record) error {
	if c.readOnly {
		return &Error{Op: "append", Err: errors.New("the checkpoint was opened for reading only")}
	}
	if len(recs) == 0 {
		return nil
	}
	k := key{Batch: recs[0].Batch, Item: recs[0].Item}
	c.Mu.Lock()
	cl := c.Held[k]
	if cl == nil {
		c.Mu.Unlock()
		return &refund.LostClaimError{Batch: k.Batch, Item: k.Item, Why: "this run holds no claim of it"}
	}
	v := *cl.val
	v.Records = slices.Clip(v.Records)
	next, burned := cl.State, false
	for _, r := range recs {
		if r.Batch != k.Batch || r.Item != k.Item {
			c.Mu.Unlock()
			return &Error{Op: "append", Err: errors.New("records of two items in one append: each item's value is written alone")}
		}
		line, err := journal.MarshalLine(nil, r)
		if err != nil {
			c.Mu.Unlock()
			return &Error{Op: "append", Err: err}
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
		return &Error{Op: "credit refund " + id, Err: fmt.Errorf("the checkpoint credits it to item %q of batch %q already: a refund is one item's", ref.Item, ref.Batch)}
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

// OnPayment returns the items, of every batch, that took the lock of a
// payment among keys (every item does before its first call; Import
// indexes imported ones), with the states their records fold to, in the
// order they first took it. Items with no records are left out.
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

// statusName is an item's status as a tally counts it.
func statusName(st journal.ItemState) string {
	if st.Status == journal.StatusRefunded && st.Extras != "" {
		return "duplicate"
	}
	return st.Status.String()
}
