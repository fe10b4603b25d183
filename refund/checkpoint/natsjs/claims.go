package natsjs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
)

// Load binds the plan to the checkpoint, batch by batch: the first run to
// load a batch stores its manifest (the plan's digest) and its items, then
// queues every item; the same plan again queues what is left of it (items
// neither refunded nor failed for good, and not queued already: the work
// stream keeps one message per item); another plan under the batch is
// refused with the first item that differs. A read-only checkpoint only
// compares, and keeps the items' states for Lookup.
func (c *Checkpoint) Load(ctx context.Context, plan []refund.PlanLine) error {
	byBatch := map[string][]refund.PlanLine{}
	var order []string
	for _, pl := range plan {
		if _, ok := byBatch[pl.Item.Batch]; !ok {
			order = append(order, pl.Item.Batch)
		}
		byBatch[pl.Item.Batch] = append(byBatch[pl.Item.Batch], pl)
	}
	for _, b := range order {
		if err := c.loadBatch(ctx, b, byBatch[b]); err != nil {
			return err
		}
	}
	c.mu.Lock()
	for _, pl := range plan {
		c.planned[key{pl.Item.Batch, pl.Item.Item}] = true
	}
	c.mu.Unlock()
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
	c.mu.Lock()
	c.batches = queues
	c.mu.Unlock()
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
		return c.wrap("load plan of batch "+batch, err)
	}
	if !ok && !c.readOnly {
		m = manifest{Batch: batch, Digest: digest, Items: len(lines), LoadedAt: time.Now().UTC(), LoadedBy: c.worker}
		body, _ := json.Marshal(&m)
		mrev, err = c.kv.Create(ctx, planKey(batch), body)
		if errors.Is(err, jetstream.ErrKeyExists) {
			// Another worker stored it first: compare with theirs.
			mrev, ok, err = getJSON(ctx, c.kv, planKey(batch), &m)
			if err == nil && !ok {
				err = errors.New("the plan's manifest vanished")
			}
		}
		if err != nil {
			return c.wrap("load plan of batch "+batch, err)
		}
	}
	items, err := c.readItems(ctx, itemsOf(batch))
	if err != nil {
		return c.wrap("load plan of batch "+batch, err)
	}
	if afterReadItems != nil {
		afterReadItems(batch)
	}
	if (ok || !c.readOnly) && !bytes.Equal(m.Digest, digest) {
		if ok || m.LoadedBy != c.worker {
			return c.planDiffers(batch, lines, docs, &m, items)
		}
	}
	// Records written before the plan (imported) or under it must agree
	// with every line they bind, as a file journal's do.
	for _, pl := range lines {
		e := items[key{batch, pl.Item.Item}]
		if e == nil {
			continue
		}
		st, known, err := checkStored(pl, e.val)
		if err != nil {
			return err
		}
		if c.readOnly {
			c.mu.Lock()
			if c.cache == nil {
				c.cache = map[key]cached{}
			}
			c.cache[key{batch, pl.Item.Item}] = cached{st, known}
			c.mu.Unlock()
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
		body, _ := json.Marshal(&m)
		// A revision another loader moved on means it queued them too.
		if _, err := c.kv.Update(ctx, planKey(batch), body, mrev); err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return c.wrap("load plan of batch "+batch, err)
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
	var acks []jetstream.PubAckFuture
	var made []key
	var madeLines []refund.PlanLine
	var madeAt []int
	// The acknowledgments are awaited a window at a time: the client
	// refuses more than a few thousand outstanding (a server that syncs
	// every write answers them slower than they are sent).
	drain := func() error {
		for i, f := range acks {
			select {
			case ack := <-f.Ok():
				items[made[i]].rev = ack.Sequence
			case err := <-f.Err():
				if !isWrongLastSeq(err) {
					return c.wrap("store plan of batch "+batch, err)
				}
				// Stored by another loader, or by an import: read it back
				// for its revision, and check what an import wrote.
				var v itemValue
				rev, ok, err := getJSON(ctx, c.kv, itemKey(made[i].batch, made[i].item), &v)
				if err != nil || !ok {
					return c.wrap("store plan of batch "+batch, cmpErr(err, "the item's value vanished"))
				}
				if _, _, err := checkStored(madeLines[i], &v); err != nil {
					return err
				}
				items[made[i]] = &entry{rev: rev, val: &v}
				if len(v.Plan) == 0 {
					if err := c.givePlan(ctx, madeLines[i], docs[madeAt[i]], items); err != nil {
						return err
					}
				}
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		acks, made, madeLines, madeAt = acks[:0], made[:0], madeLines[:0], madeAt[:0]
		return nil
	}
	for i, pl := range lines {
		if len(acks) >= publishWindow {
			if err := drain(); err != nil {
				return err
			}
		}
		k := key{batch, pl.Item.Item}
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
				return c.wrap("store plan of batch "+batch, err)
			}
			acks = append(acks, f)
			made, madeLines, madeAt = append(made, k), append(madeLines, pl), append(madeAt, i)
			items[k] = &entry{val: v}
		case len(e.val.Plan) == 0:
			if err := c.givePlan(ctx, pl, docs[i], items); err != nil {
				return err
			}
		case string(e.val.Plan) != docs[i]:
			return &CorruptError{Key: itemKey(batch, pl.Item.Item), Err: fmt.Errorf("the stored item differs from the plan of the same digest: %s", refund.FieldsDiffer(pl.Item, string(e.val.Plan)))}
		}
	}
	return drain()
}

// givePlan gives the records imported for plan line pl, before the plan,
// the line they lacked. An import or a worker writing the item meanwhile
// moves its revision on: it is read, and checked, again.
func (c *Checkpoint) givePlan(ctx context.Context, pl refund.PlanLine, doc string, items map[key]*entry) error {
	k := key{pl.Item.Batch, pl.Item.Item}
	ik := itemKey(k.batch, k.item)
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
		body, _ := json.Marshal(&v)
		rev, err := c.kv.Update(ctx, ik, body, e.rev)
		if err == nil {
			items[k] = &entry{rev: rev, val: &v}
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return c.wrap("store plan of batch "+k.batch, err)
		}
		var now itemValue
		rev, ok, err := getJSON(ctx, c.kv, ik, &now)
		if err != nil || !ok {
			return c.wrap("store plan of batch "+k.batch, cmpErr(err, "the item's value vanished"))
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

// queue queues every item of lines that is neither refunded nor failed
// for good. The work stream keeps one message per item: an item queued
// already (waiting, or held by a worker) is refused, and not delivered
// twice.
func (c *Checkpoint) queue(ctx context.Context, batch string, lines []refund.PlanLine, items map[key]*entry) error {
	var acks []jetstream.PubAckFuture
	drain := func() error {
		for _, f := range acks {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				if !isQueuedAlready(err) {
					return c.wrap("queue plan of batch "+batch, err)
				}
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		acks = acks[:0]
		return nil
	}
	for _, pl := range lines {
		if len(acks) >= publishWindow {
			if err := drain(); err != nil {
				return err
			}
		}
		k := key{batch, pl.Item.Item}
		st, known, err := items[k].val.fold(itemKey(batch, pl.Item.Item))
		if err != nil {
			return err
		}
		if settled(st, known, c.opts.RetryHeld) {
			continue
		}
		msg := nats.NewMsg(c.workSubjectOf(batch, pl.Item.Item))
		if settled(st, known, false) {
			// Held, queued only by this run's --allow-refunded-charges:
			// a worker without it leaves the message to one with it.
			msg.Header.Set(headerRetryHeld, "true")
		}
		f, err := c.js.PublishMsgAsync(msg)
		if err != nil {
			return c.wrap("queue plan of batch "+batch, err)
		}
		acks = append(acks, f)
	}
	return drain()
}

// planDiffers names the first item of lines that differs from the plan
// stored for batch, is missing from it or is new.
func (c *Checkpoint) planDiffers(batch string, lines []refund.PlanLine, docs []string, m *manifest, items map[key]*entry) error {
	const hint = "; the checkpoint holds one plan per batch: feed every worker the same plan, or plan the change under a new batch name"
	have := map[string]*itemValue{}
	for k, e := range items {
		if len(e.val.Plan) > 0 {
			have[k.item] = e.val
		}
	}
	for i, pl := range lines {
		v, ok := have[pl.Item.Item]
		if !ok {
			return &refund.InputError{Line: pl.Line, Err: fmt.Errorf("item %q is not in the plan of batch %q in the checkpoint (%s)%s", pl.Item.Item, batch, m, hint)}
		}
		if string(v.Plan) != docs[i] {
			return &refund.InputError{Line: pl.Line, Err: fmt.Errorf("item %q of batch %q differs from the plan in the checkpoint (%s): %s%s", pl.Item.Item, batch, m, refund.FieldsDiffer(pl.Item, string(v.Plan)), hint)}
		}
		delete(have, pl.Item.Item)
	}
	missing := slices.SortedFunc(maps.Keys(have), func(a, b string) int { return have[a].Line - have[b].Line })
	if len(missing) > 0 {
		return &refund.InputError{Err: fmt.Errorf("item %q of batch %q (line %d of the plan in the checkpoint, %s) is missing from this plan, and %d more%s", missing[0], batch, have[missing[0]].Line, m, len(missing)-1, hint)}
	}
	if m.Items > len(lines) {
		return &refund.InputError{Err: fmt.Errorf("the plan of batch %q in the checkpoint (%s) has items not stored yet (its loader may have died while storing them): feed the same plan%s", batch, m, hint)}
	}
	return &Error{Op: "load plan of batch " + batch, Err: errors.New("the digest differs but every item is the same (a checkpoint written by another build?)")}
}

// readItems reads every item value under filter, in one pass of an
// ordered consumer. A watch's replay skips a value replaced while it runs
// (its new one comes after the replay's end), so the read goes on until it
// has seen the latest write under filter as of the replay's end: every
// value is then read, as of then or later.
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
					k := key{v.Batch, v.Item}
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

// consumer is the batch's shared consumer, made by the first worker to
// need it. Its ack-wait is every worker's lease.
func (c *Checkpoint) consumer(ctx context.Context, batch string) (*batchQueue, error) {
	name := consumerName(batch)
	cons, err := c.work.Consumer(ctx, name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		cons, err = c.work.CreateConsumer(ctx, jetstream.ConsumerConfig{
			Durable:       name,
			Description:   "refundkit workers of batch " + batch,
			FilterSubject: workSubject(c.loc.name) + "." + token(batch) + ".>",
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       c.opts.Lease,
			MaxDeliver:    -1,
			MaxAckPending: 100000,
		})
		if errors.Is(err, jetstream.ErrConsumerExists) {
			cons, err = c.work.Consumer(ctx, name)
		}
	}
	if err != nil {
		return nil, c.wrap("open the queue of batch "+batch, err)
	}
	// The shortest ack-wait of the run's batches is its lease.
	if wait := cons.CachedInfo().Config.AckWait; wait > 0 && wait != c.opts.Lease {
		c.opts.Warn(fmt.Sprintf("the queue of batch %s has an ack-wait of %s, which is the lease of every worker of the batch (--lease %s is for a queue this run makes)", batch, wait, c.opts.Lease))
		if wait < c.leaseNow() {
			c.lease.Store(int64(wait))
			// Renew at a third of it from now on, not of --lease.
			select {
			case c.leaseCut <- struct{}{}:
			default:
			}
		}
	}
	return &batchQueue{batch: batch, cons: cons}, nil
}

// consumerName is the durable consumer of a batch's queue.
func consumerName(batch string) string {
	sum := sha256.Sum256([]byte(batch))
	return "batch_" + hex.EncodeToString(sum[:16])
}

// Claim takes up to n items from the batches' queues. An item is the
// claimant's once its value's generation is bumped under the revision it
// read: a write of an earlier holder, whose ack-wait ran out, then fails.
// Items settled meanwhile are acknowledged and passed over; an item this
// run gave back unsettled is not taken again by it (another worker takes
// it, or the next run). When it takes none, wait > 0 says items are still
// queued or held by workers (one of them may die), 0 that nothing is left
// but what this run leaves alone.
func (c *Checkpoint) Claim(ctx context.Context, n int, retryHeld bool) ([]refund.Claimed, time.Duration, error) {
	c.mu.Lock()
	queues := c.batches
	c.mu.Unlock()
	var out []refund.Claimed
	for _, q := range queues {
		// Messages this run passes over (items it leaves to others,
		// settled ones) do not fill its slots: it asks again until the
		// queue has no more to give now. A left item's message is delayed
		// as it is given back, so it is not delivered again at once: were
		// it counted, a run could be handed its own given-back items
		// first, every time, and never the rest.
		for len(out) < n {
			start := time.Now()
			ask := n - len(out)
			msgs, err := q.cons.FetchNoWait(ask)
			if errors.Is(err, nats.ErrNoResponders) {
				// A consumer another worker made a moment ago is not
				// serving yet (or a server is restarting): ask again,
				// unless it is gone.
				return out, c.pollWait(), c.consumerGone(ctx, q)
			}
			if unreachable(err) {
				if len(out) > 0 {
					return out, 0, nil
				}
				return nil, c.pollWait(), c.claimsUnanswered(err)
			}
			if err != nil {
				return nil, 0, c.wrap("claim", err)
			}
			got := 0
			for msg := range msgs.Messages() {
				got++
				cl, err := c.take(ctx, msg, start, retryHeld)
				if err != nil {
					return nil, 0, err
				}
				if cl != nil {
					out = append(out, *cl)
				}
			}
			if err := msgs.Error(); errors.Is(err, nats.ErrNoResponders) && len(out) == 0 {
				return nil, c.pollWait(), c.consumerGone(ctx, q)
			} else if unreachable(err) && !errors.Is(err, nats.ErrNoResponders) {
				// The servers are away: ask again, for a lease at most.
				if len(out) > 0 {
					return out, 0, nil
				}
				return nil, c.pollWait(), c.claimsUnanswered(err)
			} else if err != nil && !errors.Is(err, nats.ErrNoResponders) {
				return nil, 0, c.wrap("claim", err)
			}
			c.claimsAnswered()
			if got < ask {
				break // nothing more to give now
			}
		}
	}
	if len(out) > 0 {
		return out, 0, nil
	}
	until := c.leaseFrom(time.Now())
	for _, q := range queues {
		var info *jetstream.ConsumerInfo
		err := c.retry(ctx, until, func(ctx context.Context) (err error) {
			info, err = q.cons.Info(ctx)
			return err
		})
		if err != nil {
			return nil, 0, c.wrap("claim", err)
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			continue
		}
		var others bool
		err = c.retry(ctx, until, func(ctx context.Context) (err error) {
			others, err = c.queuedForOthers(ctx, q.batch)
			return err
		})
		if err != nil {
			return nil, 0, c.wrap("claim", err)
		}
		if others {
			return nil, c.pollWait(), nil
		}
	}
	return nil, 0, nil
}

// queuedForOthers reports whether the run is to wait for the batch's
// queue: it holds an item this run does not leave alone (waiting, or held
// by a worker that may die), or one it left that another worker holds now
// (which may settle it: the batch's tally, and this run's exit, wait for
// that). The work stream holds one message per item until it is
// acknowledged, so its subjects are the items still queued.
func (c *Checkpoint) queuedForOthers(ctx context.Context, batch string) (bool, error) {
	c.mu.Lock()
	leaves := len(c.leaves) > 0
	c.mu.Unlock()
	if !leaves {
		return true, nil
	}
	info, err := c.work.Info(ctx, jetstream.WithSubjectFilter(workSubject(c.loc.name)+"."+token(batch)+".>"))
	if err != nil {
		return false, err
	}
	var left []key
	var gens []int64
	c.mu.Lock()
	for subject := range info.State.Subjects {
		b, item, err := c.parseWork(subject)
		gen, leaves := c.leaves[key{b, item}]
		if err != nil || !leaves {
			c.mu.Unlock()
			return true, nil
		}
		left = append(left, key{b, item})
		gens = append(gens, gen)
	}
	c.mu.Unlock()
	var live map[string]bool
	for i, k := range left {
		var v itemValue
		_, ok, err := getJSON(ctx, c.kv, itemKey(k.batch, k.item), &v)
		if err != nil || !ok {
			return false, err
		}
		// Claimed since this run last saw it unheld, and not given back.
		if v.Gen > gens[i] && !v.Released {
			return true, nil
		}
		// Or a live worker of the batch has not given it back: it will
		// take it, unless the item is held (only a worker with
		// --allow-refunded-charges would; PostgreSQL's waits the same).
		st, known, err := v.fold(itemKey(k.batch, k.item))
		if err != nil {
			return false, err
		}
		if settled(st, known, false) {
			continue
		}
		if live == nil {
			if live, err = c.liveWorkers(ctx, batch); err != nil {
				return false, err
			}
			if live == nil {
				return true, nil // unknown for now: wait, and ask again
			}
		}
		for w := range live {
			if w != c.worker && !slices.Contains(v.ReleasedBy, w) {
				return true, nil
			}
		}
	}
	return false, nil
}

// headerRetryHeld marks the message of a held item queued by a worker with
// --allow-refunded-charges: only such a worker may work it, or end it.
const headerRetryHeld = "Refundkit-Retry-Held"

// leave gives msg back to the queue, for another worker to take: this
// run gave its item back, lost its claim, or may not make the retry it
// was queued for. The run ends once only such items are left.
// gen is the item's claim generation as this run last saw it unheld.
func (c *Checkpoint) leave(k key, msg jetstream.Msg, gen int64) {
	msg.NakWithDelay(c.pollWait())
	c.mu.Lock()
	c.leaves[k] = gen
	c.mu.Unlock()
}

// consumerGone is an error when q's consumer no longer exists (deleted by
// hand): polling it would wait for ever.
func (c *Checkpoint) consumerGone(ctx context.Context, q *batchQueue) error {
	_, err := c.work.Consumer(ctx, consumerName(q.batch))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return c.wrap("claim", fmt.Errorf("the queue of batch %s has no consumer %s any more (deleted by hand?): a new run makes it again", q.batch, consumerName(q.batch)))
	}
	return nil
}

// take claims the item msg delivers; nil when it is not this run's to
// work on.
func (c *Checkpoint) take(ctx context.Context, msg jetstream.Msg, start time.Time, retryHeld bool) (*refund.Claimed, error) {
	batch, item, err := c.parseWork(msg.Subject())
	if err != nil {
		msg.Term()
		return nil, &CorruptError{Key: msg.Subject(), Err: err}
	}
	k := key{batch, item}
	c.mu.Lock()
	if cl := c.held[k]; cl != nil {
		// Delivered again to this run, which still works on it (its
		// ack-wait ran out meanwhile): the new delivery carries the claim,
		// if no other worker took it in between: the next Holds reads the
		// item's value to know.
		cl.msg, cl.deadline = msg, time.Time{}
		c.mu.Unlock()
		return nil, nil
	}
	_, leaves := c.leaves[k]
	c.mu.Unlock()
	ik := itemKey(batch, item)
	until := c.leaseFrom(start)
	if leaves {
		// Another worker's to take, or the next run's. Delivered, it is
		// held by no one: its generation now is the last unheld one.
		var v itemValue
		if _, _, err := c.getJSON(ctx, until, ik, &v); err != nil {
			msg.NakWithDelay(c.pollWait())
			return nil, c.wrap("claim", err)
		}
		c.leave(k, msg, v.Gen)
		return nil, nil
	}
	for try := 0; ; try++ {
		var v itemValue
		rev, ok, err := c.getJSON(ctx, until, ik, &v)
		if err != nil {
			return nil, c.wrap("claim", err)
		}
		if !ok {
			msg.Term()
			return nil, &CorruptError{Key: ik, Err: errors.New("an item is queued that the checkpoint holds no value of (deleted by hand?)")}
		}
		st, known, err := v.fold(ik)
		if err != nil {
			return nil, err
		}
		if !retryHeld && settled(st, known, false) && !settled(st, known, true) && msg.Headers().Get(headerRetryHeld) != "" {
			// Held, and queued again by a worker with
			// --allow-refunded-charges: this one has not the flag, so
			// it neither retries the item nor ends its message.
			c.leave(k, msg, v.Gen)
			c.warnHeld.Do(func() {
				c.opts.Warn(fmt.Sprintf("item %q of batch %q is held (a refund elsewhere on its charge) and was queued again by a worker with --allow-refunded-charges: this worker, without the flag, leaves such items to workers with it, and ends once only they are left", item, batch))
			})
			return nil, nil
		}
		if settled(st, known, retryHeld) {
			// Settled by another worker since it was queued.
			msg.DoubleAck(ctx)
			return nil, nil
		}
		if v.Worker != "" && v.Worker != c.worker && !v.Released {
			// Delivered again while its live holder says it holds it, or
			// wrote it since it last said what it holds (a server killed
			// -9 forgot the delivery): left to it, and asked again later,
			// as an ack-wait would.
			var live bool
			err := c.retry(ctx, until, func(ctx context.Context) error {
				e, err := c.kv.Get(ctx, ik)
				if err != nil {
					return err
				}
				if e.Revision() != rev {
					return nil // written since: read again below, as a claim would
				}
				live, err = c.holdsLive(ctx, batch, item, v.Worker, v.Gen, e.Created())
				return err
			})
			if err != nil {
				msg.NakWithDelay(c.pollWait())
				return nil, c.wrap("claim", err)
			}
			if live {
				msg.NakWithDelay(c.leaseNow() / 3)
				return nil, nil
			}
		}
		nv := v
		nv.Gen++
		nv.Worker, nv.Released = c.worker, false
		nv.BurnRev, nv.BurnPending = v.burnRev(rev), false
		body, _ := json.Marshal(&nv)
		newRev, err := c.update(ctx, until, ik, body, rev)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) && try < 4 {
			continue // its earlier holder wrote a moment ago: read again
		}
		if err != nil {
			return nil, c.wrap("claim", err)
		}
		c.mu.Lock()
		c.held[k] = &claim{msg: msg, rev: newRev, val: &nv, state: st, known: known, deadline: start.Add(c.margin())}
		c.mu.Unlock()
		return &refund.Claimed{Batch: batch, Item: item, State: st, Known: known,
			BurnedInRun: st.KeyBurned && (nv.BurnRev == 0 || nv.BurnRev > c.startSeq)}, nil
	}
}

func (c *Checkpoint) parseWork(subject string) (batch, item string, err error) {
	rest, ok := strings.CutPrefix(subject, workSubject(c.loc.name)+".")
	bt, it, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 {
		return "", "", fmt.Errorf("not a work subject of this checkpoint")
	}
	if batch, err = untoken(bt); err == nil {
		item, err = untoken(it)
	}
	return batch, item, err
}

func (c *Checkpoint) workSubjectOf(batch, item string) string {
	return workSubject(c.loc.name) + "." + token(batch) + "." + token(item)
}

func (c *Checkpoint) kvSubject(k string) string {
	return "$KV." + bucketName(c.loc.name) + "." + k
}

// margin is how long after a delivery or renewal was asked for the
// ack-wait is surely not out by this host's clock: the lease less a tenth
// for the two clocks' drift and the renewal's way to the server.
func (c *Checkpoint) margin() time.Duration {
	lease := c.leaseNow()
	return lease - lease/10
}

func (c *Checkpoint) pollWait() time.Duration {
	return min(max(c.leaseNow()/10, 50*time.Millisecond), 250*time.Millisecond)
}

// leaseNow is the lease: the ack-wait of the batches' consumers.
func (c *Checkpoint) leaseNow() time.Duration { return time.Duration(c.lease.Load()) }

// Holds returns nil while this run's claim is live by its own monotonic
// clock. Past its deadline (a renewal failed, or the run was paused) it
// renews the claim and reads the item's value: if another run bumped its
// generation, the claim is lost and nothing more may be sent.
func (c *Checkpoint) Holds(ctx context.Context, batch, item string) error {
	k := key{batch, item}
	c.mu.Lock()
	cl := c.held[k]
	if cl == nil {
		c.mu.Unlock()
		return &refund.LostClaimError{Batch: batch, Item: item, Why: "this run holds no claim of it"}
	}
	if time.Now().Before(cl.deadline) {
		c.mu.Unlock()
		return nil
	}
	rev := cl.rev
	c.mu.Unlock()
	// Asked again through an outage while the lease may last.
	var start time.Time
	var e jetstream.KeyValueEntry
	err := c.retry(ctx, c.claimUntil(cl, time.Now()), func(ctx context.Context) error {
		c.mu.Lock()
		msg := cl.msg // a delivery again replaces it
		c.mu.Unlock()
		start = time.Now()
		if err := msg.InProgress(); err != nil {
			return err
		}
		if err := c.nc.FlushWithContext(ctx); err != nil {
			return err
		}
		var err error
		if e, err = c.kv.Get(ctx, itemKey(batch, item)); errors.Is(err, jetstream.ErrKeyNotFound) {
			e, err = nil, nil
		}
		return err
	})
	if err != nil {
		return c.wrap("renew claim", err)
	}
	if e == nil || e.Revision() != rev {
		c.drop(k)
		return &refund.LostClaimError{Batch: batch, Item: item, Why: "its ack-wait ran out and another worker took it (was this worker paused, or cut off from the servers?)"}
	}
	c.mu.Lock()
	if c.held[k] == cl {
		cl.deadline = start.Add(c.margin())
	}
	c.mu.Unlock()
	return nil
}

// drop forgets a claim another run took.
func (c *Checkpoint) drop(k key) {
	c.mu.Lock()
	delete(c.held, k)
	c.leaves[k] = math.MaxInt64 // this run halts: it waits for no one
	c.mu.Unlock()
}

// Release ends this run's claim. A settled item's message is acknowledged,
// and the server's confirmation awaited: its outcome is stored already. An
// item left unsettled (in doubt, pending, not started) is marked given
// back, under the claim's fence, and its message delivered again at once:
// another worker of the batch takes it (this run does not), or it waits in
// the queue for the next run; its look-up comes first.
func (c *Checkpoint) Release(ctx context.Context, batch, item string) error {
	k := key{batch, item}
	c.mu.Lock()
	cl := c.held[k]
	delete(c.held, k)
	done := cl != nil && settled(cl.state, cl.known, c.opts.RetryHeld)
	if cl != nil && !done {
		c.leaves[k] = cl.val.Gen
	}
	c.mu.Unlock()
	if cl == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.margin())
	defer cancel()
	until := c.leaseFrom(time.Now())
	if done {
		return c.wrap("acknowledge", c.retry(ctx, until, cl.msg.DoubleAck))
	}
	v := *cl.val
	v.Released = true
	if !slices.Contains(v.ReleasedBy, c.worker) {
		v.ReleasedBy = append(slices.Clip(v.ReleasedBy), c.worker)
	}
	body, _ := json.Marshal(&v)
	if _, err := c.update(ctx, until, itemKey(batch, item), body, cl.rev); err != nil {
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return nil // another worker holds it now: its message is theirs
		}
		return c.wrap("release claim", err)
	}
	if beforeGiveBack != nil {
		beforeGiveBack()
	}
	// Delivered again at once, to the other workers: this run leaves it.
	// Not past the claim's deadline: the server takes a Nak by stream
	// sequence, and one sent late (this run was paused since its write)
	// would take the item from a worker that claimed it meanwhile; the
	// ack-wait runs out by itself then.
	if !time.Now().Before(cl.deadline) {
		return nil
	}
	if err := cl.msg.Nak(); err != nil {
		return c.wrap("release claim", err)
	}
	return c.wrap("release claim", c.nc.FlushTimeout(c.margin()/3))
}

