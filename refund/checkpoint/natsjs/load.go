package natsjs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/checkpoint"
)

// Binding the plan to the checkpoint: the manifest, an item value a line,
// the work queue.

// Load binds the plan, batch by batch: the first run stores a batch's
// digest and items and queues them; the same plan again queues what is
// open and not queued (one message per item); another plan is refused at
// its first item that differs.
func (c *Checkpoint) Load(ctx context.Context, plan []refund.PlanLine) error {
	order, err := checkpoint.LoadBatches(plan, func(b string, lines []refund.PlanLine) error { return c.loadBatch(ctx, b, lines) })
	if err != nil {
		return err
	}
	if c.readOnly {
		return nil
	}
	var queues []*batchQueue
	for _, b := range order {
		q, err := c.consumer(ctx, b)
		if err != nil {
			return err
		}
		queues = append(queues, q)
	}
	c.Mu.Lock()
	c.batches = queues
	c.Mu.Unlock()
	c.sayAlive(ctx)
	return nil
}

// entry is an item's value as read, with its revision.
type entry struct {
	rev uint64
	val *itemValue
}

func (c *Checkpoint) loadBatch(ctx context.Context, batch string, lines []refund.PlanLine) error {
	docs, digest, err := refund.PlanDocs(lines)
	if err != nil {
		return err
	}
	if c.kv == nil {
		return nil // read only, and nothing stored yet
	}
	var m manifest
	mrev, ok, err := getJSON(ctx, c.kv, planKey(batch), &m)
	if err != nil {
		return c.Wrap("load plan of batch "+batch, err)
	}
	if !ok && !c.readOnly {
		m = manifest{Batch: batch, Digest: digest, Items: len(lines), LoadedAt: time.Now().UTC(), LoadedBy: c.Worker}
		mrev, err = putJSON(ctx, c.kv, planKey(batch), &m, 0, false)
		if errors.Is(err, jetstream.ErrKeyExists) {
			// Another worker stored it first: compare with theirs.
			mrev, ok, err = getJSON(ctx, c.kv, planKey(batch), &m)
			if err == nil && !ok {
				err = errors.New("the plan's manifest vanished")
			}
		}
		if err != nil {
			return c.Wrap("load plan of batch "+batch, err)
		}
	}
	items, err := c.readItems(ctx, itemsOf(batch))
	if err != nil {
		return c.Wrap("load plan of batch "+batch, err)
	}
	if afterReadItems != nil {
		afterReadItems(batch)
	}
	if (ok || !c.readOnly) && !bytes.Equal(m.Digest, digest) {
		if ok || m.LoadedBy != c.Worker {
			return c.planDiffers(batch, lines, docs, &m, items)
		}
	}
	// Records written before the plan (imported) or under it must agree
	// with every line they bind, as a file journal's do.
	for _, pl := range lines {
		e := items[key{Batch: batch, Item: pl.Item.Item}]
		if e == nil {
			continue
		}
		st, known, err := checkStored(pl, e.val)
		if err != nil {
			return err
		}
		if c.readOnly {
			c.Mu.Lock()
			if c.cache == nil {
				c.cache = map[key]cached{}
			}
			c.cache[key{Batch: batch, Item: pl.Item.Item}] = cached{st, known}
			c.Mu.Unlock()
		}
	}
	if c.readOnly {
		return nil
	}
	if err := c.storeItems(ctx, batch, lines, docs, items); err != nil {
		return err
	}
	if err := c.queue(ctx, batch, lines, items); err != nil {
		return err
	}
	if !m.Queued {
		m.Queued = true
		// A revision another loader moved on means it queued them too.
		if _, err := putJSON(ctx, c.kv, planKey(batch), &m, mrev, true); err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return c.Wrap("load plan of batch "+batch, err)
		}
	}
	return nil
}

// beforeGiveBack, when set (tests), runs between Release's write of an
// item given back and its Nak: where a pause makes the Nak late.
var beforeGiveBack func()

// afterReadItems, when set (tests), runs once a load has read the batch's
// items and before it writes any.
var afterReadItems func(batch string)

// checkStored folds the records stored for plan line pl, which must agree
// with every binding of the line, as a file journal's do.
func checkStored(pl refund.PlanLine, v *itemValue) (journal.ItemState, bool, error) {
	st, known, err := v.fold(itemKey(pl.Item.Batch, pl.Item.Item))
	if err != nil {
		return st, known, err
	}
	if known {
		if err := refund.CheckBinding(pl.Item, st); err != nil {
			return st, known, &refund.InputError{Line: pl.Line, Err: err}
		}
	}
	return st, known, nil
}

