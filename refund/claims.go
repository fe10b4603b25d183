package refund

// A checkpoint many runs share: each is fed the same plan and works on the
// items it claims, one run per item at a time.

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/refundkit/refundkit/journal"
)

// Claims is a Checkpoint that many runs, on many hosts, share (a database
// table: refund/checkpoint/postgres). Every run is fed the same plan; an item is
// worked on only by the run that claimed it. A claim is a lease the holder
// renews while it works: a run that dies loses its claims when their
// leases run out, and the next run to claim such an item finds its intent
// and looks it up before any call, as a rerun does. Every write for an item
// is fenced by its claim: once another run took it, the old holder's writes
// fail, and a failed write halts a run before its next call.
type Claims interface {
	Checkpoint
	// Load binds the plan to the checkpoint. The first run to load a batch
	// stores its items; the same items again change nothing; other items
	// under a batch already loaded are refused with an *InputError that
	// names the first item that differs.
	Load(ctx context.Context, plan []PlanLine) error
	// Claim takes up to n items of the loaded plan that are not settled,
	// not held by a live claim and not already released by this run, with
	// what the checkpoint holds of each. retryHeld claims failed items held
	// for a refund elsewhere on their charge too (AllowRefundedCharges).
	// When it takes none, wait > 0 says other runs hold live claims (one of
	// them may die: ask again after wait), and wait == 0 that nothing is
	// left for this run.
	Claim(ctx context.Context, n int, retryHeld bool) (claimed []Claimed, wait time.Duration, err error)
	// Holds returns nil while this run's claim of the item is certainly
	// live, and an error once another run may have taken it. It is asked
	// before every request sent for the item.
	Holds(ctx context.Context, batch, item string) error
	// Release ends this run's claim of an item it is done with.
	Release(ctx context.Context, batch, item string) error
	// LockPayments takes, for an item this run holds, the locks of its
	// payment's keys (payment() names them) across every run sharing the
	// checkpoint, waiting while another item holds one, so that one item's
	// look-up sees the other's refund, as a run's own payment locks do
	// within it. unlock gives them up once the item's outcome is written;
	// they are renewed and fenced with the item's claim.
	LockPayments(ctx context.Context, batch, item string, keys []string) (unlock func(), err error)
}

// ErrClaimLost is what the error of a claim another run took is (errors.Is).
var ErrClaimLost = errors.New("claim lost")

// LostClaimError is a write or a call for an item whose claim this run no
// longer holds: its lease ran out (the run was paused, or cut off from the
// checkpoint) and another run may have taken the item. Nothing more is
// sent for it by this run.
type LostClaimError struct {
	Batch, Item string
	Why         string
}

// Is makes a lost claim ErrClaimLost.
func (e *LostClaimError) Is(target error) bool { return target == ErrClaimLost }

func (e *LostClaimError) Error() string {
	return fmt.Sprintf("claim of item %q of batch %q lost: %s; another worker may hold it now, and this one sends nothing more", e.Item, e.Batch, e.Why)
}

// Scrub removes each secret from err's message, keeping err for
// errors.Is and errors.As: how a shared checkpoint's errors name a
// password or token they were given.
func Scrub(err error, secrets ...string) error {
	for _, secret := range secrets {
		if err != nil && secret != "" && strings.Contains(err.Error(), secret) {
			err = &scrubbed{msg: strings.ReplaceAll(err.Error(), secret, "xxxxx"), err: err}
		}
	}
	return err
}

type scrubbed struct {
	msg string
	err error
}

func (s *scrubbed) Error() string { return s.msg }
func (s *scrubbed) Unwrap() error { return s.err }

// WorkerNameError is a --worker name a live worker of a shared checkpoint
// holds: two workers of one name would take each other's claims for their
// own.
type WorkerNameError struct{ Worker string }

func (e *WorkerNameError) Error() string {
	return fmt.Sprintf("worker name %q is held by a live worker (seen within a lease, not stopped): give each worker a name of its own, or none", e.Worker)
}

// DefaultWorker names a worker of a shared checkpoint given no --worker:
// its host and process, and a random part so that a pid reused on the
// host after a crash is another worker.
func DefaultWorker() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	return fmt.Sprintf("%s:%d:%x", host, os.Getpid(), b)
}

// PlanLine is a plan item and the line of the plan that holds it.
type PlanLine struct {
	Item *Item
	Line int
}

// Claimed is an item a run claimed, with what the checkpoint holds of it.
type Claimed struct {
	Batch, Item string
	State       journal.ItemState
	Known       bool // the checkpoint holds records of the item
	// BurnedInRun: State.KeyBurned by a record written since this run
	// started (opened the checkpoint).
	BurnedInRun bool
}

// IsHold reports a failure code that holds an item for a refund made
// elsewhere on its payment: AllowRefundedCharges lifts it.
func IsHold(code string) bool { return heldCode(code) }