// LockPayments takes the locks of an item's payment keys in order, waiting
// while another item's live claim holds one. A lock is its item's claim's:
// free once that claim is gone (its generation bumped by a later claim,
// given back, or its item settled), so it needs no clock of its own. Its
// holder beats it while the claim lives (renew); a lock whose beat stopped
// for a whole lease is a dead or cut-off worker's, and its claim is ended
// (fence) rather than waited on: a worker whose every slot waits on it
// would otherwise never take its item. The payment's value lists every
// item that took its lock: OnPayment's index.
func (c *Checkpoint) LockPayments(ctx context.Context, batch, item string, keys []string) (func(), error) {
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	k := key{batch, item}
	c.mu.Lock()
	cl := c.held[k]
	c.mu.Unlock()
	if cl == nil {
		return nil, &refund.LostClaimError{Batch: batch, Item: item, Why: "this run holds no claim of it"}
	}
	me := lockValue{Batch: batch, Item: item, Gen: cl.val.Gen, Worker: c.worker, Lease: int64(c.leaseNow())}
	var taken []string
	giveUp := func() {
		c.unlock(me, taken)
		c.mu.Lock()
		cl.payments = nil
		c.mu.Unlock()
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
				return nil, c.wrap("lock payment", err)
			}
			if got {
				break
			}
			select {
			case <-time.After(c.pollWait()):
			case <-ctx.Done():
				giveUp()
				return nil, ctx.Err()
			}
		}
		taken = append(taken, p)
		// Beaten from now on, while the next ones are waited for.
		c.mu.Lock()
		cl.lock, cl.payments = me, slices.Clone(taken)
		c.mu.Unlock()
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
			if !w.stale(rev, pv.Lock, c.leaseNow()) {
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
// off) can write nothing more for it, intents included, and so send
// nothing more. The item is marked given back; its message, still the dead
// claim's, is delivered again once its ack-wait runs out. false: the item's
// value changed meanwhile (its holder is alive), nothing done.
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
	c.opts.Warn(fmt.Sprintf("payment %s: its lock, held by item %q of batch %q (worker %s), was not renewed for %s: that claim is ended (its worker died, was paused or is cut off; it can write nothing more for the item, which is worked again once its ack-wait runs out)",
		p, l.Item, l.Batch, l.Worker, l.staleAfter(c.leaseNow())))
	return true, nil
}

