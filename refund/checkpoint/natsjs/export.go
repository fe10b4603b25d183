package natsjs

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/checkpoint"
)

// sortedItems reads the items of batches (all when none are named) by
// batch, then plan line (items without one last, by name).
func (c *Checkpoint) sortedItems(ctx context.Context, batches []string) ([]*entry, error) {
	if c.kv == nil {
		return nil, nil
	}
	filters := []string{"item.>"}
	if len(batches) > 0 {
		filters = filters[:0]
		for _, b := range batches {
			filters = append(filters, itemsOf(b))
		}
	}
	var all []*entry
	for _, f := range filters {
		items, err := c.readItems(ctx, f)
		if err != nil {
			return nil, c.Wrap("export", err)
		}
		all = slices.AppendSeq(all, maps.Values(items))
	}
	slices.SortFunc(all, func(a, b *entry) int {
		return cmp.Or(strings.Compare(a.val.Batch, b.val.Batch), cmp.Compare(lineOrder(a), lineOrder(b)), strings.Compare(a.val.Item, b.val.Item))
	})
	return all, nil
}

func lineOrder(e *entry) int {
	if len(e.val.Plan) == 0 {
		return int(^uint(0) >> 1)
	}
	return e.val.Line
}

// Export writes the records of batches (all when none are named) as a file
// journal: each item's records in written order as one commit, in plan order.
func (c *Checkpoint) Export(ctx context.Context, w io.Writer, batches []string) (records int, last int64, err error) {
	items, err := c.sortedItems(ctx, batches)
	if err != nil {
		return 0, 0, err
	}
	bw := bufio.NewWriterSize(w, 256<<10)
	var group []byte
	for _, e := range items {
		if _, _, err := e.val.fold(itemKey(e.val.Batch, e.val.Item)); err != nil {
			return records, last, err
		}
		if len(e.val.Records) == 0 {
			continue
		}
		group = group[:0]
		for _, line := range e.val.Records {
			group = append(append(group, line...), '\n')
		}
		group = journal.AppendCommit(group, group, len(e.val.Records))
		if _, err := bw.Write(group); err != nil {
			return records, last, err
		}
		records += len(e.val.Records)
		last = max(last, int64(e.rev))
	}
	return records, last, bw.Flush()
}

// ExportPlans writes the stored plans of batches (all when none are named)
// as a plan file, batch by batch in plan order.
func (c *Checkpoint) ExportPlans(ctx context.Context, w io.Writer, batches []string) (int, error) {
	items, err := c.sortedItems(ctx, batches)
	if err != nil {
		return 0, err
	}
	bw := bufio.NewWriter(w)
	n := 0
	for _, e := range items {
		if len(e.val.Plan) == 0 {
			continue
		}
		bw.Write(e.val.Plan)
		bw.WriteByte('\n')
		n++
	}
	return n, bw.Flush()
}

// Holders counts the items of batches (all when none are named) by status,
// and those delivered and not yet acknowledged: in doubt while worked on.
func (c *Checkpoint) Holders(ctx context.Context, batches []string) ([]refund.BatchInfo, int, error) {
	if c.kv == nil {
		return nil, 0, nil
	}
	if len(batches) == 0 {
		lister, err := c.kv.ListKeysFiltered(ctx, "plan.>")
		if err != nil {
			return nil, 0, c.Wrap("holders", err)
		}
		for k := range lister.Keys() {
			b, err := untoken(strings.TrimPrefix(k, "plan."))
			if err != nil {
				return nil, 0, &CorruptError{Key: k, Err: err}
			}
			batches = append(batches, b)
		}
		slices.Sort(batches)
	}
	var out []refund.BatchInfo
	live := 0
	for _, b := range batches {
		var m manifest
		_, ok, err := getJSON(ctx, c.kv, planKey(b), &m)
		if err != nil {
			return nil, 0, c.Wrap("holders", err)
		}
		if !ok {
			continue
		}
		items, err := c.readItems(ctx, itemsOf(b))
		if err != nil {
			return nil, 0, c.Wrap("holders", err)
		}
		counts, err := countItems(items)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, refund.BatchInfo{Batch: b, Items: int64(m.Items), LoadedAt: m.LoadedAt, LoadedBy: m.LoadedBy, ByStatus: counts})
		if c.work == nil {
			continue
		}
		cons, err := c.work.Consumer(ctx, consumerName(b))
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue
		}
		if err != nil {
			return nil, 0, c.Wrap("holders", err)
		}
		ci, err := cons.Info(ctx)
		if err != nil {
			return nil, 0, c.Wrap("holders", err)
		}
		live += ci.NumAckPending
	}
	return out, live, nil
}

// ItemInfo is what the checkpoint holds of an item: who claimed it last,
// under which generation, whether it was given back, and its status.
type ItemInfo struct {
	Worker   string
	Gen      int64
	Released bool
	Status   string // as a tally counts it
	Records  int
}

// Inspect reads an item's value; ok is false when the checkpoint holds
// none. For rigs and people: a worker never needs it.
func (c *Checkpoint) Inspect(ctx context.Context, batch, item string) (info ItemInfo, ok bool, err error) {
	if c.kv == nil {
		return info, false, nil
	}
	var v itemValue
	_, ok, err = getJSON(ctx, c.kv, itemKey(batch, item), &v)
	if err != nil || !ok {
		return info, false, c.Wrap("inspect", err)
	}
	st, _, err := v.fold(itemKey(batch, item))
	if err != nil {
		return info, false, err
	}
	return ItemInfo{Worker: v.Worker, Gen: v.Gen, Released: v.Released, Status: checkpoint.StatusName(st), Records: len(v.Records)}, true, nil
}

