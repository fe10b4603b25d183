// Package notes keeps the Adyen notifications that the receiver
// (refund/provider/adyen/webhook) accepted, in a file (File), a PostgreSQL
// table (PG) or a NATS JetStream bucket (OpenNATS): Adyen answers a refund
// only "received", and its outcome is what these hold. Every reader verifies each one again under
// the HMAC key, and refuses (*CorruptError) what does not.
package notes

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
	"github.com/refundkit/refundkit/refund/provider/events"
	"github.com/refundkit/refundkit/refund/provider/events/natsstore"
	"github.com/refundkit/refundkit/refund/provider/events/pgstore"
)

// Store keeps accepted notifications: a notification is one by its
// DedupKey, answered [accepted] only once Add has kept it durably, and
// refused (*InvalidError) if it does not verify. ForRefund and
// ForPayment look one up by pspReference and originalReference.
type Store = events.Store[wire.Notification]

// File is a Store in a file of JSON lines, one wire.Notification a line,
// as received: refund/provider/events' File under Adyen's codec.
type File = events.File[wire.Notification]

// The stores' errors are the events package's.
type (
	LockedError  = events.LockedError
	CorruptError = events.CorruptError
	InvalidError = events.InvalidError
)

// ErrReadOnly is Add on a File opened for reading.
var ErrReadOnly = errors.New("notification file opened for reading: Add needs write")

// codec is Adyen's: every line verifies under one of keys, two are one by
// keyOf, looked up by pspReference and originalReference.
func codec(keys [][]byte) *events.Codec[wire.Notification] {
	return &events.Codec[wire.Notification]{
		File:     "notifications file",
		Noun:     "notification",
		Check:    func(n *wire.Notification) string { return check(n, keys) },
		Key:      func(n *wire.Notification) string { return keyOf(&n.Item) },
		Refs:     func(n *wire.Notification) (string, string) { return n.Item.PSPReference, n.Item.OriginalReference },
		Clone:    clone,
		ReadOnly: ErrReadOnly,
	}
}

// OpenFile opens the notifications file at path, whose lines must verify
// under one of keys; write as events.Open.
func OpenFile(path string, keys [][]byte, write bool) (*File, error) {
	if wire.NoKey(keys) {
		return nil, errors.New("notifications file " + path + ": no HMAC key")
	}
	return events.Open(path, codec(keys), write)
}

// PG is a Store in a table of the PostgreSQL checkpoint's database
// (refund/checkpoint/postgres's migration 5), that many receivers may add
// to at once: refund/provider/events/pgstore under Adyen's codec.
type PG = pgstore.Store[wire.Notification]

// OpenPG opens the store of refund events at url (as refund --journal
// takes it), migrating refundkit's schema first. Rows must verify under one of keys.
func OpenPG(ctx context.Context, url string, keys [][]byte) (*PG, error) {
	return openPG(ctx, url, keys, "refundkit.adyen_notifications")
}

// OpenPGOthers opens the store of the other events, beside OpenPG's.
func OpenPGOthers(ctx context.Context, url string, keys [][]byte) (*PG, error) {
	return openPG(ctx, url, keys, "refundkit.adyen_other_notifications")
}

func openPG(ctx context.Context, url string, keys [][]byte, table string) (*PG, error) {
	if wire.NoKey(keys) {
		return nil, errors.New("adyen notifications in postgres: no HMAC key")
	}
	return pgstore.Open(ctx, url, codec(keys), &events.Table[wire.Notification]{
		Name: table, What: "adyen notifications", App: "refundkit-adyen-webhook",
		Refund: "psp_reference", Payment: "original_reference", Kind: "event_code",
		// One row per wire.DedupKey, the table's primary key.
		Key:      func(n *wire.Notification) string { return wire.DedupKey(&n.Item) },
		KindOf:   func(n *wire.Notification) string { return n.Item.EventCode },
		Received: func(n *wire.Notification) time.Time { return n.Received },
		Describe: func(n *wire.Notification) string { return describe(&n.Item) },
	})
}

// OpenNATS keeps notifications in kv, a bucket beside the NATS JetStream
// checkpoint (refund/checkpoint/natsjs's Checkpoint.EventsBucket opens it);
// they must verify under one of keys; done, if not nil, is called by Close.
func OpenNATS(kv jetstream.KeyValue, keys [][]byte, done func()) (Store, error) {
	if wire.NoKey(keys) {
		return nil, errors.New("adyen notifications in NATS: no HMAC key")
	}
	return natsstore.New(kv, codec(keys), done), nil
}

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
