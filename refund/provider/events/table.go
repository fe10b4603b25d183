package events

import "time"

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