// tally is a batch's items counted by status, kept by a watch of their
// values: a progress line costs the writes since the last, not every item.
type tally struct {
	w jetstream.KeyWatcher

	mu      sync.Mutex
	status  map[string]string // item's key -> checkpoint.StatusName, items of the plan only
	counts  map[string]int
	seen    uint64        // the revision of the last value applied
	ready   bool          // every value present when the watch began is applied
	changed chan struct{} // closed and replaced at each update
	err     error         // the watch ended
}

// Progress is the batches of the plan this run loaded, their items counted by
// status: every worker's, as their values say now.
func (c *Checkpoint) Progress(ctx context.Context) ([]refund.BatchInfo, error) {
	queues := c.queues()
	var out []refund.BatchInfo
	for _, q := range queues {
		var m manifest
		if _, _, err := getJSON(ctx, c.kv, planKey(q.batch), &m); err != nil {
			return nil, c.Wrap("tally", err)
		}
		t, err := c.tallyOf(ctx, q.batch)
		if err != nil {
			return nil, c.Wrap("tally", err)
		}
		// Bounded: a watch that fell behind (a server restarting, its
		// consumer made again) gives way to a read of every item.
		upCtx, cancel := context.WithTimeout(ctx, c.Margin())
		counts, err := t.upTo(upCtx, c.lastItemWrite(upCtx, q.batch))
		cancel()
		if err != nil && ctx.Err() == nil {
			var items map[key]*entry
			if items, err = c.readItems(ctx, itemsOf(q.batch)); err == nil {
				counts, err = countItems(items)
			}
		}
		if err != nil {
			return nil, c.Wrap("tally", err)
		}
		out = append(out, refund.BatchInfo{Batch: q.batch, Items: int64(m.Items), LoadedAt: m.LoadedAt, LoadedBy: m.LoadedBy, ByStatus: counts})
	}
	return out, nil
}

// countItems counts items by status, those of the plan only.
func countItems(items map[key]*entry) (map[string]int, error) {
	counts := map[string]int{}
	for k, e := range items {
		if len(e.val.Plan) == 0 {
			continue // records imported for an item the plan does not hold
		}
		st, _, err := e.val.fold(itemKey(k.Batch, k.Item))
		if err != nil {
			return nil, err
		}
		counts[checkpoint.StatusName(st)]++
	}
	return counts, nil
}

// lastItemWrite is the revision of the latest write of an item of batch;
// 0 when it cannot be read (the count is then given as it stands).
func (c *Checkpoint) lastItemWrite(ctx context.Context, batch string) uint64 {
	msg, err := c.kvStream.GetLastMsgForSubject(ctx, c.kvSubject(itemsOf(batch)))
	if err != nil {
		return 0
	}
	return msg.Sequence
}

// tallyOf is batch's tally, its watch started on first use.
func (c *Checkpoint) tallyOf(ctx context.Context, batch string) (*tally, error) {
	c.Mu.Lock()
	t := c.tallies[batch]
	c.Mu.Unlock()
	if t != nil {
		return t, nil
	}
	// The watch outlives ctx: it ends with Close.
	w, err := c.kv.WatchFiltered(context.WithoutCancel(ctx), []string{itemsOf(batch)})
	if err != nil {
		return nil, err
	}
	t = &tally{w: w, status: map[string]string{}, counts: map[string]int{}, changed: make(chan struct{})}
	c.Mu.Lock()
	if other := c.tallies[batch]; other != nil {
		c.Mu.Unlock()
		w.Stop()
		return other, nil
	}
	if c.tallies == nil {
		c.tallies = map[string]*tally{}
	}
	c.tallies[batch] = t
	c.Mu.Unlock()
	go t.follow()
	return t, nil
}

// follow applies each value the watch delivers until it ends.
func (t *tally) follow() {
	for e := range t.w.Updates() {
		t.mu.Lock()
		if e == nil {
			t.ready = true
		} else {
			t.apply(e)
		}
		close(t.changed)
		t.changed = make(chan struct{})
		t.mu.Unlock()
	}
	t.mu.Lock()
	t.err = errors.New("the watch of the items ended")
	close(t.changed)
	t.mu.Unlock()
}

func (t *tally) apply(e jetstream.KeyValueEntry) {
	t.seen = max(t.seen, e.Revision())
	if e.Operation() != jetstream.KeyValuePut {
		t.drop(e.Key())
		return
	}
	var v itemValue
	if err := json.Unmarshal(e.Value(), &v); err != nil || len(v.Plan) == 0 {
		return // not refundkit's, or records imported for an item the plan does not hold
	}
	st, _, err := v.fold(e.Key())
	if err != nil {
		return
	}
	t.drop(e.Key())
	name := checkpoint.StatusName(st)
	t.status[e.Key()] = name
	t.counts[name]++
}

// drop takes the item of key k out of the counts.
func (t *tally) drop(k string) {
	if was, ok := t.status[k]; ok {
		t.counts[was]--
		if t.counts[was] == 0 {
			delete(t.counts, was)
		}
		delete(t.status, k)
	}
}

// upTo waits until the watch has applied every value up to revision rev,
// and returns the counts then.
func (t *tally) upTo(ctx context.Context, rev uint64) (map[string]int, error) {
	for {
		t.mu.Lock()
		if t.err != nil {
			t.mu.Unlock()
			return nil, t.err
		}
		if t.ready && t.seen >= rev {
			counts := maps.Clone(t.counts)
			t.mu.Unlock()
			return counts, nil
		}
		changed := t.changed
		t.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
