package events

import (
	"context"
	"maps"
	"strconv"
	"time"

	"github.com/refundkit/refundkit/refund"
)

// Store is where a receiver keeps one provider's deliveries and readers
// find them: a File, or a table of the PostgreSQL checkpoint's database
// (package pgstore). Every reader verifies each delivery again.
type Store[N any] interface {
	// Add keeps n durably unless it is kept already (false, once that
	// one is durable too); only then may the receiver answer 2xx.
	Add(ctx context.Context, n N) (added bool, err error)
	ForRefund(ctx context.Context, id string) ([]N, error) // in the order received
	ForPayment(ctx context.Context, id string) ([]N, error)
	All(ctx context.Context) ([]N, error)
	Close() error
}

var _ Store[struct{}] = (*File[struct{}])(nil)

// CheckVersion is a Codec's Check of a kept line's version v: why a
// reader of this build's want refuses it, or "".
func CheckVersion(v, want int) string {
	if v == want {
		return ""
	}
	return "unknown version v=" + strconv.Itoa(v) + " (this build reads v=" + strconv.Itoa(want) + ": use a newer refundkit)"
}

// EventCodec is the Codec of a provider's kept events in file: check
// verifies one again and reads its event (of), payment is its refund's.
func EventCodec[K any](file string, readOnly error, check func(*K) string, of EventOf[K], payment func(*refund.Refund) string) *Codec[K] {
	return &Codec[K]{
		File:  file,
		Noun:  "event",
		Check: check,
		Key:   func(k *K) string { id, _, _ := of(k); return id }, // a provider's retries send the event id again
		Refs: func(k *K) (string, string) {
			if _, _, r := of(k); *r != nil {
				return (*r).ID, payment(*r)
			}
			return "", ""
		},
		Clone: func(k K) K {
			_, _, r := of(&k)
			*r = CloneRefund(*r)
			return k
		},
		ReadOnly: readOnly,
	}
}

// CloneRefund is a copy of r whose metadata is its own (nil for nil).
func CloneRefund(r *refund.Refund) *refund.Refund {
	if r == nil {
		return nil
	}
	c := *r
	c.Metadata = maps.Clone(r.Metadata)
	return &c
}

// TellRefund is refund id as the deliveries s keeps of it tell it
// (refund.Teller's Told): tell is one delivery's word, false where it
// tells nothing here (an event of the other mode).
func TellRefund[N any](ctx context.Context, s Store[N], id string, tell func(*N) (Told, bool)) (refund.Refund, bool, error) {
	kept, err := s.ForRefund(ctx, id)
	if err != nil {
		return refund.Refund{}, false, err
	}
	r, ok := Outcome(id, words(kept, tell))
	return r, ok, nil
}

// TellAll is every refund s's deliveries tell of, each as TellRefund
// gives it (refund.AllTeller's AllTold: audit reads them against the
// journals).
func TellAll[N any](ctx context.Context, s Store[N], tell func(*N) (Told, bool)) ([]refund.Refund, error) {
	kept, err := s.All(ctx)
	if err != nil {
		return nil, err
	}
	return Outcomes(words(kept, tell)), nil
}

func words[N any](kept []N, tell func(*N) (Told, bool)) []Told {
	told := make([]Told, 0, len(kept))
	for i := range kept {
		if t, ok := tell(&kept[i]); ok {
			told = append(told, t)
		}
	}
	return told
}

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
