package refund

// A run: its workers, and the feeds that hand them plan items: a file
// journal's (feed), a shared checkpoint's claims (feedClaims), a dry run's
// over one (feedDryClaims). Items the checkpoint settles are answered by
// the feed; the others go to a worker, which lives them (process).

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund/money"
)

// Run refunds every plan item read from in (named name in errors). Canceling
// ctx stops reading input; calls already sent are finished and journaled.
// The error is an *InputError, a *HaltError, ctx's error, or a read error.
func Run(ctx context.Context, cfg Config, in io.Reader, name string) (Summary, error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 8
	}
	if cfg.MaxUnanswered <= 0 {
		cfg.MaxUnanswered = 8
	}
	if cfg.Checkpoint == nil {
		return Summary{}, errors.New("refund: no checkpoint")
	}
	if _, shared := cfg.Checkpoint.(Claims); shared && cfg.Shard.N > 0 {
		return Summary{}, errors.New("refund: a shard of the plan with a shared checkpoint: its workers claim items instead")
	}
	if cfg.Offline && !cfg.DryRun {
		return Summary{}, errors.New("refund: offline is for a dry run")
	}
	if cfg.Provider == nil && !cfg.Offline {
		return Summary{}, errors.New("refund: no provider")
	}
	var facts Facts
	if cfg.Provider != nil {
		facts = cfg.Provider.Facts()
	}
	switch {
	case cfg.Offline:
		cfg.Provider = nil // asked nothing
	case cfg.DryRun:
		cfg.Provider = readOnly{cfg.Provider}
	}
	if cfg.Backoff == (Backoff{}) {
		cfg.Backoff = facts.Backoff
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	e := &engine{cfg: cfg, facts: facts, name: facts.Name, targets: targetLocks{m: map[string]*targetLock{}}, plan: newPlanIndex(), credits: map[uint64]uint32{}}
	e.summary = Summary{Provider: facts.Name, Lookup: facts.LookupName, ByStatus: map[string]int{}, Refunded: money.Totals{}, Found: money.Totals{}}
	switch {
	case cfg.Offline:
		e.summary.Dry = DryOffline
	case cfg.DryRun:
		e.summary.Dry = DryLookup
	}
	// A halt cancels runCtx: workers waiting on the pacer or a backoff stop
	// at once. The calls themselves never see it (WithoutCancel).
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	e.stopRun = stopRun

	work := make(chan job, cfg.Workers)
	// With a shared checkpoint, free holds a token per idle worker: items
	// are claimed only as workers can take them.
	claims, dryClaims := cfg.Checkpoint.(Claims)
	_, shared := e.shared()
	free := make(chan struct{}, cfg.Workers)
	var wg sync.WaitGroup
	for range cfg.Workers {
		free <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				// After a halt nothing is called, after a signal nothing new
				// is begun: the next run takes the item up.
				if !e.halted() && ctx.Err() == nil {
					if r := e.process(runCtx, j); r.Status == statusDeferred {
						j.it = j.it.clone() // the plan's read buffers can go
						e.deferMu.Lock()
						e.deferred = append(e.deferred, j)
						e.deferMu.Unlock()
					} else {
						e.emit(e.dryOutcome(j, r))
					}
				}
				e.inFlight.Done()
				if shared {
					e.release(claims, j.it)
					free <- struct{}{}
				}
			}
		}()
	}
	var readErr error
	switch {
	case shared:
		readErr = e.feedClaims(runCtx, claims, in, name, work, free)
	case dryClaims:
		readErr = e.feedDryClaims(runCtx, claims, in, name, work)
	default:
		readErr = e.feed(runCtx, in, name, work)
	}
	close(work)
	wg.Wait()

	s := &e.summary
	s.CreateCalls, s.PaymentReads, s.RefundLists, s.RefundReads = e.creates.Load(), e.paymentReads.Load(), e.refundLists.Load(), e.refundReads.Load()
	s.RefundsTold = e.refundsTold.Load()
	s.EventsContradicting = e.eventsContradicting.Load()
	s.Retries = e.retries.Load()
	if n := int64(facts.LookupRequests); n > 1 {
		s.ListRequests = n * s.RefundLists
	}
	s.RateLimited, s.Reconciled, s.NewKeys = e.limited.Load(), e.reconciled.Load(), e.newKeys.Load()
	s.Indeterminate, s.OtherShards = e.indeterminate.Load(), e.otherShards
	st := cfg.Checkpoint.Stats()
	s.Records, s.Fsyncs = st.Records, st.Fsyncs
	if h := e.haltErr.Load(); h != nil {
		s.HaltedReason = h.Error()
		return *s, h
	}
	if readErr != nil {
		return *s, readErr
	}
	return *s, ctx.Err()
}

