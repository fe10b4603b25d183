package events

import (
	"time"

	"github.com/refundkit/refundkit/refund"
)

// Table is a provider's table of kept deliveries (refund/checkpoint/
// postgres's migrations make it): its name, the columns a delivery's
// refund, payment and kind are looked up by, and what fills them.
type Table[N any] struct {
	Name                  string            // refundkit.stripe_events
	What                  string            // the deliveries in messages: "stripe events"
	App                   string            // application_name of the connections
	Refund, Payment, Kind string            // column names
	Key                   func(n *N) string // the primary key (dedup_key)
	KindOf                func(n *N) string
	Received              func(n *N) time.Time
	Describe              func(n *N) string // names it in messages, never its signature
}

// EventOf is what a provider's kept event K says once checked: its
// event's id and type, and the refund it tells of (nil: none).
type EventOf[K any] func(k *K) (id, typ string, r **refund.Refund)

// EventTable is a provider's table of events (refundkit.stripe_events,
// refundkit.paypal_events: one row per event id), whose deliveries say
// their event (of) and when they were received.
func EventTable[N any](name, what string, of EventOf[N], received func(n *N) time.Time) *Table[N] {
	return &Table[N]{
		Name: name, What: what, App: "refundkit-webhook",
		Refund: "refund_id", Payment: "payment_id", Kind: "event_type",
		Key:      func(n *N) string { id, _, _ := of(n); return id },
		KindOf:   func(n *N) string { _, typ, _ := of(n); return typ },
		Received: received,
		Describe: func(n *N) string { id, typ, _ := of(n); return EventName(id, typ) },
	}
}

// EventName names an event in messages: "event evt_1 (refund.updated)".
func EventName(id, typ string) string { return "event " + id + " (" + typ + ")" }
