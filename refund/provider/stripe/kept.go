package stripe

// Stripe's events as the receiver keeps them, and a Client that settles
// refunds from them (refund.Teller) before it asks Stripe.

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"strconv"
	"time"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/provider/events"
)

// KeptVersion is the version of a kept event's line.
const KeptVersion = 1

// Kept is one of Stripe's events as the receiver accepted it: the body
// byte for byte and the Stripe-Signature it came with, so that every
// reader verifies it again (a line edited by hand, or written by anyone
// without the endpoint's secret, is refused).
type Kept struct {
	V         int       `json:"v"`
	Received  time.Time `json:"received"` // the receiver's clock
	Signature string    `json:"stripe_signature"`
	Payload   string    `json:"payload"`

	event Event // read from Payload by the codec's Check
}

// Event is what the kept payload says (valid once it was checked).
func (k *Kept) Event() Event { return k.event }

// EventStore is where the receiver keeps Stripe's events and refund reads
// them: a file (OpenEvents) or a table of the PostgreSQL checkpoint's
// database that many receivers share (pgstore.Open with EventsTable). Every reader verifies
// each event again under the signing secrets.
type EventStore interface {
	// Add keeps k durably unless its event is kept already (false, once
	// that one is durable too); only then may the receiver answer 2xx.
	Add(ctx context.Context, k Kept) (added bool, err error)
	ForRefund(ctx context.Context, id string) ([]Kept, error) // in the order received
	All(ctx context.Context) ([]Kept, error)
	Close() error
}

// EventsFile is Stripe's kept events in a file (refund/provider/events).
type EventsFile struct {
	*events.File[Kept]
}

func (x *EventsFile) ForRefund(_ context.Context, id string) ([]Kept, error) {
	return x.File.ForRefund(id)
}

func (x *EventsFile) All(context.Context) ([]Kept, error) { return x.File.All() }

// EventsTable is the table of Stripe's kept events in the PostgreSQL
// checkpoint's database (refundkit.stripe_events, one row per event id, so
// that several receivers behind a balancer keep each event once), read
// under Codec(secrets): refund/provider/events/pgstore opens it.
var EventsTable = &events.Table[Kept]{
	Name: "refundkit.stripe_events", What: "stripe events", App: "refundkit-webhook",
	Refund: "refund_id", Payment: "payment_id", Kind: "event_type",
	Key:      func(k *Kept) string { return k.event.ID },
	KindOf:   func(k *Kept) string { return k.event.Type },
	Received: func(k *Kept) time.Time { return k.Received },
	Describe: func(k *Kept) string { return "event " + k.event.ID + " (" + k.event.Type + ")" },
}

// Codec is how kept events read: each verifies again under one of
// secrets, two are one by event id, looked up by refund and payment.
func Codec(secrets []string) *events.Codec[Kept] { return keptCodec(secrets) }

// OpenEvents opens the file of Stripe's kept events at path, whose lines
// must verify under one of secrets (the endpoint's signing secrets; the
// old one too while lines signed under it are read). write as events.Open.
func OpenEvents(path string, secrets []string, write bool) (*EventsFile, error) {
	f, err := events.Open(path, keptCodec(secrets), write)
	if err != nil {
		return nil, err
	}
	return &EventsFile{f}, nil
}

// ErrEventsReadOnly is Add on a file opened for reading.
var ErrEventsReadOnly = errors.New("events file opened for reading: Add needs write")

func keptCodec(secrets []string) *events.Codec[Kept] {
	return &events.Codec[Kept]{
		File:  "events file",
		Noun:  "event",
		Check: func(k *Kept) string { return checkKept(k, secrets) },
		Key:   func(k *Kept) string { return k.event.ID },
		Refs: func(k *Kept) (string, string) {
			if r := k.event.Refund; r != nil {
				return r.ID, cmp.Or(r.Charge, r.PaymentIntent)
			}
			return "", ""
		},
		Clone: func(k Kept) Kept {
			if r := k.event.Refund; r != nil {
				c := *r
				c.Metadata = maps.Clone(r.Metadata)
				k.event.Refund = &c
			}
			return k
		},
	}
}

// checkKept verifies k's signature again, with no tolerance (it was
// checked at receipt), and reads its event.
func checkKept(k *Kept, secrets []string) string {
	if k.V != KeptVersion {
		return "unknown version v=" + strconv.Itoa(k.V) + " (this build reads v=" + strconv.Itoa(KeptVersion) + ": use a newer refundkit)"
	}
	if err := VerifyEvent([]byte(k.Payload), k.Signature, secrets, 0); err != nil {
		return "Stripe-Signature does not verify under the signing secrets (forged, altered, or signed under another secret): " + err.Error()
	}
	e, err := ReadEvent([]byte(k.Payload))
	if err != nil {
		return err.Error()
	}
	k.event = e
	return ""
}

// Add keeps k durably unless its event is kept already (false, once that
// one is on disk). The receiver checked the signature's age; Add checks
// the signature again, as every reader will.
func (x *EventsFile) Add(ctx context.Context, k Kept) (bool, error) {
	return x.File.Add(ctx, k, ErrEventsReadOnly)
}

// Telling is a Client that reads its kept events first: a refund they
// tell an outcome of is settled with no request (refund.Teller).
type Telling struct {
	*Client
	Events EventStore
	Live   bool // the key's mode: events of the other are not this account's refunds
}

// Told is refund id as the kept events of the key's mode tell it.
func (t *Telling) Told(ctx context.Context, id string) (refund.Refund, bool, error) {
	kept, err := t.Events.ForRefund(ctx, id)
	if err != nil {
		return refund.Refund{}, false, err
	}
	evs := make([]Event, 0, len(kept))
	for i := range kept {
		if kept[i].event.Livemode == t.Live {
			evs = append(evs, kept[i].event)
		}
	}
	r, ok := Outcome(id, evs)
	return r, ok, nil
}

// AllTold is every refund the kept events of the key's mode tell of,
// each as Told gives it (audit reads them against the journals).
func (t *Telling) AllTold(ctx context.Context) ([]refund.Refund, error) {
	kept, err := t.Events.All(ctx)
	if err != nil {
		return nil, err
	}
	var told []events.Told
	for i := range kept {
		if e := &kept[i].event; e.Livemode == t.Live {
			told = append(told, events.Told{At: time.Unix(e.Created, 0), ID: e.ID, Refund: e.Refund})
		}
	}
	return events.Outcomes(told), nil
}

var (
	_ refund.Teller    = (*Telling)(nil)
	_ refund.AllTeller = (*Telling)(nil)
	_ EventStore       = (*EventsFile)(nil)
)

// Close closes the events file (the Client holds nothing to close).
func (t *Telling) Close() error { return t.Events.Close() }