// unlock gives up me's locks of keys; a failure leaves them to end with
// the claim.
func (c *Checkpoint) unlock(me lockValue, keys []string) {
	ctx, cancel := context.WithTimeout(context.Background(), c.margin())
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

// renewLoop tells the server every third of a lease that this run still
// works on each item it holds, and moves their deadlines once the server
// has had the word (a flush's round trip), until Close.
func (c *Checkpoint) renewLoop() {
	defer close(c.renewDone)
	t := time.NewTicker(c.leaseNow() / 3)
	defer t.Stop()
	for {
		select {
		case <-c.stopRenew:
			return
		case <-c.leaseCut:
			// A queue's ack-wait is shorter than --lease: renew what is
			// held now, and every third of the ack-wait after.
			t.Reset(c.leaseNow() / 3)
			c.renew()
		case <-c.relinked:
			c.renew()
		case <-t.C:
			c.renew()
			ctx, cancel := context.WithTimeout(context.Background(), c.margin()/3)
			c.sayAlive(ctx)
			cancel()
		}
	}
}

func (c *Checkpoint) renew() {
	start, margin := time.Now(), c.margin()
	c.mu.Lock()
	claims := make(map[*claim]bool, len(c.held))
	var late []*claim
	for _, cl := range c.held {
		if cl.msg.InProgress() != nil {
			continue
		}
		// A claim past its deadline (this run was paused, or a renewal
		// failed) may be another worker's now: its renewal is sent, and
		// its deadline moved only once the item's value shows it is
		// still this run's, as Holds does.
		if start.Before(cl.deadline) {
			claims[cl] = true
		} else {
			late = append(late, cl)
		}
	}
	c.mu.Unlock()
	if len(claims) == 0 && len(late) == 0 {
		return
	}
	if err := c.nc.FlushTimeout(margin / 3); err != nil {
		return // not renewed: the deadlines pass, and Holds asks the server
	}
	ctx, cancel := context.WithTimeout(context.Background(), margin/3)
	defer cancel()
	for _, cl := range late {
		c.mu.Lock()
		rev, val := cl.rev, cl.val
		c.mu.Unlock()
		e, err := c.kv.Get(ctx, itemKey(val.Batch, val.Item))
		if err == nil && e.Revision() == rev {
			claims[cl] = true // a late renewal, of a claim no one took
		}
	}
	type locks struct {
		me   lockValue
		keys []string
	}
	var beats []locks
	c.mu.Lock()
	for _, cl := range c.held {
		if claims[cl] {
			cl.deadline = start.Add(margin)
			if len(cl.payments) > 0 {
				beats = append(beats, locks{cl.lock, cl.payments})
			}
		}
	}
	c.mu.Unlock()
	for _, b := range beats {
		c.beat(ctx, b.me, b.keys)
	}
}

func isWrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// isQueuedAlready is the work stream refusing a second message for an
// item (DiscardNewPerSubject).
func isQueuedAlready(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && strings.Contains(apiErr.Description, "maximum messages per subject exceeded")
}

func cmpErr(err error, otherwise string) error {
	if err != nil {
		return err
	}
	return errors.New(otherwise)
}
