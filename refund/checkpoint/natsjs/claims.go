package natsjs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/checkpoint"
)

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
		return nil, c.Wrap("open the queue of batch "+batch, err)
	}
	// The shortest ack-wait of the run's batches is its lease.
	if wait := cons.CachedInfo().Config.AckWait; wait > 0 && wait != c.opts.Lease {
		c.Warn(fmt.Sprintf("the queue of batch %s has an ack-wait of %s, which is the lease of every worker of the batch (--lease %s is for a queue this run makes)", batch, wait, c.opts.Lease))
		if wait < c.Lease() {
			c.CutLease(wait) // renewed at a third of it from now on, not of --lease
		}
	}
	return &batchQueue{batch: batch, cons: cons}, nil
}

// consumerName is the durable consumer of a batch's queue.
func consumerName(batch string) string {
	sum := sha256.Sum256([]byte(batch))
	return "batch_" + hex.EncodeToString(sum[:16])
}

// Claim takes up to n items from the batches' queues.
func (c *Checkpoint) Claim(ctx context.Context, n int, retryHeld bool) ([]refund.Claimed, time.Duration, error) {
	queues := c.queues()
	var out []refund.Claimed
	for _, q := range queues {
		// Messages this run passes over (items it leaves to others,
		// settled ones) do not fill its slots: it asks again until
		// the queue has no more to give now: counted, a run could be
		// handed its own given-back items first, every time.
		for len(out) < n {
			start := time.Now()
			ask := n - len(out)
			msgs, err := q.cons.FetchNoWait(ask)
			if errors.Is(err, nats.ErrNoResponders) {
				// A consumer another worker made a moment ago is not
				// serving yet (or a server is restarting): ask again,
				// unless it is gone.
				return out, c.PollWait(), c.consumerGone(ctx, q)
			}
			if unreachable(err) {
				if len(out) > 0 {
					return out, 0, nil
				}
				return nil, c.PollWait(), c.ClaimsUnanswered(err)
			}
			if err != nil {
				return nil, 0, c.Wrap("claim", err)
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
				return nil, c.PollWait(), c.consumerGone(ctx, q)
			} else if unreachable(err) && !errors.Is(err, nats.ErrNoResponders) {
				// The servers are away: ask again, for a lease at most.
				if len(out) > 0 {
					return out, 0, nil
				}
				return nil, c.PollWait(), c.ClaimsUnanswered(err)
			} else if err != nil && !errors.Is(err, nats.ErrNoResponders) {
				return nil, 0, c.Wrap("claim", err)
			}
			if c.ClaimsAnswered() {
				c.Answered() // an outage of claims ends
			}
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
			return nil, 0, c.Wrap("claim", err)
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
			return nil, 0, c.Wrap("claim", err)
		}
		if others {
			return nil, c.PollWait(), nil
		}
	}
	return nil, 0, nil
}

// queuedForOthers reports whether the run is to wait for the batch's queue:
// it holds an item this run does not leave alone (waiting, or held by a
// worker that may die), or one it left that another worker holds now (which
// may settle it: the batch's tally, and this run's exit, wait for that).
func (c *Checkpoint) queuedForOthers(ctx context.Context, batch string) (bool, error) {
	c.Mu.Lock()
	leaves := len(c.Left) > 0
	c.Mu.Unlock()
	if !leaves {
		return true, nil
	}
	info, err := c.work.Info(ctx, jetstream.WithSubjectFilter(workSubject(c.loc.name)+"."+token(batch)+".>"))
	if err != nil {
		return false, err
	}
	var left []key
	var gens []int64
	c.Mu.Lock()
	for subject := range info.State.Subjects {
		b, item, err := c.parseWork(subject)
		gen, leaves := c.Left[key{Batch: b, Item: item}]
		if err != nil || !leaves {
			c.Mu.Unlock()
			return true, nil
		}
		left = append(left, key{Batch: b, Item: item})
		gens = append(gens, gen)
	}
	c.Mu.Unlock()
	var live map[string]bool
	for i, k := range left {
		var v itemValue
		_, ok, err := getJSON(ctx, c.kv, itemKey(k.Batch, k.Item), &v)
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
		st, known, err := v.fold(itemKey(k.Batch, k.Item))
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
			if w != c.Worker && !slices.Contains(v.ReleasedBy, w) {
				return true, nil
			}
		}
	}
	return false, nil
}