// journaled checks a plan item against what the checkpoint holds of it,
// and answers it when the checkpoint has settled it (done).
func (e *engine) journaled(it *Item, st journal.ItemState, known bool, name string, line int) (done bool, err error) {
	if known {
		if err := CheckBinding(it, st); err != nil {
			return true, &InputError{Name: name, Line: line, Err: err}
		}
	}
	r, done := e.settled(it, st, known)
	if done {
		e.emit(r)
	}
	return done, nil
}

// offer answers it from what c holds of it, or hands it to a worker
// (handed); ok is false when the feed is to stop, with err if not a halt.
func (e *engine) offer(ctx context.Context, c Checkpoint, it *Item, name string, line int, work chan<- job) (handed, ok bool, err error) {
	st, known, err := c.Lookup(it.Batch, it.Item)
	if err != nil {
		e.halt(&HaltError{Journal: true, Err: err})
		return false, false, nil
	}
	if done, err := e.journaled(it, st, known, name, line); done {
		return false, err == nil, err
	}
	return true, !e.halted() && e.dispatch(ctx, work, job{it: it, st: st, known: known}), nil
}

// feed hands out the plan items that need work, as the plan is read. It
// is the only reader of the journal state during a run.
func (e *engine) feed(ctx context.Context, in io.Reader, name string, work chan<- job) error {
	ctx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	batches, free := make(chan []parsedLine, 4), make(chan []parsedLine, 4)
	go readPlan(ctx, in, name, e.plan, batches, free)
	for {
		var batch []parsedLine
		select {
		case b, ok := <-batches:
			if !ok {
				return e.feedDeferred(ctx, work)
			}
			batch = b
		case <-ctx.Done():
			return nil // a signal or a halt while the plan is slow to come
		}
		held := false // a worker holds one of the batch's items
		for i := range batch {
			p := &batch[i]
			if ctx.Err() != nil || e.halted() {
				return nil
			}
			if err := e.planned(p, name); err != nil {
				return err
			}
			it := &p.item
			if !e.cfg.Shard.Holds(it) {
				e.otherShards++
				continue
			}
			handed, ok, err := e.offer(ctx, e.cfg.Checkpoint, it, name, p.line, work)
			if !ok {
				return err
			}
			held = held || handed
		}
		if !held {
			clear(batch)
			select {
			case free <- batch:
			default:
			}
		}
	}
}

// planned is the error of plan line p: its own, or why the provider cannot
// refund its item.
func (e *engine) planned(p *parsedLine, name string) error {
	if p.err != nil {
		return p.err
	}
	if err := e.facts.accepts(&p.item); err != nil {
		err.Name, err.Line = name, p.line
		return err
	}
	return nil
}

// dispatch hands j to a worker; false when the run stopped first.
func (e *engine) dispatch(ctx context.Context, work chan<- job, j job) bool {
	e.inFlight.Add(1)
	select {
	case work <- j:
		return true
	case <-ctx.Done():
		e.inFlight.Done()
		return false
	}
}

// statusDeferred is the result of an item whose look-up found a refund of
// its batch for an item the plan read so far does not list: nothing was
// journaled or sent, and the feed hands it out again once the plan is whole.
const statusDeferred = "deferred"

// feedDeferred hands out the deferred items once the plan is read to the
// end: it waits for every job in flight, since any may yet defer.
func (e *engine) feedDeferred(ctx context.Context, work chan<- job) error {
	if ctx.Err() != nil || e.halted() {
		return nil // the plan is not whole: the deferred items wait, unsent, for the next run
	}
	e.plan.whole.Store(true)
	e.inFlight.Wait()
	e.deferMu.Lock()
	jobs := e.deferred
	e.deferred = nil
	e.deferMu.Unlock()
	for _, j := range jobs {
		if e.halted() || !e.dispatch(ctx, work, j) {
			return nil
		}
	}
	return nil
}