// storeItems stores the value of every line the checkpoint has none of,
// and gives imported records the plan line they lacked; items is updated.
func (c *Checkpoint) storeItems(ctx context.Context, batch string, lines []refund.PlanLine, docs []string, items map[key]*entry) error {
	return c.publishAll(ctx, len(lines), func(i int) (jetstream.PubAckFuture, error) {
		pl := lines[i]
		k := key{Batch: batch, Item: pl.Item.Item}
		e := items[k]
		switch {
		case e == nil:
			v := &itemValue{Batch: batch, Item: pl.Item.Item, Line: pl.Line, Plan: json.RawMessage(docs[i])}
			body, _ := json.Marshal(v)
			// Many at once, each only where the key holds nothing: a
			// worker loading the same plan beside this one stores the
			// same values.
			f, err := c.js.PublishAsync(c.kvSubject(itemKey(batch, pl.Item.Item)), body, jetstream.WithExpectLastSequencePerSubject(0))
			if err != nil {
				return nil, c.Wrap("store plan of batch "+batch, err)
			}
			items[k] = &entry{val: v}
			return f, nil
		case len(e.val.Plan) == 0:
			return nil, c.givePlan(ctx, pl, docs[i], items)
		case string(e.val.Plan) != docs[i]:
			return nil, &CorruptError{Key: itemKey(batch, pl.Item.Item), Err: fmt.Errorf("the stored item differs from the plan of the same digest: %s", refund.FieldsDiffer(pl.Item, string(e.val.Plan)))}
		}
		return nil, nil
	}, func(i int, ack *jetstream.PubAck, err error) error {
		pl := lines[i]
		k := key{Batch: batch, Item: pl.Item.Item}
		if err == nil {
			items[k].rev = ack.Sequence
			return nil
		}
		if !isWrongLastSeq(err) {
			return c.Wrap("store plan of batch "+batch, err)
		}
		// Stored by another loader, or by an import: read it back
		// for its revision, and check what an import wrote.
		var v itemValue
		rev, ok, err := getJSON(ctx, c.kv, itemKey(k.Batch, k.Item), &v)
		if err != nil || !ok {
			return c.Wrap("store plan of batch "+batch, cmpErr(err, "the item's value vanished"))
		}
		if _, _, err := checkStored(pl, &v); err != nil {
			return err
		}
		items[k] = &entry{rev: rev, val: &v}
		if len(v.Plan) == 0 {
			return c.givePlan(ctx, pl, docs[i], items)
		}
		return nil
	})
}

// publishAll runs publish(i) for i below n, and gives the answer of each
// publish it started (a nil future: none) to acked: awaited a window at a
// time, as the client refuses more than a few thousand outstanding (a
// server that syncs every write answers them slower than they are sent).
func (c *Checkpoint) publishAll(ctx context.Context, n int, publish func(i int) (jetstream.PubAckFuture, error), acked func(i int, ack *jetstream.PubAck, err error) error) error {
	var acks []jetstream.PubAckFuture
	var at []int
	drain := func() error {
		for j, f := range acks {
			var err error
			select {
			case ack := <-f.Ok():
				err = acked(at[j], ack, nil)
			case perr := <-f.Err():
				err = acked(at[j], nil, perr)
			case <-ctx.Done():
				return ctx.Err()
			}
			if err != nil {
				return err
			}
		}
		acks, at = acks[:0], at[:0]
		return nil
	}
	for i := range n {
		if len(acks) >= publishWindow {
			if err := drain(); err != nil {
				return err
			}
		}
		f, err := publish(i)
		if err != nil {
			return err
		}
		if f != nil {
			acks, at = append(acks, f), append(at, i)
		}
	}
	return drain()
}

