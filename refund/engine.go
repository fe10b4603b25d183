package refund

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund/money"
)

// MaxLineBytes bounds one input line.
const MaxLineBytes = 1 << 20

// Config is what a run needs. Checkpoint and OnResult are required, and
// Provider unless an Offline DryRun.
type Config struct {
	// Provider makes, finds and cancels refunds (refund/provider/stripe).
	Provider Provider
	// Checkpoint records intents and outcomes, and says what earlier runs
	// recorded (Journal); read only in a DryRun.
	Checkpoint Checkpoint
	// Workers is how many items are in flight at once (default 8).
	Workers int
	// Pacer paces every API call within the run's limits; nil means none.
	Pacer *Pacer
	// DryRun reports what the real run would do, and does none of it: no
	// create or cancel call, no checkpoint write (Append is never called).
	// Items the checkpoint does not settle are looked up at the Provider
	// as the real run would, by reads alone (listings, payments, refunds),
	// paced by Pacer and retried as reads are: each result says
	// would_refund, would_adopt, would_hold or would_fail, or what the
	// checkpoint holds (skipped, failed, in doubt, pending). A shared
	// checkpoint is read, not claimed.
	DryRun bool
	// Offline makes a DryRun answer from the checkpoint alone, with no
	// look-up and no Provider (it may be nil): every item it does not hold
	// is would_refund, whatever the provider holds.
	Offline bool
	// ResendAfter500 lets an item whose key an indeterminate answer burned
	// (Stripe's own 500, in an earlier run) be sent under a new key once the
	// look-up finds nothing. Stripe may still complete such a call while it
	// repairs an incident (Facts.LateOutcomes), so without it such items
	// stay in doubt.
	ResendAfter500 bool
	// MaxUnanswered bounds the calls in a row that get no answer at all
	// before the run halts as unable to reach the provider (default 8).
	MaxUnanswered int
	// NoLookup skips the look-up at the provider before an item's first
	// call and trusts the journal alone: a new batch name, a lost or
	// restored journal or a reshard can then refund a charge twice.
	NoLookup bool
	// AllowRefundedCharges says more refunds on charges that already hold a
	// refund of another refundkit batch are intended; without it such an
	// item is held (journaled as failed, nothing sent).
	AllowRefundedCharges bool
	// AllRefunds holds items whose charge has refunds without refundkit
	// metadata too (made by hand or by older scripts).
	AllRefunds bool
	// Shard is the shard of the plan this run works (refund --shard K/N);
	// the zero Shard is all of it. Every item is read, so that a refund of
	// another shard's item on a payment is known to be the plan's; only
	// the shard's are looked up, sent and reported. A file journal's feed
	// only: a shared checkpoint's workers claim items instead.
	Shard Shard
	// Backoff spaces retries (default: the provider's Facts.Backoff).
	Backoff Backoff
	Log     *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// OnResult receives each item's result, one call at a time, after its
	// outcome is durably journaled.
	OnResult func(Result)
	// OnRetry, when set, hears of an item starting (+1) or ending (-1) a
	// wait to retry (a progress display counts them).
	OnRetry func(delta int)
}

// HaltError is a run stopped because continuing could go unrecorded
// (the checkpoint failed) or cannot succeed (the provider refused the key or
// does not answer).
type HaltError struct {
	Journal bool // the checkpoint failed; else the provider did
	Err     error
}

func (e *HaltError) Error() string {
	if e.Journal && !errors.Is(e.Err, ErrClaimLost) {
		return fmt.Sprintf("halted: journal write failed: %v", e.Err)
	}
	return fmt.Sprintf("halted: %v", e.Err)
}
func (e *HaltError) Unwrap() error { return e.Err }