// headerRetryHeld marks the message of a held item queued by a worker with
// --allow-refunded-charges: only such a worker may work it, or end it.
const headerRetryHeld = "Refundkit-Retry-Held"

// leave gives msg back to the queue for another worker: this run gave its
// item back, lost its claim, or may not make the retry it was queued for.
func (c *Checkpoint) leave(k key, msg jetstream.Msg, gen int64) {
	msg.NakWithDelay(c.PollWait())
	c.Mu.Lock()
	c.Left[k] = gen
	c.Mu.Unlock()
}

// consumerGone is an error when q's consumer no longer exists (deleted by
// hand): polling it would wait for ever.
func (c *Checkpoint) consumerGone(ctx context.Context, q *batchQueue) error {
	_, err := c.work.Consumer(ctx, consumerName(q.batch))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return c.Wrap("claim", fmt.Errorf("the queue of batch %s has no consumer %s any more (deleted by hand?): a new run makes it again", q.batch, consumerName(q.batch)))
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
	k := key{Batch: batch, Item: item}
	c.Mu.Lock()
	if cl := c.Held[k]; cl != nil {
		// Delivered again to this run, which still works on it (its
		// ack-wait ran out meanwhile): the new delivery carries the claim,
		// if no other worker took it in between: the next Holds reads the
		// item's value to know.
		cl.msg, cl.Deadline = msg, time.Time{}
		c.Mu.Unlock()
		return nil, nil
	}
	_, leaves := c.Left[k]
	c.Mu.Unlock()
	ik := itemKey(batch, item)
	until := c.leaseFrom(start)
	if leaves {
		// Another worker's to take, or the next run's. Delivered, it is
		// held by no one: its generation now is the last unheld one.
		var v itemValue
		if _, _, err := c.getJSON(ctx, until, ik, &v); err != nil {
			msg.NakWithDelay(c.PollWait())
			return nil, c.Wrap("claim", err)
		}
		c.leave(k, msg, v.Gen)
		return nil, nil
	}
	for try := 0; ; try++ {
		var v itemValue
		rev, ok, err := c.getJSON(ctx, until, ik, &v)
		if err != nil {
			return nil, c.Wrap("claim", err)
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
				c.Warn(fmt.Sprintf("item %q of batch %q is held (a refund elsewhere on its charge) and was queued again by a worker with --allow-refunded-charges: this worker, without the flag, leaves such items to workers with it, and ends once only they are left", item, batch))
			})
			return nil, nil
		}
		if settled(st, known, retryHeld) {
			// Settled by another worker since it was queued.
			msg.DoubleAck(ctx)
			return nil, nil
		}
		if v.Worker != "" && v.Worker != c.Worker && !v.Released {
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
				msg.NakWithDelay(c.PollWait())
				return nil, c.Wrap("claim", err)
			}
			if live {
				msg.NakWithDelay(c.Lease() / 3)
				return nil, nil
			}
		}
		nv := v
		nv.Gen++
		nv.Worker, nv.Released = c.Worker, false
		nv.BurnRev, nv.BurnPending = v.burnRev(rev), false
		body, _ := json.Marshal(&nv)
		newRev, err := c.update(ctx, until, ik, body, rev)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) && try < 4 {
			continue // its earlier holder wrote a moment ago: read again
		}
		if err != nil {
			return nil, c.Wrap("claim", err)
		}
		c.Mu.Lock()
		c.Held[k] = &claim{Claim: checkpoint.Claim{State: st, Known: known, Deadline: start.Add(c.Margin())}, msg: msg, rev: newRev, val: &nv}
		c.Mu.Unlock()
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

