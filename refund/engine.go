package refund

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	stripe "github.com/stripe/stripe-go/v76"

	"github.com/refundkit/refundkit/journal"
)

// MaxLineBytes bounds one input line.
const MaxLineBytes = 1 << 20

// Config is what a run needs. Stripe, State and OnResult are required;
// Journal is required unless DryRun.
type Config struct {
	Stripe  *Stripe
	Journal *journal.Writer
	State   *journal.State
	// Workers is how many items are in flight at once (default 8).
	Workers int
	// Pacer paces every API call within the run's limits; nil means none.
	Pacer *Pacer
	// DryRun reads the journal and reports what would be done: no API call,
	// no journal write.
	DryRun bool
	// ResendAfter500 lets an item whose key Stripe's own 500 burned (in an
	// earlier run) be sent under a new key once the look-up finds nothing.
	// Stripe treats a 500 as indeterminate and may still complete the call
	// while it repairs an incident, so without it such items stay in doubt.
	ResendAfter500 bool
	// MaxUnanswered bounds the calls in a row that get no answer at all
	// before the run halts as unable to reach Stripe (default 8).
	MaxUnanswered int
	// NoLookup skips the look-up at Stripe before an item's first call and
	// trusts the journal alone: a new batch name, a lost or restored journal
	// or a reshard can then refund a charge twice.
	NoLookup bool
	// AllowRefundedCharges says more refunds on charges that already hold a
	// refund of another refundkit batch are intended; without it such an
	// item is held (journaled as failed, nothing sent).
	AllowRefundedCharges bool
	// AllRefunds holds items whose charge has refunds without refundkit
	// metadata too (made by hand or by older scripts).
	AllRefunds bool
	Backoff    Backoff
	Log        *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// OnResult receives each item's result, one call at a time, after its
	// outcome is durably journaled.
	OnResult func(Result)
	// OnRetry, when set, hears of an item starting (+1) or ending (-1) a
	// wait to retry (a progress display counts them).
	OnRetry func(delta int)
}

// Backoff spaces retries of one call: a random delay in [d/2, d] where d
// doubles from Base up to Max. The jitter keeps workers from retrying in step.
type Backoff struct{ Base, Max time.Duration }

// DefaultBackoff suits Stripe's rate limits.
var DefaultBackoff = Backoff{Base: 250 * time.Millisecond, Max: 16 * time.Second}