// engine is the state of one run.
type engine struct {
	cfg     Config
	facts   Facts
	name    string // the provider's, in messages
	summary Summary
	outMu   sync.Mutex // serialises OnResult and summary

	haltOnce   sync.Once
	haltErr    atomic.Pointer[HaltError]
	stopRun    context.CancelFunc
	unanswered atomic.Int64
	creates    atomic.Int64
	lists      atomic.Int64
	retries    atomic.Int64
	limited    atomic.Int64
	reconciled atomic.Int64
	newKeys    atomic.Int64
	// otherShards counts the plan's items of other shards (Config.Shard),
	// read by the feed alone.
	otherShards int
	// indeterminate counts items an indeterminate answer left in doubt.
	indeterminate atomic.Int64
	targets       targetLocks
	plan          *planIndex
	// credits are the refunds this run credited (hashed id -> hashed
	// batch and item): with the checkpoint's (Checkpoint.Holder), one item
	// each.
	creditMu sync.Mutex
	credits  map[uint64]uint64
	// inFlight counts the jobs handed to workers and not finished; deferred
	// holds those a worker gave back until the plan is read to the end.
	inFlight sync.WaitGroup
	deferMu  sync.Mutex
	deferred []job
}

// job is an item that needs the API, with what the journal says of it.
type job struct {
	it    *Item
	st    journal.ItemState
	known bool // the journal holds records of the item
	// burnedInRun: the provider's indeterminate answer that burned its key
	// came during this run (another worker's call, in a shared
	// checkpoint): no new key for it in this run, as for the run's own.
	burnedInRun bool
}

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
	e := &engine{cfg: cfg, facts: facts, name: facts.Name, targets: targetLocks{m: map[string]*targetLock{}}, plan: newPlanIndex(), credits: map[uint64]uint64{}}
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
	feedCtx := runCtx

	work := make(chan job, cfg.Workers)
	// With a shared checkpoint, free holds a token per idle worker: items
	// are claimed only as workers can take them.
	claims, shared := cfg.Checkpoint.(Claims)
	dryClaims := shared && cfg.DryRun
	shared = shared && !cfg.DryRun
	free := make(chan struct{}, cfg.Workers)
	var wg sync.WaitGroup
	for range cfg.Workers {
		free <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				if !e.halted() && ctx.Err() == nil {
					if r := e.process(runCtx, j); r.Status == statusDeferred {
						// A copy of its own: the plan's batch and read
						// buffers it lies in can go.
						j.it = j.it.clone()
						e.deferMu.Lock()
						e.deferred = append(e.deferred, j)
						e.deferMu.Unlock()
					} else {
						e.emit(e.dryOutcome(j, r))
					}
				}
				e.inFlight.Done()
				// Else not started: after a halt nothing is called, after
				// a signal nothing new is begun. The journal has nothing
				// of it, and the next run takes it up.
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
		readErr = e.feedClaims(feedCtx, claims, in, name, work, free)
	case dryClaims:
		readErr = e.feedDryClaims(feedCtx, claims, in, name, work)
	default:
		readErr = e.feed(feedCtx, in, name, work)
	}
	close(work)
	wg.Wait()

	e.summary.CreateCalls = e.creates.Load()
	e.summary.ListCalls = e.lists.Load()
	if n := int64(facts.LookupRequests); n > 1 {
		e.summary.ListRequests = n * e.summary.ListCalls
	}
	e.summary.Retries = e.retries.Load()
	e.summary.RateLimited = e.limited.Load()
	e.summary.Reconciled = e.reconciled.Load()
	e.summary.NewKeys = e.newKeys.Load()
	e.summary.Indeterminate = e.indeterminate.Load()
	e.summary.OtherShards = e.otherShards
	st := cfg.Checkpoint.Stats()
	e.summary.Records, e.summary.Fsyncs = st.Records, st.Fsyncs
	if h := e.haltErr.Load(); h != nil {
		e.summary.HaltedReason = h.Error()
		return e.summary, h
	}
	if readErr != nil {
		return e.summary, readErr
	}
	return e.summary, ctx.Err()
}