// feedClaims reads the whole plan, loads it into the shared checkpoint and
// hands the workers the items this run claims, as slots free up, until no
// item is left for it. Items whose claim shows them settled are answered
// here.
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
		// One free slot at least, then as many as are free: a claim is a
		// lease, so no item is claimed before a worker can start on it.
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
			it := pl.Item
			if !planned {
				// Load bound the checkpoint to this very plan: a claim of
				// another item is a checkpoint that broke its word.
				e.halt(&HaltError{Journal: true, Err: &unplannedClaimError{batch: cl.Batch, item: cl.Item}})
				e.releaseAll(c, claimed[i:])
				return nil
			}
			if cl.Known {
				if err := CheckBinding(it, cl.State); err != nil {
					e.releaseAll(c, claimed[i:])
					return &InputError{Name: name, Line: pl.Line, Err: err}
				}
			}
			if r, settled := e.settled(it, cl.State, cl.Known); settled {
				e.emit(r)
				e.release(c, it)
				free <- struct{}{}
				continue
			}
			e.inFlight.Add(1)
			work <- job{it: it, st: cl.State, known: cl.Known, burnedInRun: cl.BurnedInRun}
		}
	}
}

type planKey struct{ batch, item string }

type unplannedClaimError struct{ batch, item string }

func (e *unplannedClaimError) Error() string {
	return "the checkpoint handed out item " + quote(e.item) + " of batch " + quote(e.batch) + ", which is not in this run's plan"
}

// release ends the run's claim of it; a failure is only logged: the claim's
// lease runs out by itself.
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

// holds halts the run when its claim of it may have passed to another run:
// nothing more may be sent for it.
func (e *engine) holds(ctx context.Context, it *Item) bool {
	c, ok := e.cfg.Checkpoint.(Claims)
	if !ok || e.cfg.DryRun {
		return true // a dry run claims nothing, and sends nothing
	}
	if err := c.Holds(ctx, it.Batch, it.Item); err != nil {
		e.halt(&HaltError{Journal: true, Err: err})
		return false
	}
	return true
}

// readWhole reads and checks every line of the plan: a shared checkpoint
// binds the whole plan before any item is claimed.
func (e *engine) readWhole(ctx context.Context, in io.Reader, name string) ([]PlanLine, error) {
	ctx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	batches := make(chan []parsedLine, 4)
	go readPlan(ctx, in, name, e.plan, batches, nil)
	var lines []PlanLine
	for batch := range batches {
		for i := range batch {
			p := &batch[i]
			if p.err != nil {
				return nil, p.err
			}
			if err := e.facts.accepts(&p.item); err != nil {
				err.Name, err.Line = name, p.line
				return nil, err
			}
			lines = append(lines, PlanLine{Item: &p.item, Line: p.line})
		}
	}
	return lines, nil
}

// feedDryClaims is a dry run over a shared checkpoint: the plan is checked
// against the one the checkpoint holds (a read-only checkpoint only
// compares), then each item answered from its records, or handed to the
// workers to be looked up (read only: nothing is claimed).
func (e *engine) feedDryClaims(ctx context.Context, c Claims, in io.Reader, name string, work chan<- job) error {
	lines, err := e.bindPlan(ctx, c, in, name)
	if lines == nil {
		return err
	}
	for _, pl := range lines {
		if ctx.Err() != nil {
			return nil
		}
		st, known, err := c.Lookup(pl.Item.Batch, pl.Item.Item)
		if err != nil {
			e.halt(&HaltError{Journal: true, Err: err})
			return nil
		}
		if known {
			if err := CheckBinding(pl.Item, st); err != nil {
				return &InputError{Name: name, Line: pl.Line, Err: err}
			}
		}
		if r, settled := e.settled(pl.Item, st, known); settled {
			e.emit(r)
			continue
		}
		if e.halted() || !e.dispatch(ctx, work, job{it: pl.Item, st: st, known: known}) {
			return nil
		}
	}
	return nil
}

// lockPayments takes the shared checkpoint's locks of the item's payment;
// ok is false when the run halted or stopped meanwhile (nothing sent).
func (e *engine) lockPayments(ctx context.Context, it *Item, keys []string) (unlock func(), ok bool) {
	c, shared := e.cfg.Checkpoint.(Claims)
	if !shared || e.cfg.DryRun {
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

// bindPlan reads the whole plan and loads it into c (which only compares
// it when read-only). lines is nil when the run is to end: with the input
// error to return, or nil after a halt or a stop.
func (e *engine) bindPlan(ctx context.Context, c Claims, in io.Reader, name string) ([]PlanLine, error) {
	lines, err := e.readWhole(ctx, in, name)
	if err != nil || ctx.Err() != nil || len(lines) == 0 {
		return nil, err
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
