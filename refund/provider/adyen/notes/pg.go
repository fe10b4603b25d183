package notes

import (
	"context"
	"errors"
	"time"

	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
	"github.com/refundkit/refundkit/refund/provider/events"
	"github.com/refundkit/refundkit/refund/provider/events/pgstore"
)

// PG is a Store in a table of the PostgreSQL checkpoint's database
// (refund/checkpoint/postgres's migration 5), that many receivers may add
// to at once: refund/provider/events/pgstore under Adyen's codec.
type PG struct {
	*pgstore.Store[wire.Notification]
}

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
	p, err := pgstore.Open(ctx, url, codec(keys), &events.Table[wire.Notification]{
		Name: table, What: "adyen notifications", App: "refundkit-adyen-webhook",
		Refund: "psp_reference", Payment: "original_reference", Kind: "event_code",
		// One row per wire.DedupKey, the table's primary key.
		Key:      func(n *wire.Notification) string { return wire.DedupKey(&n.Item) },
		KindOf:   func(n *wire.Notification) string { return n.Item.EventCode },
		Received: func(n *wire.Notification) time.Time { return n.Received },
		Describe: func(n *wire.Notification) string { return describe(&n.Item) },
	})
	if err != nil {
		return nil, err
	}
	return &PG{p}, nil
}
