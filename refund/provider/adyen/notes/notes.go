// Package notes keeps the Adyen notifications that the receiver
// (refund/provider/adyen/webhook) accepted, in a file (File) or a
// PostgreSQL table (PG): Adyen answers a refund only "received", and its
// outcome is what these hold. Every reader verifies each one again under
// the HMAC key, and refuses (*CorruptError) what does not.
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
	// Add stores n durably unless one of its DedupKey is kept (added false,
	// once that one is durable too); only then may the receiver answer
	// [accepted]. One that does not verify is refused (*InvalidError).
	Add(ctx context.Context, n wire.Notification) (added bool, err error)
	// ForRefund returns the notifications of refund psp, in the order received.
	ForRefund(ctx context.Context, psp string) ([]wire.Notification, error)
	// ForPayment returns those whose originalReference is psp.
	ForPayment(ctx context.Context, psp string) ([]wire.Notification, error)
	All(ctx context.Context) ([]wire.Notification, error)
	Close() error
}

// CorruptError is a stored notification a reader refuses, at Where:Line
// (a file's line, or a table's seq).
type CorruptError struct {
	Where  string
	Line   int64
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("%s:%d: %s", e.Where, e.Line, e.Reason)
}

// InvalidError is a notification that every reader would refuse.
type InvalidError struct{ Reason string }

func (e *InvalidError) Error() string { return "notification not stored: " + e.Reason }

func check(n *wire.Notification, keys [][]byte) string {
	if n.V != wire.Version {
		return "unknown version v=" + strconv.Itoa(n.V) + " (this build reads v=" + strconv.Itoa(wire.Version) + ": use a newer refundkit)"
	}
	if !wire.Verify(&n.Item, keys...) {
		if n.Item.AdditionalData[wire.SignatureField] == "" {
			return "no " + wire.SignatureField + " (forged, or altered)"
		}
		return wire.SignatureField + " does not verify under the HMAC key (forged, altered, or signed under another key) for " + describe(&n.Item)
	}
	return ""
}

// decode reads and verifies one stored notification: why it is refused, or "".
func decode(doc []byte, keys [][]byte, n *wire.Notification) string {
	*n = wire.Notification{}
	if err := json.Unmarshal(doc, n); err != nil {
		return "not a notification: " + err.Error()
	}
	return check(n, keys)
}

// describe names an item by its event and references, never its signature.
func describe(it *wire.Item) string {
	s := it.EventCode + " pspReference=" + strconv.Quote(it.PSPReference)
	if it.OriginalReference != "" {
		s += " originalReference=" + strconv.Quote(it.OriginalReference)
	}
	return s
}

// index is a File's notifications, by dedup key and references.
type index struct {
	all       []wire.Notification
	keys      map[string]int
	byRefund  map[string][]int
	byPayment map[string][]int
}

func newIndex() *index {
	return &index{keys: map[string]int{}, byRefund: map[string][]int{}, byPayment: map[string][]int{}}
}

// add keeps n unless one of its key is kept (the first stands); another
// amount is kept beside it, a contradiction adyen.Outcome reports.
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

// keyOf makes two notifications one: wire.DedupKey and the amount.
func keyOf(it *wire.Item) string {
	return wire.DedupKey(it) + ":" + strconv.FormatInt(it.Amount.Value, 10) + it.Amount.Currency
}

// pick copies: a caller that changes one changes nothing kept.
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