// feed hands out the plan items that need work. Items the journal has
// settled are answered here, without a worker or an API call. It is the
// only reader of the journal state during a run.
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
			if p.err != nil {
				return p.err
			}
			it := &p.item
			if err := e.facts.accepts(it); err != nil {
				err.Name, err.Line = name, p.line
				return err
			}
			if !e.cfg.Shard.Holds(it) {
				e.otherShards++
				continue
			}
			st, known, err := e.cfg.Checkpoint.Lookup(it.Batch, it.Item)
			if err != nil {
				e.halt(&HaltError{Journal: true, Err: err})
				return nil
			}
			if known {
				if err := CheckBinding(it, st); err != nil {
					return &InputError{Name: name, Line: p.line, Err: err}
				}
			}
			if r, settled := e.settled(it, st, known); settled {
				e.emit(r)
				continue
			}
			if !e.dispatch(ctx, work, job{it: it, st: st, known: known}) {
				return nil
			}
			held = true
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
// its batch for an item the plan read so far does not list: whether the
// plan owns that refund is known only once the plan is read to the end.
// Nothing was journaled or sent for it; the feed hands it out again then.
const statusDeferred = "deferred"

// feedDeferred hands out again, once the plan is read to the end, the
// items the workers deferred: it waits for every job in flight, since any
// of them may yet defer, and none can once the plan is whole.
func (e *engine) feedDeferred(ctx context.Context, work chan<- job) error {
	if ctx.Err() != nil || e.halted() {
		// The plan stopped short of its end: it is not whole, and the
		// deferred items are left, unsent, for the next run.
		return nil
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

// settled answers items the journal has finished with. In a dry run so
// are the items an offline one cannot look up: those the journal does not
// hold would be refunded, those in doubt reconciled, pending ones asked.
func (e *engine) settled(it *Item, st journal.ItemState, known bool) (Result, bool) {
	offline := e.cfg.DryRun && e.cfg.Offline
	if !known {
		if offline {
			r := newResult(it, StatusWould)
			r.Amount, r.Currency = it.Amount, it.Currency
			r.Message = "not in the journal (offline: not looked up at the provider)"
			return r, true
		}
		return Result{}, false
	}
	if res, shared := e.sharedRefund(it, st); shared {
		return res, true
	}
	switch st.Status {
	case journal.StatusRefunded:
		if st.Extras != "" && !e.cfg.DryRun {
			if _, shared := e.cfg.Checkpoint.(Claims); !shared {
				return Result{}, false // a worker asks whether its extras still stand
			}
		}
		r := newResult(it, StatusSkipped)
		r.Refund, r.Amount, r.Currency, r.Attempt = st.Refund, st.Amount, st.Currency, st.Attempt
		return withExtras(r, st.ExtraIDs()), true
	case journal.StatusFailed:
		if e.cfg.AllowRefundedCharges && heldCode(st.Code) {
			break // held for a refund elsewhere on its charge: now allowed
		}
		r := newResult(it, StatusFailed)
		r.Code, r.Attempt = st.Code, st.Attempt
		r.Message = "failed for good in an earlier run (journaled); not retried"
		if heldCode(st.Code) {
			r.Message = "held in an earlier run: its charge has a refund made elsewhere; run again with --allow-refunded-charges if another refund is intended"
		}
		return r, true
	}
	if st.Status == journal.StatusPending && offline {
		return e.stillPending(it, st, "", "its refund was pending when journaled: a run asks the provider how it ended (offline: not asked)"), true
	}
	if offline {
		r := newResult(it, StatusWouldRec)
		r.Attempt = st.Attempt
		r.Message = "in doubt in the journal: the real run looks it up first (offline: not looked up)"
		if st.Unsure() {
			r.Refund, r.Code = st.Refund, journal.CodeStatusUnknown
			r.Message = "its refund is journaled in a status refundkit does not know: the real run asks the provider for it, sending nothing (offline: not asked)"
		}
		return r, true
	}
	return Result{}, false
}

// sharer is a checkpoint whose records can credit one refund to two
// items: a file journal, concatenated or edited by hand (journal-merge
// refuses it). A shared checkpoint checks each credit as it is written
// (credit, and its imports), so it needs no such check per item.
type sharer interface {
	SharedRefund(id, batch, item string) (firstBatch, firstItem string, shared bool)
}

// sharedRefund answers an item the journal credits with a refund it
// credits to another item first: one refund refunds one item at most, so
// the item is not done, and nothing is sent for it.
func (e *engine) sharedRefund(it *Item, st journal.ItemState) (Result, bool) {
	s, ok := e.cfg.Checkpoint.(sharer)
	if !ok || st.Refund == "" || !st.Credited() {
		return Result{}, false
	}
	batch, item, shared := s.SharedRefund(st.Refund, it.Batch, it.Item)
	if !shared {
		return Result{}, false
	}
	r := e.inDoubt(it, st.Attempt, CodeSharedRefund, fmt.Sprintf("the journal credits refund %s to this item and, first, to item %q of batch %q: one refund refunds one item at most, so the records cannot all be true. Nothing is sent for it; a person checks the refund at the provider (audit --stripe) and mends the journal", st.Refund, item, batch))
	r.Refund = st.Refund
	return r, true
}

// readOnly is a dry run's provider: its reads go through, and a create
// or a cancel is refused before it is sent, whatever path asks for one.
// The engine never asks in a dry run (call answers errWouldSend first);
// this makes sure of it.
type readOnly struct{ Provider }

var errDryRunWrite = &Failure{Class: ClassFatal, Code: "dry_run", Message: "a dry run sends no create or cancel", Err: errors.New("refund: a dry run sends no create or cancel")}

func (readOnly) Create(context.Context, *Item, int) (Answer, error) { return Answer{}, errDryRunWrite }
func (readOnly) Cancel(context.Context, string) (Refund, error)     { return Refund{}, errDryRunWrite }

// dryOutcome is what the real run would do with j, said of the result a
// dry run's item flow came to (process): the flow is the real run's, its
// appends no-ops (append) and its create call a would_refund (call), so
// a result that says an item was refunded, failed or held says what the
// real run would journal. Statuses that say what the journal already
// holds (pending still pending, in doubt still in doubt) stay; a real
// run's result is returned as it is.
func (e *engine) dryOutcome(j job, r Result) Result {
	if !e.cfg.DryRun {
		return r
	}
	was := journal.StatusUnknown
	if j.known {
		was = j.st.Status
	}
	switch r.Status {
	case StatusRefunded, StatusPending:
		if r.Status == StatusPending && was == journal.StatusPending && r.Refund == j.st.Refund && !r.Found {
			return r // still pending at the provider: as journaled
		}
		what := "the look-up finds the item's own refund: the real run journals it as the item's, sending nothing"
		if was == journal.StatusPending {
			what = fmt.Sprintf("its pending refund has ended %s at %s: the real run journals it", r.Status, e.name)
		}
		if r.Status == StatusPending {
			what += " (pending at " + e.name + ": journaled pending)"
		}
		r.Status, r.Message = StatusWouldAdopt, joinMessage(what, r.Message)
	case StatusFailed, StatusInDoubt:
		switch {
		case heldCode(r.Code):
			r.Status, r.Message = StatusWouldHold, joinMessage("the real run holds it", r.Message)
		case r.Status == StatusInDoubt && (was == journal.StatusInDoubt || was == journal.StatusPending):
			return r // stays in doubt: nothing the look-up found settles it
		case r.Code == CodeLookupFailed:
			r.Status, r.Message = StatusWouldFail, joinMessage("the dry run could not look it up, and neither could a real run now", r.Message)
		default:
			r.Status, r.Message = StatusWouldFail, joinMessage("the real run fails it", r.Message)
		}
	}
	return r
}

func joinMessage(a, b string) string {
	if b == "" {
		return a
	}
	return a + ": " + b
}

func (e *engine) emit(r Result) {
	if r.Status == "" {
		return // not started before a stop: nothing to say, nothing journaled
	}
	e.outMu.Lock()
	defer e.outMu.Unlock()
	e.summary.add(r)
	e.cfg.OnResult(r)
}

func (e *engine) halted() bool { return e.haltErr.Load() != nil }

// halt stops the run: no API call is made after it, by any worker.
func (e *engine) halt(h *HaltError) {
	e.haltOnce.Do(func() {
		e.haltErr.Store(h)
		e.stopRun()
		e.cfg.Log.Error(h.Error())
	})
}
