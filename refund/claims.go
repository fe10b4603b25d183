package refund

// A checkpoint many runs share: each is fed the same plan and works on the
// items it claims (run.go, feedClaims).

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
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