func (c *Checkpoint) renewClaim(ctx context.Context, k key, cl *claim) (start time.Time, lost string, err error) {
	c.Mu.Lock()
	rev := cl.rev
	c.Mu.Unlock()
	// Asked again through an outage while the lease may last.
	var e jetstream.KeyValueEntry
	err = c.retry(ctx, c.claimUntil(cl, time.Now()), func(ctx context.Context) error {
		c.Mu.Lock()
		msg := cl.msg // a delivery again replaces it
		c.Mu.Unlock()
		start = time.Now()
		if err := msg.InProgress(); err != nil {
			return err
		}
		if err := c.nc.FlushWithContext(ctx); err != nil {
			return err
		}
		var err error
		if e, err = c.kv.Get(ctx, itemKey(k.Batch, k.Item)); errors.Is(err, jetstream.ErrKeyNotFound) {
			e, err = nil, nil
		}
		return err
	})
	if err != nil {
		return start, "", c.Wrap("renew claim", err)
	}
	if e == nil || e.Revision() != rev {
		return start, "its ack-wait ran out and another worker took it (was this worker paused, or cut off from the servers?)", nil
	}
	return start, "", nil
}

// Release ends this run's claim.
func (c *Checkpoint) Release(ctx context.Context, batch, item string) error {
	k := key{Batch: batch, Item: item}
	c.Mu.Lock()
	cl := c.Held[k]
	delete(c.Held, k)
	done := cl != nil && settled(cl.State, cl.Known, c.opts.RetryHeld)
	if cl != nil && !done {
		c.Left[k] = cl.val.Gen
	}
	c.Mu.Unlock()
	if cl == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.Margin())
	defer cancel()
	until := c.leaseFrom(time.Now())
	if done {
		return c.Wrap("acknowledge", c.retry(ctx, until, cl.msg.DoubleAck))
	}
	v := *cl.val
	v.Released = true
	if !slices.Contains(v.ReleasedBy, c.Worker) {
		v.ReleasedBy = append(slices.Clip(v.ReleasedBy), c.Worker)
	}
	body, _ := json.Marshal(&v)
	if _, err := c.update(ctx, until, itemKey(batch, item), body, cl.rev); err != nil {
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return nil // another worker holds it now: its message is theirs
		}
		return c.Wrap("release claim", err)
	}
	if beforeGiveBack != nil {
		beforeGiveBack()
	}
	// Delivered again at once, to the other workers: this run leaves it.
	// Not late: the server takes a Nak by stream sequence, and a late one
	// would take the item from a worker that claimed it meanwhile.
	if !time.Now().Before(cl.Deadline) {
		return nil
	}
	if err := cl.msg.Nak(); err != nil {
		return c.Wrap("release claim", err)
	}
	return c.Wrap("release claim", c.nc.FlushTimeout(c.Margin()/3))
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

// renew tells the server that this run still works on each item it holds
// and moves their deadlines once the server has had the word (a flush).
func (c *Checkpoint) renew() {
	start, margin := time.Now(), c.Margin()
	c.Mu.Lock()
	claims := make(map[*claim]bool, len(c.Held))
	var late []*claim
	for _, cl := range c.Held {
		if cl.msg.InProgress() != nil {
			continue
		}
		// A claim past its deadline (this run was paused, or a renewal
		// failed) may be another worker's now: its renewal is sent, and
		// its deadline moved only once the item's value shows it is
		// still this run's, as Holds does.
		if start.Before(cl.Deadline) {
			claims[cl] = true
		} else {
			late = append(late, cl)
		}
	}
	c.Mu.Unlock()
	if len(claims) == 0 && len(late) == 0 {
		return
	}
	if err := c.nc.FlushTimeout(margin / 3); err != nil {
		return // not renewed: the deadlines pass, and Holds asks the server
	}
	ctx, cancel := context.WithTimeout(context.Background(), margin/3)
	defer cancel()
	for _, cl := range late {
		c.Mu.Lock()
		rev, val := cl.rev, cl.val
		c.Mu.Unlock()
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
	c.Mu.Lock()
	for _, cl := range c.Held {
		if claims[cl] {
			cl.Deadline = start.Add(margin)
			if len(cl.payments) > 0 {
				beats = append(beats, locks{cl.lock, cl.payments})
			}
		}
	}
	c.Mu.Unlock()
	for _, b := range beats {
		c.beat(ctx, b.me, b.keys)
	}
}