func (b Backoff) delay(n int) time.Duration {
	d := b.Max
	if n < 30 && b.Base<<n < b.Max {
		d = b.Base << n
	}
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// InputError is a plan line that was not understood. Nothing was sent for
// it, and the run stopped there.
type InputError struct {
	Name string
	Line int
	Err  error
}

func (e *InputError) Error() string { return fmt.Sprintf("%s:%d: %v", e.Name, e.Line, e.Err) }
func (e *InputError) Unwrap() error { return e.Err }

// HaltError is a run stopped because continuing could go unrecorded
// (the journal failed) or cannot succeed (Stripe refused the key or does not
// answer).
type HaltError struct {
	Journal bool // the journal failed; else Stripe did
	Err     error
}

func (e *HaltError) Error() string {
	if e.Journal {
		return fmt.Sprintf("halted: journal write failed: %v", e.Err)
	}
	return fmt.Sprintf("halted: %v", e.Err)
}
func (e *HaltError) Unwrap() error { return e.Err }

// engine is the state of one run.
type engine struct {
	cfg     Config
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
	duplicates atomic.Int64
	// indeterminate counts items Stripe's own 500 left in doubt.
	indeterminate atomic.Int64
	targets       targetLocks
	plan          *planIndex
}

// targetLocks serialise the items of one charge or payment intent within a
// run: exact, so unrelated items never wait on each other.
type targetLocks struct {
	mu sync.Mutex
	m  map[string]*targetLock
}

type targetLock struct {
	sync.Mutex
	users int
}

// lock takes the locks of keys, in sorted order so that two items that
// share some never wait on each other in a circle, and returns their release.
func (l *targetLocks) lock(keys ...string) (unlock func()) {
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	held := make([]*targetLock, len(keys))
	for i, k := range keys {
		l.mu.Lock()
		t := l.m[k]
		if t == nil {
			t = &targetLock{}
			l.m[k] = t
		}
		t.users++
		l.mu.Unlock()
		t.Lock()
		held[i] = t
	}
	return func() {
		for i := len(keys) - 1; i >= 0; i-- {
			t := held[i]
			t.Unlock()
			l.mu.Lock()
			if t.users--; t.users == 0 {
				delete(l.m, keys[i])
			}
			l.mu.Unlock()
		}
	}
}

// job is an item that needs the API, with what the journal says of it.
type job struct {
	it    *Item
	st    journal.ItemState
	known bool // the journal holds records of the item
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
	if cfg.Backoff == (Backoff{}) {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Journal == nil && !cfg.DryRun {
		return Summary{}, errors.New("refund: no journal")
	}
	e := &engine{cfg: cfg, targets: targetLocks{m: map[string]*targetLock{}}, plan: newPlanIndex()}
	e.summary = Summary{ByStatus: map[string]int{}, Refunded: map[string]int64{}, Found: map[string]int64{}}
	// A halt cancels runCtx: workers waiting on the pacer or a backoff stop
	// at once. The calls themselves never see it (WithoutCancel).
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	e.stopRun = stopRun
	feedCtx := runCtx

	work := make(chan job, cfg.Workers)
	var wg sync.WaitGroup
	for range cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				if e.halted() || ctx.Err() != nil {
					// Not started: after a halt nothing is called, after a
					// signal nothing new is begun. The journal has nothing
					// of it, and the next run takes it up.
					continue
				}
				e.emit(e.process(runCtx, j))
			}
		}()
	}
	readErr := e.feed(feedCtx, in, name, work)
	close(work)
	wg.Wait()

	e.summary.CreateCalls = e.creates.Load()
	e.summary.ListCalls = e.lists.Load()
	e.summary.Retries = e.retries.Load()
	e.summary.RateLimited = e.limited.Load()
	e.summary.Reconciled = e.reconciled.Load()
	e.summary.NewKeys = e.newKeys.Load()
	e.summary.Duplicates = e.duplicates.Load()
	e.summary.Indeterminate = e.indeterminate.Load()
	if cfg.Journal != nil {
		st := cfg.Journal.Stats()
		e.summary.Records, e.summary.Fsyncs = st.Records, st.Fsyncs
	}
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
	batches := make(chan []parsedLine, 4)
	go readPlan(ctx, in, name, e.plan, batches)
	for {
		var batch []parsedLine
		select {
		case b, ok := <-batches:
			if !ok {
				return nil
			}
			batch = b
		case <-ctx.Done():
			return nil // a signal or a halt while the plan is slow to come
		}
		for i := range batch {
			p := &batch[i]
			if ctx.Err() != nil || e.halted() {
				return nil
			}
			if p.err != nil {
				return p.err
			}
			it := &p.item
			st, known := e.cfg.State.Lookup(it.Batch, it.Item)
			if known {
				if err := checkBinding(it, st); err != nil {
					return &InputError{Name: name, Line: p.line, Err: err}
				}
			}
			if r, settled := e.settled(it, st, known); settled {
				e.emit(r)
				continue
			}
			select {
			case work <- job{it: it, st: st, known: known}:
			case <-ctx.Done():
				return nil
			}
		}
	}
}

