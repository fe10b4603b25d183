// Package notes is where the Adyen notifications that refundkit's receiver
// (refund/provider/adyen/webhook) accepted are kept: a file of JSON lines (File) or
// a PostgreSQL table (PG), behind one interface (Store). Adyen's refund
// call answers only "received"; a refund's outcome is what these hold.
//
// Every notification is kept as Adyen signed it (wire.Notification), and
// every reader verifies each one again under the HMAC key: a line or row
// that does not verify, does not decode or is of an unknown version is
// refused with where it is (*CorruptError), never skipped.
package notes

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
)

// Store keeps accepted notifications.
type Store interface {
	// Add stores n durably (file: written and fsynced; PostgreSQL:
	// committed) unless one with its DedupKey is already kept; added is
	// false for such a duplicate, returned once that one is durable too.
	// Only after Add returns nil may the receiver answer [accepted]. A
	// notification that does not verify under the store's key, or is not
	// of wire.Version, is refused (*InvalidError) and nothing is written.
	Add(ctx context.Context, n wire.Notification) (added bool, err error)
	// ForRefund returns the kept notifications whose item's pspReference
	// is psp (a refund's id), in the order received.
	ForRefund(ctx context.Context, psp string) ([]wire.Notification, error)
	// ForPayment returns those whose originalReference is psp (a
	// payment's), in the order received.
	ForPayment(ctx context.Context, psp string) ([]wire.Notification, error)
	// All returns every kept notification, in the order received.
	All(ctx context.Context) ([]wire.Notification, error)
	Close() error
}

// CorruptError is a stored notification that a reader refuses: Where is
// the file or table, Line its line (a file's, 1-based) or seq (a table's).
type CorruptError struct {
	Where  string
	Line   int64
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("%s:%d: %s", e.Where, e.Line, e.Reason)
}

// InvalidError is a notification Add refuses to store: it would be
// refused by every reader.
type InvalidError struct{ Reason string }

func (e *InvalidError) Error() string { return "notification not stored: " + e.Reason }

// check is why n may not be kept under key, or "".
func check(n *wire.Notification, key []byte) string {
	if n.V != wire.Version {
		return "unknown version v=" + strconv.Itoa(n.V) + " (this build reads v=" + strconv.Itoa(wire.Version) + ": use a newer refundkit)"
	}
	if !wire.Verify(&n.Item, key) {
		if n.Item.AdditionalData[wire.SignatureField] == "" {
			return "no " + wire.SignatureField + " (forged, or altered)"
		}
		return wire.SignatureField + " does not verify under the HMAC key (forged, altered, or signed under another key) for " + describe(&n.Item)
	}
	return ""
}

// decode reads one stored notification and verifies it: the reason it is
// refused, or "".
func decode(doc []byte, key []byte, n *wire.Notification) string {
	*n = wire.Notification{}
	if err := json.Unmarshal(doc, n); err != nil {
		return "not a notification: " + err.Error()
	}
	return check(n, key)
}

// describe names an item in messages: its event and references, never its
// signature.
func describe(it *wire.Item) string {
	s := it.EventCode + " pspReference=" + strconv.Quote(it.PSPReference)
	if it.OriginalReference != "" {
		s += " originalReference=" + strconv.Quote(it.OriginalReference)
	}
	return s
}

// index is the notifications a File holds, in the order received, with
// their positions by dedup key, pspReference and originalReference.
type index struct {
	all       []wire.Notification
	keys      map[string]int
	byRefund  map[string][]int
	byPayment map[string][]int
}

func newIndex() *index {
	return &index{keys: map[string]int{}, byRefund: map[string][]int{}, byPayment: map[string][]int{}}
}

// add keeps n unless one of its dedup key, amount and currency is kept
// already (Adyen's retry, or a line written twice: the first stands). One
// that says another amount is kept beside it: it contradicts the first,
// and the refund's outcome says so (adyen.Outcome).
func (x *index) add(n wire.Notification) {
	k := keyOf(&n.Item)
	if _, ok := x.keys[k]; ok {
		return
	}
	i := len(x.all)
	x.all = append(x.all, n)
	x.keys[k] = i
	x.byRefund[n.Item.PSPReference] = append(x.byRefund[n.Item.PSPReference], i)
	if o := n.Item.OriginalReference; o != "" {
		x.byPayment[o] = append(x.byPayment[o], i)
	}
}

// keyOf is what makes two notifications one here: Adyen's dedup key
// (wire.DedupKey) and the amount they say.
func keyOf(it *wire.Item) string {
	return wire.DedupKey(it) + ":" + strconv.FormatInt(it.Amount.Value, 10) + it.Amount.Currency
}

// pick copies the notifications at positions at: a caller that changes
// one changes nothing kept.
func (x *index) pick(at []int) []wire.Notification {
	out := make([]wire.Notification, len(at))
	for j, i := range at {
		out[j] = clone(x.all[i])
	}
	return out
}

func clone(n wire.Notification) wire.Notification {
	n.Item.AdditionalData = maps.Clone(n.Item.AdditionalData)
	n.Item.Operations = slices.Clone(n.Item.Operations)
	return n
}

var (
	_ Store = (*File)(nil)
	_ Store = (*PG)(nil)
)
