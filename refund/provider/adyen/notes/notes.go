// Package notes keeps the Adyen notifications that the receiver
// (refund/provider/adyen/webhook) accepted, in a file (File) or a
// PostgreSQL table (PG): Adyen answers a refund only "received", and its
// outcome is what these hold. Every reader verifies each one again under
// the HMAC key, and refuses (*CorruptError) what does not.
package notes

import (
	"maps"
	"slices"
	"strconv"

	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
	"github.com/refundkit/refundkit/refund/provider/events"
)

// Store keeps accepted notifications: a notification is one by its
// DedupKey, answered [accepted] only once Add has kept it durably, and
// refused (*InvalidError) if it does not verify. ForRefund and
// ForPayment look one up by pspReference and originalReference.
type Store = events.Store[wire.Notification]

func check(n *wire.Notification, keys [][]byte) string {
	if why := events.CheckVersion(n.V, wire.Version); why != "" {
		return why
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
func decode(doc []byte, keys [][]byte, n *wire.Notification) (why string) {
	*n, why = events.Decode(doc, codec(keys))
	return why
}

// describe names an item by its event and references, never its signature.
func describe(it *wire.Item) string {
	s := it.EventCode + " pspReference=" + strconv.Quote(it.PSPReference)
	if it.OriginalReference != "" {
		s += " originalReference=" + strconv.Quote(it.OriginalReference)
	}
	return s
}

// keyOf makes two notifications one: wire.DedupKey and the amount.
func keyOf(it *wire.Item) string {
	return wire.DedupKey(it) + ":" + strconv.FormatInt(it.Amount.Value, 10) + it.Amount.Currency
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
