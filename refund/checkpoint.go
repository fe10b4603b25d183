package refund

// Where a run remembers: the Checkpoint it records to (a journal file is
// one), Claims for one many runs share, and what those report.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/refundkit/refundkit/journal"
)

// Checkpoint is where a run records an intent before every call and an
// outcome after it, held by one run. An error of any method halts the run.
type Checkpoint interface {
	// Lookup returns what the checkpoint held of item of batch when the run
	// took it; ok is false when it holds no record of it.
	Lookup(batch, item string) (st journal.ItemState, ok bool, err error)
	// Holder returns the item the checkpoint credits with refund id, if any:
	// a refund is credited to one item, ever.
	Holder(id string) (batch, item string, ok bool, err error)
	// OnPayment returns the items, of every batch, it holds records of on a
	// payment named by any of keys, with their states (it may leave out
	// items never sent nor refunded).
	OnPayment(keys []string) ([]journal.PaymentItem, error)
	// Append makes recs durable, in order and in one commit, before it
	// returns: no call is made after an error.
	Append(recs ...*journal.Record) error
	// Stats counts the records made durable and the syncs that did it.
	Stats() journal.WriterStats
}

// Journal is the Checkpoint of a journal file: w (nil: read only) and the
// state it loaded.
func Journal(w *journal.Writer, state *journal.State) Checkpoint {
	return journalCheckpoint{w: w, state: state}
}

type journalCheckpoint struct {
	w     *journal.Writer
	state *journal.State
}

func (j journalCheckpoint) Lookup(batch, item string) (journal.ItemState, bool, error) {
	st, ok := j.state.Lookup(batch, item)
	return st, ok, nil
}

func (j journalCheckpoint) Holder(id string) (string, string, bool, error) {
	batch, item, ok := j.state.Holder(id)
	return batch, item, ok, nil
}

// SharedRefund is journal.State.SharedRefund (sharer).
func (j journalCheckpoint) SharedRefund(id, batch, item string) (string, string, bool) {
	return j.state.SharedRefund(id, batch, item)
}

func (j journalCheckpoint) OnPayment(keys []string) ([]journal.PaymentItem, error) {
	return j.state.OnPayment(keys...), nil
}

// sharer is a checkpoint whose records can credit one refund to two items
// (a file journal, concatenated or edited by hand).
type sharer interface {
	SharedRefund(id, batch, item string) (firstBatch, firstItem string, shared bool)
}

var errReadOnly = errors.New("the journal was opened for reading only")

func (j journalCheckpoint) Append(recs ...*journal.Record) error {
	if j.w == nil {
		return errReadOnly
	}
	return j.w.Append(recs...)
}

func (j journalCheckpoint) Stats() journal.WriterStats {
	if j.w == nil {
		return journal.WriterStats{}
	}
	return j.w.Stats()
}

// Claims is a Checkpoint many runs share: an item is worked only by the run
// that claimed it, a lease its holder renews and every write is fenced by.
type Claims interface {
	Checkpoint
	// Load binds the plan to the checkpoint: the first run to load a batch
	// stores its items; other items under it are refused with an
	// *InputError naming the first that differs.
	Load(ctx context.Context, plan []PlanLine) error
	// Claim takes up to n items of the loaded plan that are not settled,
	// held, or released by this run; retryHeld takes held failures too
	// (AllowRefundedCharges). When it takes none, wait > 0 says other runs
	// hold live claims (ask again after wait), 0 that nothing is left.
	Claim(ctx context.Context, n int, retryHeld bool) (claimed []Claimed, wait time.Duration, err error)
	// Holds returns nil while this run's claim of the item is certainly
	// live; it is asked before every request sent for the item.
	Holds(ctx context.Context, batch, item string) error
	// Release ends this run's claim of an item it is done with.
	Release(ctx context.Context, batch, item string) error
	// LockPayments takes, for an item this run holds, the locks of its
	// payment's keys across every run, waiting while another item holds
	// one; unlock gives them up once its outcome is written. They are
	// renewed and fenced with the claim.
	LockPayments(ctx context.Context, batch, item string, keys []string) (unlock func(), err error)
}

