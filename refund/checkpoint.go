package refund

import (
	"errors"

	"github.com/refundkit/refundkit/journal"
)

// Checkpoint is where a run records what it does: an intent before every
// call, an outcome after it. The JSONL journal is one (Journal); a
// database table can be another. A checkpoint is held by one run from the
// moment it is opened: journal.Open locks the file, and a second run gets
// a *journal.LockedError at once.
type Checkpoint interface {
	// Lookup returns what the checkpoint held of item of batch when the
	// run took it; ok is false when it holds no record of the item. A
	// checkpoint may load a batch's state on its first Lookup. An error
	// halts the run.
	Lookup(batch, item string) (st journal.ItemState, ok bool, err error)
	// Holder returns the item the checkpoint credits with refund id
	// (refunded or pending), if any: a refund is credited to one item,
	// ever. An error halts the run.
	Holder(id string) (batch, item string, ok bool, err error)
	// OnPayment returns the items, of every batch, that the checkpoint
	// holds records of on a payment named by any of keys (its charge,
	// capture or psp_reference, or its payment intent and the intent's
	// charges), with their states: what the engine asks before an item's
	// call when the provider cannot list the payment's refunds, or not all
	// of them yet. It may leave out items never sent nor refunded. An
	// error halts the run.
	OnPayment(keys []string) ([]journal.PaymentItem, error)
	// Append makes recs durable, in order and in one commit, before it
	// returns. An error halts the run: no call is made after it.
	Append(recs ...*journal.Record) error
	// Stats counts the records made durable and the syncs that did it.
	Stats() journal.WriterStats
}

// Journal is the Checkpoint of a journal file: w, opened (and locked) by
// journal.Open, and the state it loaded. With w nil (a dry run) it only
// reads state.
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

// SharedRefund is journal.State.SharedRefund: a file journal's records
// can credit one refund to two items (sharer).
func (j journalCheckpoint) SharedRefund(id, batch, item string) (string, string, bool) {
	return j.state.SharedRefund(id, batch, item)
}

func (j journalCheckpoint) OnPayment(keys []string) ([]journal.PaymentItem, error) {
	return j.state.OnPayment(keys...), nil
}

// sharer is a checkpoint whose records can credit one refund to two items:
// a file journal, concatenated or edited by hand. A shared checkpoint
// checks each credit as it is written.
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