// givePlan gives the records imported for plan line pl, before the plan, the
// line they lacked.
func (c *Checkpoint) givePlan(ctx context.Context, pl refund.PlanLine, doc string, items map[key]*entry) error {
	k := key{Batch: pl.Item.Batch, Item: pl.Item.Item}
	ik := itemKey(k.Batch, k.Item)
	for {
		e := items[k]
		if len(e.val.Plan) > 0 {
			if string(e.val.Plan) != doc {
				return &CorruptError{Key: ik, Err: fmt.Errorf("the stored item differs from the plan of the same digest: %s", refund.FieldsDiffer(pl.Item, string(e.val.Plan)))}
			}
			return nil
		}
		v := *e.val
		v.Line, v.Plan = pl.Line, json.RawMessage(doc)
		rev, err := putJSON(ctx, c.kv, ik, &v, e.rev, true)
		if err == nil {
			items[k] = &entry{rev: rev, val: &v}
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return c.Wrap("store plan of batch "+k.Batch, err)
		}
		var now itemValue
		rev, ok, err := getJSON(ctx, c.kv, ik, &now)
		if err != nil || !ok {
			return c.Wrap("store plan of batch "+k.Batch, cmpErr(err, "the item's value vanished"))
		}
		if _, _, err := checkStored(pl, &now); err != nil {
			return err
		}
		items[k] = &entry{rev: rev, val: &now}
	}
}

// publishWindow is how many asynchronous publishes a load has outstanding
// at most (the client's own limit is 4000).
const publishWindow = 1000

// queue queues every item of lines that is neither refunded nor failed for
// good.
func (c *Checkpoint) queue(ctx context.Context, batch string, lines []refund.PlanLine, items map[key]*entry) error {
	return c.publishAll(ctx, len(lines), func(i int) (jetstream.PubAckFuture, error) {
		pl := lines[i]
		k := key{Batch: batch, Item: pl.Item.Item}
		st, known, err := items[k].val.fold(itemKey(batch, pl.Item.Item))
		if err != nil || settled(st, known, c.opts.RetryHeld) {
			return nil, err
		}
		msg := nats.NewMsg(c.workSubjectOf(batch, pl.Item.Item))
		if settled(st, known, false) {
			// Held, queued only by this run's --allow-refunded-charges:
			// a worker without it leaves the message to one with it.
			msg.Header.Set(headerRetryHeld, "true")
		}
		f, err := c.js.PublishMsgAsync(msg)
		return f, c.Wrap("queue plan of batch "+batch, err)
	}, func(_ int, _ *jetstream.PubAck, err error) error {
		if err != nil && !isQueuedAlready(err) {
			return c.Wrap("queue plan of batch "+batch, err)
		}
		return nil
	})
}

// planDiffers names the first item of lines that differs from the plan
// stored for batch, is missing from it or is new.
func (c *Checkpoint) planDiffers(batch string, lines []refund.PlanLine, docs []string, m *manifest, items map[key]*entry) error {
	have := map[string]checkpoint.Stored{}
	for k, e := range items {
		if len(e.val.Plan) > 0 {
			have[k.Item] = checkpoint.Stored{Line: int64(e.val.Line), Plan: string(e.val.Plan)}
		}
	}
	if err := checkpoint.PlanDiffers(batch, lines, docs, m, have); err != nil {
		return err
	}
	if m.Items > len(lines) {
		return &refund.InputError{Err: fmt.Errorf("the plan of batch %q in the checkpoint (%s) has items not stored yet (its loader may have died while storing them): feed the same plan%s", batch, m, checkpoint.PlanHint)}
	}
	return newError("load plan of batch "+batch, errors.New("the digest differs but every item is the same (a checkpoint written by another build?)"))
}

// readItems reads every item value under filter, in one pass of an ordered
// consumer.
func (c *Checkpoint) readItems(ctx context.Context, filter string) (map[key]*entry, error) {
	w, err := c.kv.WatchFiltered(ctx, []string{filter})
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	out := map[key]*entry{}
	byKey := map[string]key{}
	var seen, until uint64
	replayed := false
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("the watch of the items ended early")
			}
			if e == nil {
				replayed = true
				msg, err := c.kvStream.GetLastMsgForSubject(ctx, c.kvSubject(filter))
				if errors.Is(err, jetstream.ErrMsgNotFound) {
					return out, nil // nothing under filter
				}
				if err != nil {
					return nil, err
				}
				until = msg.Sequence
			} else {
				seen = max(seen, e.Revision())
				if e.Operation() != jetstream.KeyValuePut {
					if k, ok := byKey[e.Key()]; ok {
						delete(out, k)
					}
				} else {
					v := new(itemValue)
					if err := json.Unmarshal(e.Value(), v); err != nil {
						return nil, &CorruptError{Key: e.Key(), Err: err}
					}
					k := key{Batch: v.Batch, Item: v.Item}
					byKey[e.Key()] = k
					out[k] = &entry{rev: e.Revision(), val: v}
				}
			}
			if replayed && seen >= until {
				return out, nil // every value read
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