// settled answers items the journal has finished with.
func (e *engine) settled(it *Item, st journal.ItemState, known bool) (Result, bool) {
	if !known {
		if e.cfg.DryRun {
			return newResult(it, StatusWould), true
		}
		return Result{}, false
	}
	switch st.Status {
	case journal.StatusRefunded:
		r := newResult(it, StatusSkipped)
		r.Refund, r.Amount, r.Currency, r.Attempt = st.Refund, st.Amount, st.Currency, st.Attempt
		return r, true
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
	if e.cfg.DryRun {
		r := newResult(it, StatusWouldRec)
		r.Attempt = st.Attempt
		return r, true
	}
	return Result{}, false
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

// process settles one item that needs Stripe: in doubt from an earlier run,
// held and now allowed, or never tried. Items on one charge or payment
// intent are processed one at a time, so that one's look-up sees the
// other's refund.
func (e *engine) process(ctx context.Context, j job) Result {
	it, st := j.it, j.st
	attempt := 1
	if j.known {
		attempt = max(st.Attempt, 1)
	}
	unsent := !j.known || !st.Sent // no intent was ever journaled for it
	keys, res, ok := e.payment(ctx, it, attempt, unsent)
	if !ok {
		return res
	}
	defer e.targets.lock(keys...)()
	// An earlier run, a run under another journal or another batch may have
	// refunded the charge: look before the first call. Only NoLookup skips
	// it, and only for an item the journal has never seen.
	if j.known || !e.cfg.NoLookup {
		if res, done := e.lookup(ctx, it, attempt, unsent, st.KeyBurned); done {
			return res
		}
	}
	if st.KeyBurned {
		// Stripe replays its saved 500 under this key forever, and lookup
		// let it through only with ResendAfter500: a new key. Never because
		// of the key's age: an old key can still be in flight, and reusing
		// it is never less safe than a new one.
		attempt++
		e.newKeys.Add(1)
		e.logItem(slog.LevelInfo, "new idempotency key: the old one replays Stripe's 500 and the look-up found no refund (--resend-after-500)", it, attempt)
	} else if !unsent {
		e.logItem(slog.LevelDebug, "in doubt and not found at Stripe: the same key again", it, attempt)
	}
	refund, replayed, err := e.call(ctx, it, attempt)
	switch {
	case err == nil:
		return e.record(it, attempt, refund, replayed)
	case errors.Is(err, errIntentUnwritten):
		return e.unrecorded(it, attempt, "journal write failed before the call; nothing was sent")
	case errors.Is(err, errNotSent):
		if unsent {
			return Result{} // never sent: the next run starts it afresh
		}
		return e.inDoubt(it, attempt, "interrupted", "stopped before this call was sent, but an earlier one was: a later run looks it up first")
	}
	class, status, code := classify(err)
	msg := errorMessage(err)
	final := class == classFinal
	if class == classKeyReused {
		msg = "Stripe holds another request under this item's key (other parameters: the plan changed after an earlier run); nothing sent now. Plan the changed refund under a new item id"
		if !unsent {
			// That earlier request is this item's own intent: it may still
			// be making its refund. In doubt, not failed.
			msg = "Stripe holds this item's earlier request under its key, with other parameters (the plan's reason or metadata changed since): nothing sent now, but that request may have made or still make a refund. Restore the plan as it was and run again; a later run looks it up first"
			e.logItem(slog.LevelWarn, "key used before with other parameters", it, attempt)
			if !e.append(e.failure(it, attempt, status, code, msg, false)) {
				return e.unrecorded(it, attempt, "answer could not be journaled")
			}
			return e.inDoubt(it, attempt, code, msg)
		}
		final = true
	}
	if !e.append(e.failure(it, attempt, status, code, msg, final)) {
		return e.unrecorded(it, attempt, "answer could not be journaled")
	}
	switch class {
	case classFinal, classKeyReused:
		e.logItem(slog.LevelDebug, "refused for good", it, attempt, "status", status, "code", code)
		r := newResult(it, StatusFailed)
		r.Attempt, r.Code, r.Message = attempt, code, msg
		return r
	case classFatal:
		e.halt(&HaltError{Err: fmt.Errorf("stripe refused the API key (%d %s)", status, code)})
		return e.inDoubt(it, attempt, code, "run halted")
	case classStopped:
		return e.inDoubt(it, attempt, code, "interrupted while retrying a call that was sent; a later run looks it up first")
	case classRetry:
		// call gave up after too many unanswered tries and halted the run.
		return e.inDoubt(it, attempt, code, "Stripe did not answer; a later run looks it up first")
	}
	// Stripe's own 500 is saved under the key, and its result is
	// indeterminate: Stripe may still complete the call while it repairs an
	// incident. No new key in this run; see ResendAfter500.
	e.indeterminate.Add(1)
	e.logItem(slog.LevelWarn, "stripe answered 500: in doubt, no new key in this run", it, attempt, "code", code)
	return e.inDoubt(it, attempt, code, "Stripe answered 500: its result is indeterminate (Stripe may still complete it). A later run looks it up; it sends under a new key only with --resend-after-500")
}

// Errors of call that say nothing was sent under the attempt's key by it.
var (
	// errNotSent: stopped (signal or halt) before the first request.
	errNotSent = errors.New("stopped before the call was sent")
	// errIntentUnwritten: the intent could not be journaled, so the call
	// was not made.
	errIntentUnwritten = errors.New("intent not journaled")
)

// call sends one refund request, repeating it with the same key while
// Stripe asks for patience (429, 409, 503) or does not answer. The intent
// is journaled only once the pacer lets the first request go, so a stop
// while waiting leaves nothing in doubt that was never sent.
func (e *engine) call(ctx context.Context, it *Item, attempt int) (*stripe.Refund, bool, error) {
	for try := 0; ; try++ {
		if err := e.wait(ctx, EndpointCreate); err != nil || e.halted() {
			if try == 0 {
				return nil, false, errNotSent
			}
			return nil, false, context.Canceled
		}
		if try == 0 && !e.append(e.intent(it, attempt)) {
			return nil, false, errIntentUnwritten
		}
		e.creates.Add(1)
		// A sent request is never abandoned half-way on the first signal:
		// its answer must be journaled.
		r, replayed, err := e.cfg.Stripe.Create(context.WithoutCancel(ctx), it, attempt)
		e.paced(EndpointCreate, err)
		if err == nil {
			e.unanswered.Store(0)
			return r, replayed, nil
		}
		if !e.retryable(ctx, err, try, it, attempt, "create") {
			if ctx.Err() != nil && !e.halted() {
				return nil, false, context.Canceled // a signal, not a halt
			}
			return nil, false, err
		}
	}
}

// retryable decides whether a failed call is repeated with the same key, and
// sleeps the backoff if so.
func (e *engine) retryable(ctx context.Context, err error, try int, it *Item, attempt int, what string) bool {
	class, status, code := classify(err)
	if class != classRetry {
		e.unanswered.Store(0)
		return false
	}
	if status == 429 {
		e.limited.Add(1)
	}
	if status == 0 {
		if n := e.unanswered.Add(1); n >= int64(e.cfg.MaxUnanswered) {
			if gw, ok := strings.CutPrefix(code, "gateway_"); ok {
				e.halt(&HaltError{Err: fmt.Errorf("stripe did not answer %d calls in a row: a gateway in front of it answered %s instead", n, gw)})
			} else {
				e.halt(&HaltError{Err: fmt.Errorf("stripe did not answer %d calls in a row: %s", n, errorMessage(err))})
			}
			return false
		}
	} else {
		e.unanswered.Store(0)
	}
	e.retries.Add(1)
	d := e.cfg.Backoff.delay(try)
	msg := "retrying with the same key"
	if what != "create" {
		msg = "retrying the " + what
	}
	e.logItem(slog.LevelDebug, msg, it, attempt, "status", status, "code", code, "after", d)
	if e.cfg.OnRetry != nil {
		e.cfg.OnRetry(1)
		defer e.cfg.OnRetry(-1)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (e *engine) wait(ctx context.Context, ep Endpoint) error {
	if e.cfg.Pacer == nil {
		return ctx.Err()
	}
	return e.cfg.Pacer.Wait(ctx, ep)
}

// paced tells the pacer how a request to ep went: a 429 slows the budget it
// names, any other answer wins some rate back.
func (e *engine) paced(ep Endpoint, err error) {
	if e.cfg.Pacer == nil {
		return
	}
	_, status, _ := classify(err)
	switch {
	case err == nil:
		e.cfg.Pacer.Answered(ep)
	case status == http.StatusTooManyRequests:
		e.cfg.Pacer.Throttled(ep, rateLimitReason(err))
	case status != 0:
		e.cfg.Pacer.Answered(ep)
	}
}

func (e *engine) retryGet(ctx context.Context, try int) bool {
	if try >= 5 {
		return false
	}
	e.retries.Add(1)
	t := time.NewTimer(e.cfg.Backoff.delay(try))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (e *engine) base(t journal.Type, it *Item, attempt int) *journal.Record {
	return &journal.Record{
		V: journal.Version, Type: t, Time: e.cfg.Now().UTC(),
		Batch: it.Batch, Item: it.Item, Charge: it.Charge, PaymentIntent: it.PaymentIntent,
		Attempt: attempt, Key: IdempotencyKey(it.Batch, it.Item, attempt),
	}
}

func (e *engine) intent(it *Item, attempt int) *journal.Record {
	rec := e.base(journal.TypeIntent, it, attempt)
	rec.Amount, rec.Currency, rec.Reason = it.Amount, it.Currency, it.Reason
	return rec
}

func (e *engine) failure(it *Item, attempt, status int, code, msg string, final bool) *journal.Record {
	rec := e.base(journal.TypeFailed, it, attempt)
	rec.HTTPStatus, rec.Code, rec.Message, rec.Final = status, code, msg, final
	return rec
}

// logItem logs a decision about an item with what names it: batch, item,
// charge or payment intent, attempt and idempotency key (never the API key).
func (e *engine) logItem(level slog.Level, msg string, it *Item, attempt int, args ...any) {
	if !e.cfg.Log.Enabled(context.Background(), level) {
		return
	}
	all := []any{"batch", it.Batch, "item", it.Item, "target", it.Target()}
	if attempt > 0 {
		all = append(all, "attempt", attempt, "key", IdempotencyKey(it.Batch, it.Item, attempt))
	}
	e.cfg.Log.Log(context.Background(), level, msg, append(all, args...)...)
}

// append journals rec durably; a failure halts the run.
func (e *engine) append(rec *journal.Record) bool {
	if err := e.cfg.Journal.Append(rec); err != nil {
		e.halt(&HaltError{Journal: true, Err: err})
		return false
	}
	return true
}

func (e *engine) inDoubt(it *Item, attempt int, code, msg string) Result {
	r := newResult(it, StatusInDoubt)
	r.Attempt, r.Code, r.Message = attempt, code, msg
	return r
}

// unrecorded reports an item whose outcome the journal could not take. It
// is logged for people; the next run finds the item in doubt and reconciles.
func (e *engine) unrecorded(it *Item, attempt int, msg string) Result {
	e.logItem(slog.LevelError, "item not journaled", it, attempt, "detail", msg)
	return e.inDoubt(it, attempt, "journal_failed", msg)
}

func parseAttempt(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err == nil && n < 1 {
		err = errors.New("attempt below 1")
	}
	return n, err
}
