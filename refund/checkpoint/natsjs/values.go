package natsjs

// The values of the checkpoint's bucket, and the keys that name them.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
)

// token makes a name (a batch, an item, a refund id, a payment) one token
// of a key or a subject, whatever characters it holds.
func token(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func untoken(t string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(t)
	return string(b), err
}

func planKey(batch string) string       { return "plan." + token(batch) }
func itemKey(batch, item string) string { return "item." + token(batch) + "." + token(item) }
func itemsOf(batch string) string       { return "item." + token(batch) + ".>" }
func refundKey(id string) string        { return "refund." + token(id) }
func paymentKey(p string) string        { return "pay." + token(p) }

// manifest is a batch's plan: its digest (refund.PlanDocs) and whether
// every item is stored and queued.
type manifest struct {
	Batch    string    `json:"batch"`
	Digest   []byte    `json:"digest"`
	Items    int       `json:"items"`
	LoadedAt time.Time `json:"loaded_at"`
	LoadedBy string    `json:"loaded_by"`
	Queued   bool      `json:"queued"`
}

func (m *manifest) String() string {
	return "loaded " + m.LoadedAt.UTC().Format(time.RFC3339) + " by " + m.LoadedBy + ", " + strconv.Itoa(m.Items) + " items"
}

// itemValue is an item: its plan line, its claim, and its records, the
// journal lines a file journal would hold, in order.
type itemValue struct {
	Batch string          `json:"batch"`
	Item  string          `json:"item"`
	Line  int             `json:"line,omitempty"`
	Plan  json.RawMessage `json:"plan,omitempty"` // refund.PlanDocs's doc; none for records imported without a plan
	// Gen counts the item's claims; Worker holds the latest. Released: the
	// holder gave it back unsettled.
	Gen      int64  `json:"gen"`
	Worker   string `json:"worker,omitempty"`
	Released bool   `json:"released,omitempty"`
	// ReleasedBy lists the workers that gave it back unsettled: the other
	// live workers of the batch will take it, and are waited for.
	ReleasedBy []string `json:"released_by,omitempty"`
	// BurnPending says the write of this value journaled an answer that
	// burned the item's key; BurnRev is that write's revision once a
	// later write knows it.
	BurnPending bool              `json:"burn_pending,omitempty"`
	BurnRev     uint64            `json:"burn_rev,omitempty"`
	Records     []json.RawMessage `json:"records,omitempty"`
}

// fold is the state the item's records fold to; known is false when it
// has none.
func (v *itemValue) fold(k string) (st journal.ItemState, known bool, err error) {
	var rec journal.Record
	for _, line := range v.Records {
		if err := journal.DecodeLine(line, string(line), &rec); err != nil {
			return st, false, &CorruptError{Key: k, Err: err}
		}
		if rec.Batch != v.Batch || rec.Item != v.Item {
			return st, false, &CorruptError{Key: k, Err: errors.New("a record of another item")}
		}
		st = journal.Next(st, &rec)
	}
	return st, len(v.Records) > 0, nil
}

// burnRev is the revision of the write that burned the item's key, 0 when
// unknown; rev is the value's own.
func (v *itemValue) burnRev(rev uint64) uint64 {
	if v.BurnPending {
		return rev
	}
	return v.BurnRev
}

// lockValue is the lock of a payment: the claim of the item that holds it.
type lockValue struct {
	Batch  string `json:"batch"`
	Item   string `json:"item"`
	Gen    int64  `json:"gen"`
	Worker string `json:"worker"`
	Lease  int64  `json:"lease,omitempty"`
	Beat   int64  `json:"beat,omitempty"`
}

// sameClaim reports whether l and o are one claim's lock, beats aside.
func (l *lockValue) sameClaim(o lockValue) bool {
	return l.Batch == o.Batch && l.Item == o.Item && l.Gen == o.Gen && l.Worker == o.Worker
}

// staleAfter is how long l may stay unchanged before its holder is surely
// not renewing it: its lease and a tenth (fallback when l names none).
func (l *lockValue) staleAfter(fallback time.Duration) time.Duration {
	lease := time.Duration(l.Lease)
	if lease <= 0 {
		lease = fallback
	}
	return lease + lease/10
}

// paymentValue is a payment: the items ever sent on it (every item takes
// its payment's lock before its first call) and the lock.
type paymentValue struct {
	Items []itemRef  `json:"items"`
	Lock  *lockValue `json:"lock,omitempty"`
}

type itemRef struct {
	Batch string `json:"batch"`
	Item  string `json:"item"`
}

func (p *paymentValue) add(batch, item string) {
	if r := (itemRef{batch, item}); !slices.Contains(p.Items, r) {
		p.Items = append(p.Items, r)
	}
}

// getJSON reads key into v; ok is false when the key holds nothing.
func getJSON(ctx context.Context, kv jetstream.KeyValue, k string, v any) (rev uint64, ok bool, err error) {
	e, err := kv.Get(ctx, k)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	if err := json.Unmarshal(e.Value(), v); err != nil {
		return 0, false, &CorruptError{Key: k, Err: err}
	}
	return e.Revision(), true, nil
}

// putJSON writes v as k's value: created when stored is false, else under
// revision rev.
func putJSON(ctx context.Context, kv jetstream.KeyValue, k string, v any, rev uint64, stored bool) (uint64, error) {
	body, _ := json.Marshal(v)
	if !stored {
		return kv.Create(ctx, k, body)
	}
	return kv.Update(ctx, k, body, rev)
}

// raced is a compare-and-set that another write beat: read again.
func raced(err error) bool {
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists)
}

// settled reports an item no worker is to claim: refunded, or failed for
// good and not a hold that retryHeld lifts.
func settled(st journal.ItemState, known, retryHeld bool) bool {
	if !known {
		return false
	}
	switch st.Status {
	case journal.StatusRefunded:
		return true
	case journal.StatusFailed:
		return !(retryHeld && refund.IsHold(st.Code))
	}
	return false
}
