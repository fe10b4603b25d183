// Package checkpoint is what the shared checkpoints (postgres, natsjs) do
// alike: claims under leases, the fence that halts a run whose claim
// another took, renewal, an outage's bookkeeping. Each backend supplies
// how a claim is taken, renewed and fenced in its store.
package checkpoint

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
)

// Key names an item of a batch.
type Key struct{ Batch, Item string }

// Options configure a shared checkpoint.
type Options struct {
	// Lease is how long a claim stays the holder's without a renewal
	// (default 30 s); the holder renews it every third of it. NATS: the
	// ack-wait of a batch's consumer this run makes (one that exists
	// keeps its own).
	Lease time.Duration
	// Worker names this run in claims and in audit (default host:pid:random).
	Worker string
	// RetryHeld (NATS) queues items held for a refund made elsewhere on
	// their payment again (refund --allow-refunded-charges); PostgreSQL
	// is told so at each Claim.
	RetryHeld bool
	// Warn hears that the checkpoint stopped answering and answers
	// again, and what it cannot show to be durable.
	Warn func(msg string)
}

// Claim is what both backends keep of a claim this run holds; a
// backend's claim embeds it beside its fence.
type Claim struct {
	Deadline time.Time // by this host's monotonic clock: the lease is surely ours until then
	State    journal.ItemState
	Known    bool // the checkpoint holds records of the item
}

func (c *Claim) claim() *Claim { return c }

// held is a backend's claim: a pointer to a struct that embeds Claim.
type held interface {
	comparable
	claim() *Claim
}

// Base is a run's side of a shared checkpoint. Mu guards Held, Left,
// Written and the backend's own fields.
type Base[C held] struct {
	Worker   string
	Secrets  []string // scrubbed from every error
	Warn     func(msg string)
	Relinked chan struct{} // the checkpoint answers again: renew now
	LeaseCut chan struct{} // the lease was shortened: the renewal's period follows

	Mu   sync.Mutex
	Held map[Key]C // this run's live claims
	// Left are the items this run does not claim again (given back
	// unsettled, lost), with the claim generation it last saw unheld
	// (NATS).
	Left    map[Key]int64
	Written journal.WriterStats

	lease        atomic.Int64 // time.Duration
	newErr       func(op string, err error) error
	renew        Renew[C]
	silent, back string

	omu           sync.Mutex
	since         time.Time // when the first operation failed (zero: none is failing)
	claimsFailing time.Time // since when Claim has found the checkpoint away

	stop, done chan struct{}
	stopOnce   sync.Once
}

// Renew asks the store, from start, whether this run still holds cl, the
// claim of k: lost says why not.
type Renew[C held] func(ctx context.Context, k Key, cl C) (start time.Time, lost string, err error)

// Init fills opts's defaults and makes b ready; renew is Holds's.
func (b *Base[C]) Init(opts *Options, silent, back string, newErr func(op string, err error) error, renew Renew[C]) {
	if opts.Lease <= 0 {
		opts.Lease = 30 * time.Second
	}
	if opts.Worker == "" {
		opts.Worker = refund.DefaultWorker()
	}
	if opts.Warn == nil {
		opts.Warn = func(string) {}
	}
	b.Worker, b.Warn, b.silent, b.back, b.newErr, b.renew = opts.Worker, opts.Warn, silent, back, newErr, renew
	b.lease.Store(int64(opts.Lease))
	b.Held, b.Left = map[Key]C{}, map[Key]int64{}
	b.Relinked, b.LeaseCut = make(chan struct{}, 1), make(chan struct{}, 1)
}

// Lease is how long a claim lasts unrenewed.
func (b *Base[C]) Lease() time.Duration { return time.Duration(b.lease.Load()) }

// CutLease shortens the lease to d, and the renewal's period with it.
func (b *Base[C]) CutLease(d time.Duration) {
	b.lease.Store(int64(d))
	Signal(b.LeaseCut)
}

// Margin is how long after a claim or renewal was sent the lease is
// surely still this run's by its own clock: the lease less a tenth for
// the two clocks' drift and the renewal's way to the store.
func (b *Base[C]) Margin() time.Duration { return b.Lease() - b.Lease()/10 }

// PollWait is how long to wait before asking again for what another run
// holds.
func (b *Base[C]) PollWait() time.Duration {
	return min(max(b.Lease()/10, 50*time.Millisecond), 250*time.Millisecond)
}