// ErrClaimLost is what the error of a claim another run took is (errors.Is).
var ErrClaimLost = errors.New("claim lost")

// LostClaimError is a write or a call for an item whose claim's lease ran
// out: another run may hold it, and this one sends nothing more for it.
type LostClaimError struct {
	Batch, Item string
	Why         string
}

// Is makes a lost claim ErrClaimLost.
func (e *LostClaimError) Is(target error) bool { return target == ErrClaimLost }

func (e *LostClaimError) Error() string {
	return fmt.Sprintf("claim of item %q of batch %q lost: %s; another worker may hold it now, and this one sends nothing more", e.Item, e.Batch, e.Why)
}

// Scrub removes each secret (a password, a token) from err's message,
// keeping err for errors.Is and errors.As.
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

// WorkerNameError is a --worker name a live worker holds: two workers of
// one name would take each other's claims for their own.
type WorkerNameError struct{ Worker string }

func (e *WorkerNameError) Error() string {
	return fmt.Sprintf("worker name %q is held by a live worker (seen within a lease, not stopped): give each worker a name of its own, or none", e.Worker)
}

// DefaultWorker names a worker given no --worker: host, process, and a
// random part, so that a pid reused after a crash is another worker.
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
	BurnedInRun bool // State.KeyBurned by a record written since this run opened the checkpoint
}

// BatchInfo is a batch whose plan a shared checkpoint holds, with its
// items counted by status (journal.Status's names; "duplicate" for an item
// refunded more than once, "unknown" for one never started).
type BatchInfo struct {
	Batch    string         `json:"batch"`
	Items    int64          `json:"items"`
	LoadedAt time.Time      `json:"loaded_at"`
	LoadedBy string         `json:"loaded_by"`
	ByStatus map[string]int `json:"by_status"`
}

// Tallier is a shared checkpoint that counts the batches of the plan this
// run loaded, every worker's items: whether the batch is done.
type Tallier interface {
	Progress(ctx context.Context) ([]BatchInfo, error)
}

// PlanDocs returns each line's item as canonical JSON and the digest of
// the docs in item order: the same plan in any order has one digest.
func PlanDocs(lines []PlanLine) (docs []string, digest []byte, err error) {
	docs = make([]string, len(lines))
	for i, pl := range lines {
		b, err := json.Marshal(pl.Item)
		if err != nil {
			return nil, nil, err
		}
		docs[i] = string(b)
	}
	order := make([]int, len(lines))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(lines[a].Item.Item, lines[b].Item.Item) })
	h := sha256.New()
	for _, i := range order {
		h.Write([]byte(docs[i]))
		h.Write([]byte{'\n'})
	}
	return docs, h.Sum(nil), nil
}

// FieldsDiffer names, for people, the fields of it that differ from doc,
// an item as PlanDocs stored it.
func FieldsDiffer(it *Item, doc string) string {
	var was Item
	if err := json.Unmarshal([]byte(doc), &was); err != nil {
		return "the stored item does not decode: " + err.Error()
	}
	var diffs []string
	add := func(field, now, then string) {
		if now != then {
			diffs = append(diffs, fmt.Sprintf("%s %q here, %q in the checkpoint", field, now, then))
		}
	}
	add("charge", it.Charge, was.Charge)
	add("payment_intent", it.PaymentIntent, was.PaymentIntent)
	add("capture", it.Capture, was.Capture)
	add("psp_reference", it.PSPReference, was.PSPReference)
	if it.Amount != was.Amount {
		diffs = append(diffs, fmt.Sprintf("amount %d here, %d in the checkpoint", it.Amount, was.Amount))
	}
	add("currency", it.Currency, was.Currency)
	add("reason", it.Reason, was.Reason)
	if !maps.Equal(it.Metadata, was.Metadata) {
		diffs = append(diffs, "metadata differs")
	}
	if len(diffs) == 0 {
		return "the same fields, encoded otherwise"
	}
	return strings.Join(diffs, ", ")
}
