package refund

// The state of one run and the primitives every layer of it uses: halt,
// emit a result, append to the checkpoint, log, hold a claim. Run and its
// feeds are in run.go, an item's life in process.go.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/refundkit/refundkit/journal"
)

// MaxLineBytes bounds one input line.
const MaxLineBytes = 1 << 20

// Config is what a run needs. Checkpoint and OnResult are required, and
// Provider unless an Offline DryRun.
type Config struct {
	Provider Provider // makes, finds and cancels refunds (refund/provider/stripe)
	// Checkpoint records intents and outcomes, and says what earlier runs
	// recorded (Journal); read only in a DryRun.
	Checkpoint Checkpoint
	Workers    int    // items in flight at once (default 8)
	Pacer      *Pacer // paces every API call; nil means none
	// DryRun says what the real run would do and does none of it: items the
	// checkpoint does not settle are looked up by reads alone.
	DryRun  bool
	Offline bool // a DryRun from the checkpoint alone (Provider may be nil)
	// ResendAfter500 lets an item whose key the provider's own 500 burned in
	// an earlier run go under a new key once the look-up finds nothing.
	ResendAfter500 bool
	MaxUnanswered  int // unanswered calls in a row before the run halts (default 8)
	// NoLookup trusts the journal alone before an item's first call: a new
	// batch name, a lost journal or a reshard can then refund twice.
	NoLookup bool
	// AllowRefundedCharges refunds items whose charge holds a refund of
	// another batch; without it they are held (failed, unsent).
	AllowRefundedCharges bool
	AllRefunds           bool    // hold for refunds without refundkit metadata too
	Shard                Shard   // the shard this run works (a file journal's feed only); zero: all
	Backoff              Backoff // default: Facts.Backoff
	Log                  *slog.Logger
	Now                  func() time.Time // default time.Now
	OnResult             func(Result)     // each result, one at a time, once durably journaled
	OnRetry              func(delta int)  // when set: an item starts (+1) or ends (-1) a retry wait
}

// HaltError is a run stopped because continuing could go unrecorded (the
// checkpoint failed) or cannot succeed (the provider refused the key or
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

	haltOnce            sync.Once
	haltErr             atomic.Pointer[HaltError]
	stopRun             context.CancelFunc
	unanswered          atomic.Int64
	creates             atomic.Int64
	paymentReads        atomic.Int64
	refundLists         atomic.Int64
	refundReads         atomic.Int64
	refundsTold         atomic.Int64 // settled from the provider's events (Teller): no request
	eventsContradicting atomic.Int64 // told refunds not the item's (Teller): asked instead
	retries             atomic.Int64
	limited             atomic.Int64
	reconciled          atomic.Int64
	newKeys             atomic.Int64
	indeterminate       atomic.Int64 // items an indeterminate answer left in doubt
	otherShards         int          // the plan's items of other shards, counted by the feed alone
	targets             targetLocks
	plan                *planIndex
	// credits are the refunds this run credited (hashed id -> the item in
	// plan): with the checkpoint's Holder, one item each.
	creditMu sync.Mutex
	credits  map[uint64]uint32
	// inFlight counts the jobs handed to workers and not finished; deferred
	// holds those given back until the plan is read to the end.
	inFlight sync.WaitGroup
	deferMu  sync.Mutex
	deferred []job
}

// job is an item that needs the API, with what the journal says of it.
type job struct {
	it    *Item
	st    journal.ItemState
	known bool // the journal holds records of the item
	// burnedInRun: its key was burned during this run (another worker's
	// call, in a shared checkpoint): no new key for it in this run.
	burnedInRun bool
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

// refusedKey halts the run: the provider refused the API key, as why says.
func (e *engine) refusedKey(why string) {
	e.halt(&HaltError{Err: fmt.Errorf("%s refused the API key (%s)", strings.ToLower(e.name), why)})
}

// append records recs durably, in one commit; a failure halts the run. In
// a dry run it writes nothing and says it did, so the flow goes on as the
// real run's would.
func (e *engine) append(recs ...*journal.Record) bool {
	if e.cfg.DryRun {
		return true
	}
	if err := e.cfg.Checkpoint.Append(recs...); err != nil {
		e.halt(&HaltError{Journal: true, Err: err})
		return false
	}
	return true
}

// logItem logs a decision about an item with what names it (never the API
// key).
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

// shared is the run's shared checkpoint, unless a dry run (which claims
// nothing and sends nothing) or a file journal.
func (e *engine) shared() (Claims, bool) {
	c, ok := e.cfg.Checkpoint.(Claims)
	return c, ok && !e.cfg.DryRun
}

// holds halts the run when its claim of it may have passed to another run:
// nothing more may be sent for it.
func (e *engine) holds(ctx context.Context, it *Item) bool {
	c, ok := e.shared()
	if !ok {
		return true
	}
	if err := c.Holds(ctx, it.Batch, it.Item); err != nil {
		e.halt(&HaltError{Journal: true, Err: err})
		return false
	}
	return true
}

// lockPayments takes the shared checkpoint's locks of the item's payment;
// ok is false when the run halted or stopped meanwhile (nothing sent).
func (e *engine) lockPayments(ctx context.Context, it *Item, keys []string) (unlock func(), ok bool) {
	c, shared := e.shared()
	if !shared {
		return func() {}, true
	}
	unlock, err := c.LockPayments(ctx, it.Batch, it.Item, keys)
	if err != nil {
		if ctx.Err() == nil {
			e.halt(&HaltError{Journal: true, Err: err})
		}
		return nil, false
	}
	return unlock, true
}

// release ends the run's claim of it; a failure is only logged: the
// claim's lease runs out by itself.
func (e *engine) release(c Claims, it *Item) {
	if err := c.Release(context.Background(), it.Batch, it.Item); err != nil {
		e.logItem(slog.LevelWarn, "claim not released (its lease runs out by itself)", it, 0, "err", err)
	}
}

func (e *engine) releaseAll(c Claims, claimed []Claimed) {
	for _, cl := range claimed {
		if err := c.Release(context.Background(), cl.Batch, cl.Item); err != nil {
			e.cfg.Log.Warn("claim not released (its lease runs out by itself)", "batch", cl.Batch, "item", cl.Item, "err", err)
		}
	}
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