// LeaseEnd is when cl's lease may run out in the store, by this host's
// clock.
func (b *Base[C]) LeaseEnd(cl C) time.Time {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	return cl.claim().Deadline.Add(b.Lease() / 10)
}

// Await asks try again, PollWait apart, until it gets what it waits for
// or fails, while holds says this run's claim lasts.
func (b *Base[C]) Await(ctx context.Context, holds func() error, try func() (bool, error)) error {
	for {
		if err := holds(); err != nil {
			return err
		}
		if got, err := try(); err != nil || got {
			return err
		}
		select {
		case <-time.After(b.PollWait()):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Error is a failure of a shared checkpoint's store (Backend "postgres" or
// "nats"), named by what was being done; it never holds a secret.
type Error struct {
	Backend, Op string
	Err         error
}

func (e *Error) Error() string { return e.Backend + " checkpoint: " + e.Op + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// BusyError is an import refused because workers hold live claims of what
// it would change, or wrote records there after the merge read them.
type BusyError struct{ Backend, Why string }

func (e *BusyError) Error() string { return e.Backend + " checkpoint busy: " + e.Why }

// HeldClaim is this run's claim of k, Mu held: a *refund.LostClaimError
// when it holds none, for a write or call for the item.
func (b *Base[C]) HeldClaim(k Key) (C, error) {
	cl, ok := b.Held[k]
	if !ok {
		return cl, &refund.LostClaimError{Batch: k.Batch, Item: k.Item, Why: "this run holds no claim of it"}
	}
	return cl, nil
}

// Holds is the fence: nil while this run's claim of the item is live by
// its own monotonic clock. Past its deadline Init's renew asks the store;
// a claim another took is dropped: nothing more is sent for it.
func (b *Base[C]) Holds(ctx context.Context, batch, item string) error {
	k := Key{Batch: batch, Item: item}
	b.Mu.Lock()
	cl, err := b.HeldClaim(k)
	live := err == nil && time.Now().Before(cl.claim().Deadline)
	b.Mu.Unlock()
	if err != nil || live {
		return err
	}
	start, lost, err := b.renew(ctx, k, cl)
	if err != nil {
		return err
	}
	if lost != "" {
		b.Drop(k)
		return &refund.LostClaimError{Batch: k.Batch, Item: k.Item, Why: lost}
	}
	b.Mu.Lock()
	if b.Held[k] == cl {
		cl.claim().Deadline = start.Add(b.Margin())
	}
	b.Mu.Unlock()
	return nil
}

// Drop forgets a claim another run took: this run neither writes for the
// item nor claims it again, and waits for no one on it.
func (b *Base[C]) Drop(k Key) {
	b.Mu.Lock()
	delete(b.Held, k)
	b.Left[k] = math.MaxInt64
	b.Mu.Unlock()
}

// HeldState is the state of k's claim when this run holds it.
func (b *Base[C]) HeldState(k Key) (st journal.ItemState, known, ok bool) {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	if cl, ok := b.Held[k]; ok {
		return cl.claim().State, cl.claim().Known, true
	}
	return st, false, false
}

// Activity is how many claims this run holds, and whether it worked
// already (gave an item back or wrote a record).
func (b *Base[C]) Activity() (held int, worked bool) {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	return len(b.Held), len(b.Left) > 0 || b.Written.Records > 0
}

// Duplicate is the status of an item refunded more than once: settled
// (nothing more is sent), and not done, so every worker's tally says so.
const Duplicate = "duplicate"

// StatusName is an item's status as a tally counts it.
func StatusName(st journal.ItemState) string {
	if st.Status == journal.StatusRefunded && st.Extras != "" {
		return Duplicate
	}
	return st.Status.String()
}

// Stats counts the records this run wrote and the writes that stored them.
func (b *Base[C]) Stats() journal.WriterStats {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	return b.Written
}

// Wrap is err as the backend's error of op, its secrets scrubbed; a lost
// claim stays itself.
func (b *Base[C]) Wrap(op string, err error) error {
	if err == nil || errors.As(err, new(*refund.LostClaimError)) {
		return err
	}
	return b.newErr(op, refund.Scrub(err, b.Secrets...))
}

// StartRenewing runs renew every third of a lease (tick), and at once when
// the checkpoint answers again or the lease is cut, until StopRenewing.
func (b *Base[C]) StartRenewing(renew func(tick bool)) {
	b.stop, b.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(b.done)
		t := time.NewTicker(b.Lease() / 3)
		defer t.Stop()
		for {
			select {
			case <-b.stop:
				return
			case <-b.LeaseCut:
				t.Reset(b.Lease() / 3)
				renew(false)
			case <-b.Relinked:
				renew(false) // a renewal the outage missed is owed
			case <-t.C:
				renew(true)
			}
		}
	}()
}

// Renewing reports whether this run renews claims: opened to write.
func (b *Base[C]) Renewing() bool { return b.stop != nil }

// StopRenewing ends the renewal loop; false when none ran.
func (b *Base[C]) StopRenewing() bool {
	if b.stop == nil {
		return false
	}
	b.stopOnce.Do(func() { close(b.stop) })
	<-b.done
	return true
}

// Pause ends the renewal loop as a SIGSTOP would (tests): Close then
// gives nothing back.
func (b *Base[C]) Pause() {
	b.StopRenewing()
	b.stop = nil
}

// Relink asks the renewal loop to renew now.
func (b *Base[C]) Relink() { Signal(b.Relinked) }

// Signal wakes ch's reader, unless a wake is pending already.
func Signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Unanswered notes that an operation failed with err because the
// checkpoint did not answer: said once, as the outage begins.
func (b *Base[C]) Unanswered(err error) {
	b.omu.Lock()
	first := b.since.IsZero()
	if first {
		b.since = time.Now()
	}
	b.omu.Unlock()
	if first {
		b.Warn(fmt.Sprintf("%s (%v): this worker tries again while the leases of its claims last (%s)", b.silent, refund.Scrub(err, b.Secrets...), b.Lease()))
	}
}

// Answered notes that the checkpoint answered, and reports whether that
// ended an outage (said once).
func (b *Base[C]) Answered() bool {
	b.omu.Lock()
	since := b.since
	b.since = time.Time{}
	b.omu.Unlock()
	if since.IsZero() {
		return false
	}
	b.Warn(fmt.Sprintf("%s after %s: this worker goes on with the claims it holds", b.back, time.Since(since).Round(time.Millisecond)))
	return true
}

// ClaimsUnanswered is a Claim the checkpoint did not answer: nil (ask
// again) while that has lasted less than a lease.
func (b *Base[C]) ClaimsUnanswered(err error) error {
	b.Unanswered(err)
	b.omu.Lock()
	if b.claimsFailing.IsZero() {
		b.claimsFailing = time.Now()
	}
	failing := time.Since(b.claimsFailing)
	b.omu.Unlock()
	if failing < b.Lease() {
		return nil
	}
	return b.Wrap("claim", err)
}

// ClaimsAnswered is a Claim the checkpoint answered; it reports whether
// claims had been failing.
func (b *Base[C]) ClaimsAnswered() bool {
	b.omu.Lock()
	defer b.omu.Unlock()
	failing := !b.claimsFailing.IsZero()
	b.claimsFailing = time.Time{}
	return failing
}

// LoadBatches splits a plan by batch and loads each with load, batches in
// the order they first appear (order).
func LoadBatches(plan []refund.PlanLine, load func(batch string, lines []refund.PlanLine) error) (order []string, err error) {
	byBatch := map[string][]refund.PlanLine{}
	for _, pl := range plan {
		if _, ok := byBatch[pl.Item.Batch]; !ok {
			order = append(order, pl.Item.Batch)
		}
		byBatch[pl.Item.Batch] = append(byBatch[pl.Item.Batch], pl)
	}
	for _, b := range order {
		if err := load(b, byBatch[b]); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// IdleAfter is how long a worker holds no claim before it gives its budget
// part away: longer than the gap between claims, so -j 1 does not flap.
const IdleAfter = 250 * time.Millisecond

// Idle follows whether a worker sharing a budget holds no claim.
type Idle struct{ busy time.Time }

// What Idle.Step says.
const (
	Holding = iota // it holds claims
	Started        // it worked, and holds none: the idle time starts now
	GoIdle         // it has held none for IdleAfter
	Same           // nothing changed
)

// Step is what happens at now to a worker holding held claims, that
// worked already (gave an item back or wrote a record) and is idle.
func (i *Idle) Step(now time.Time, held int, worked, idle bool) int {
	switch {
	case held > 0:
		i.busy = now
		return Holding
	case i.busy.IsZero() && worked:
		i.busy = now
		return Started
	case !idle && !i.busy.IsZero() && now.Sub(i.busy) >= IdleAfter:
		return GoIdle
	}
	return Same
}

// ScanJournal calls fn with each record of journal r (named name in
// errors), its canonical line without the newline, and its line number; a
// torn end is an error.
func ScanJournal(r io.Reader, name string, fn func(rec *journal.Record, line string, at int)) error {
	sc := journal.NewScanner(r, name)
	for sc.Scan() {
		line, err := journal.MarshalLine(nil, sc.Record())
		if err != nil {
			return err
		}
		fn(sc.Record(), string(line[:len(line)-1]), sc.Line())
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if t := sc.Torn(); t != nil {
		return fmt.Errorf("%s", t)
	}
	return nil
}

// Share is what both backends' budgets keep alike: the account's live
// workers as last counted, whether this one is idle, and the context of
// the budget's loops.
type Share struct {
	apply  func(workers int)
	cancel context.CancelFunc
	once   sync.Once

	mu      sync.Mutex
	workers int
	idle    bool // holds no claim: the others share without it
}

// Begin makes s ready, apply to hear each new count; ctx ends with End.
func (s *Share) Begin(apply func(workers int)) (ctx context.Context) {
	s.apply = apply
	ctx, s.cancel = context.WithCancel(context.Background())
	return ctx
}

// End ends the budget's context, then runs then, once.
func (s *Share) End(then func()) { s.once.Do(func() { s.cancel(); then() }) }

// Workers is the number of live workers of the account as last counted.
func (s *Share) Workers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.workers
}

// Counted applies n, the live workers just counted, when it changed.
func (s *Share) Counted(n int) (changed bool) {
	s.mu.Lock()
	changed, s.workers = n != s.workers, n
	s.mu.Unlock()
	if changed {
		s.apply(n)
	}
	return changed
}

// Idle reports whether this worker gave its part to the others.
func (s *Share) Idle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.idle
}

func (s *Share) SetIdle(idle bool) {
	s.mu.Lock()
	s.idle = idle
	s.mu.Unlock()
}

// PlanHint ends the error of a plan that differs from the one stored.
const PlanHint = "; the checkpoint holds one plan per batch: feed every worker the same plan, or plan the change under a new batch name"

// Stored is a plan line as the checkpoint stores it.
type Stored struct {
	Line int64
	Plan string // refund.PlanDocs's doc
}

// PlanDiffers is a *refund.InputError naming the first item of lines (docs
// their PlanDocs) that differs from have, batch's stored plan, or is new
// or missing; nil when all are the same.
func PlanDiffers(batch string, lines []refund.PlanLine, docs []string, loaded fmt.Stringer, have map[string]Stored) error {
	for i, pl := range lines {
		s, ok := have[pl.Item.Item]
		if !ok {
			return &refund.InputError{Line: pl.Line, Err: fmt.Errorf("item %q is not in the plan of batch %q in the checkpoint (%s)%s", pl.Item.Item, batch, loaded, PlanHint)}
		}
		if s.Plan != docs[i] {
			return &refund.InputError{Line: pl.Line, Err: fmt.Errorf("item %q of batch %q differs from the plan in the checkpoint (%s): %s%s", pl.Item.Item, batch, loaded, refund.FieldsDiffer(pl.Item, s.Plan), PlanHint)}
		}
		delete(have, pl.Item.Item)
	}
	missing := slices.SortedFunc(maps.Keys(have), func(a, b string) int { return cmp.Compare(have[a].Line, have[b].Line) })
	if len(missing) > 0 {
		return &refund.InputError{Err: fmt.Errorf("item %q of batch %q (line %d of the plan in the checkpoint, %s) is missing from this plan, and %d more%s", missing[0], batch, have[missing[0]].Line, loaded, len(missing)-1, PlanHint)}
	}
	return nil
}

// IsURL reports whether a --journal argument starts with one of a shared
// checkpoint's schemes (postgres://, nats://) rather than naming a file.
func IsURL(s string, schemes ...string) bool {
	for _, scheme := range schemes {
		if strings.HasPrefix(s, scheme) {
			return true
		}
	}
	return false
}