// feedClaims reads the whole plan, loads it into the shared checkpoint and
// hands the workers the items this run claims, as slots free up, until no
// item is left for it.
func (e *engine) feedClaims(ctx context.Context, c Claims, in io.Reader, name string, work chan<- job, free chan struct{}) error {
	lines, err := e.bindPlan(ctx, c, in, name)
	if lines == nil {
		return err
	}
	items := make(map[planKey]PlanLine, len(lines))
	for _, pl := range lines {
		items[planKey{pl.Item.Batch, pl.Item.Item}] = pl
	}
	for {
		// A claim is a lease: none is taken before a worker can start on it.
		select {
		case <-free:
		case <-ctx.Done():
			return nil
		}
		n := 1
	more:
		for n < e.cfg.Workers {
			select {
			case <-free:
				n++
			default:
				break more
			}
		}
		if e.halted() {
			return nil
		}
		claimed, wait, err := c.Claim(ctx, n, e.cfg.AllowRefundedCharges)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			e.halt(&HaltError{Journal: true, Err: err})
			return nil
		}
		for range n - len(claimed) {
			free <- struct{}{} // slots not used
		}
		if len(claimed) == 0 {
			if wait == 0 {
				return nil
			}
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return nil
			}
			continue
		}
		for i, cl := range claimed {
			pl, planned := items[planKey{cl.Batch, cl.Item}]
			if !planned {
				// Load bound the checkpoint to this very plan: it broke its word.
				e.halt(&HaltError{Journal: true, Err: &unplannedClaimError{batch: cl.Batch, item: cl.Item}})
				e.releaseAll(c, claimed[i:])
				return nil
			}
			if done, err := e.journaled(pl.Item, cl.State, cl.Known, name, pl.Line); err != nil {
				e.releaseAll(c, claimed[i:])
				return err
			} else if done {
				e.release(c, pl.Item)
				free <- struct{}{}
				continue
			}
			e.inFlight.Add(1)
			work <- job{it: pl.Item, st: cl.State, known: cl.Known, burnedInRun: cl.BurnedInRun}
		}
	}
}

type planKey struct{ batch, item string }

type unplannedClaimError struct{ batch, item string }

func (e *unplannedClaimError) Error() string {
	return "the checkpoint handed out item " + quote(e.item) + " of batch " + quote(e.batch) + ", which is not in this run's plan"
}

// feedDryClaims is a dry run over a shared checkpoint: the plan is
// compared with the one it holds, then each item answered from its records
// or handed to the workers to be looked up (nothing is claimed).
func (e *engine) feedDryClaims(ctx context.Context, c Claims, in io.Reader, name string, work chan<- job) error {
	lines, err := e.bindPlan(ctx, c, in, name)
	if lines == nil {
		return err
	}
	for _, pl := range lines {
		if ctx.Err() != nil {
			return nil
		}
		if _, ok, err := e.offer(ctx, c, pl.Item, name, pl.Line, work); !ok {
			return err
		}
	}
	return nil
}

// bindPlan reads and checks every line of the plan and loads it into c
// (which only compares it when read-only): a shared checkpoint binds the
// whole plan before any item is claimed. lines is nil when the run is to
// end: with the input error to return, or nil after a halt or a stop.
func (e *engine) bindPlan(ctx context.Context, c Claims, in io.Reader, name string) ([]PlanLine, error) {
	readCtx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	batches := make(chan []parsedLine, 4)
	go readPlan(readCtx, in, name, e.plan, batches, nil)
	var lines []PlanLine
	for batch := range batches {
		for i := range batch {
			p := &batch[i]
			if err := e.planned(p, name); err != nil {
				return nil, err
			}
			lines = append(lines, PlanLine{Item: &p.item, Line: p.line})
		}
	}
	if ctx.Err() != nil || len(lines) == 0 {
		return nil, nil
	}
	e.plan.whole.Store(true)
	if err := c.Load(ctx, lines); err != nil {
		if ie, ok := err.(*InputError); ok {
			if ie.Name == "" {
				ie.Name = name
			}
			return nil, ie
		}
		e.halt(&HaltError{Journal: true, Err: err})
		return nil, nil
	}
	return lines, nil
}
