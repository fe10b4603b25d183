package journal

import "unsafe"

// outcomeChecker finds the conflicts of a merge's outcomes on a goroutine
// of its own, a batch at a time and in order, touching a batch's table
// slots first so that their cache misses overlap.
type outcomeChecker struct {
	items *Index[firstOutcomes]
	found *conflicts
	cur   *outcomeBatch
	full  chan *outcomeBatch // to the checking goroutine
	free  chan *outcomeBatch // back from it
	done  chan struct{}
	open  bool
}

type outcomeBatch struct {
	strs    []byte // the outcomes' strings, end to end
	pending []pendingOutcome

	outs    []outcome
	hashes  []uint64
	refunds []uint64 // hashes of the refund ids (0 for a failure)
	touched uint32   // keeps the touches from being optimized away
}

type pendingOutcome struct {
	final  bool
	ends   [6]int // where its batch, item, name, refund, currency and payment end in strs
	amount int64
	done   bool
	at     location
}

const (
	outcomeBatchSize = 1024
	outcomeBatches   = 3 // one filling, one being checked, one waiting
)

func newOutcomeChecker(found *conflicts, expect int) *outcomeChecker {
	c := &outcomeChecker{
		items: NewIndex[firstOutcomes](), found: found, cur: &outcomeBatch{},
		full: make(chan *outcomeBatch, outcomeBatches), free: make(chan *outcomeBatch, outcomeBatches),
		done: make(chan struct{}), open: true,
	}
	for range outcomeBatches - 1 {
		c.free <- &outcomeBatch{}
	}
	go func() {
		defer close(c.done)
		c.items.Reserve(expect)
		c.found.refunds.reserve(expect)
		for b := range c.full {
			b.check(c.items, c.found)
			c.free <- b
		}
	}()
	return c
}

func (c *outcomeChecker) add(o outcome, at location) {
	b := c.cur
	p := pendingOutcome{final: o.final, amount: o.amount, done: o.done, at: at}
	for k, s := range [6]string{o.batch, o.item, o.name, o.refund, o.currency, o.payment} {
		b.strs = append(b.strs, s...)
		p.ends[k] = len(b.strs)
	}
	b.pending = append(b.pending, p)
	if len(b.pending) == outcomeBatchSize {
		c.full <- b
		c.cur = <-c.free
	}
}

// close checks what is queued and stops; found is complete after it.
func (c *outcomeChecker) close() {
	if !c.open {
		return
	}
	c.open = false
	c.full <- c.cur
	close(c.full)
	<-c.done
}

func (b *outcomeBatch) check(items *Index[firstOutcomes], found *conflicts) {
	strs := unsafe.String(unsafe.SliceData(b.strs), len(b.strs))
	b.outs, b.hashes, b.refunds = b.outs[:0], b.hashes[:0], b.refunds[:0]
	start := 0
	for _, p := range b.pending {
		o := outcome{final: p.final, batch: strs[start:p.ends[0]], item: strs[p.ends[0]:p.ends[1]], name: strs[p.ends[1]:p.ends[2]],
			refund: strs[p.ends[2]:p.ends[3]], currency: strs[p.ends[3]:p.ends[4]], payment: strs[p.ends[4]:p.ends[5]], amount: p.amount, done: p.done}
		start = p.ends[5]
		var rh uint64
		if !o.final {
			rh = items.HashItem(o.name)
		}
		b.outs, b.hashes, b.refunds = append(b.outs, o), append(b.hashes, items.HashItem(o.item)), append(b.refunds, rh)
	}
	var touched uint32
	for k, h := range b.hashes {
		touched += items.Touch(h) + found.refunds.table.Touch(b.refunds[k])
	}
	b.touched += touched
	view := plainItems{items}
	for k, o := range b.outs {
		id, added := items.AddHashed(o.batch, o.item, b.hashes[k])
		slotOf(items, id, added)
		found.checkItem(view, id, o, b.refunds[k], b.pending[k].at)
	}
	b.strs, b.pending = b.strs[:0], b.pending[:0]
}
