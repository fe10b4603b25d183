package stripe

// Stripe's events as the receiver keeps them, and a Client that settles
// refunds from them (refund.Teller) before it asks Stripe.

import (
	"cmp"
	"context"
	"errors"
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
// database that many receivers share (pgstore.Open with EventsTable).
// Every reader verifies each event again under the signing secrets.
type EventStore = events.Store[Kept]

// EventsFile is Stripe's kept events in a file (refund/provider/events).
type EventsFile = events.File[Kept]

// EventsTable is the table of Stripe's kept events in the PostgreSQL
// checkpoint's database (refundkit.stripe_events, one row per event id, so
// that several receivers behind a balancer keep each event once), read
// under Codec(secrets): refund/provider/events/pgstore opens it.
var EventsTable = events.EventTable("refundkit.stripe_events", "stripe events", eventOf, func(k *Kept) time.Time { return k.Received })

func eventOf(k *Kept) (string, string, **refund.Refund) {
	return k.event.ID, k.event.Type, &k.event.Refund
}

// Codec is how kept events read: each verifies again under one of
// secrets, two are one by event id, looked up by refund and payment.
func Codec(secrets []string) *events.Codec[Kept] {
	return events.EventCodec("events file", ErrEventsReadOnly, func(k *Kept) string { return checkKept(k, secrets) }, eventOf,
		func(r *refund.Refund) string { return cmp.Or(r.Charge, r.PaymentIntent) })
}

// OpenEvents opens the file of Stripe's kept events at path, whose lines
// must verify under one of secrets (the endpoint's signing secrets; the
// old one too while lines signed under it are read). write as events.Open.
func OpenEvents(path string, secrets []string, write bool) (*EventsFile, error) {
	return events.Open(path, Codec(secrets), write)
}

// ErrEventsReadOnly is Add on a file opened for reading.
var ErrEventsReadOnly = errors.New("events file opened for reading: Add needs write")

// checkKept verifies k's signature again, with no tolerance (it was
// checked at receipt), and reads its event.
func checkKept(k *Kept, secrets []string) string {
	if why := events.CheckVersion(k.V, KeptVersion); why != "" {
		return why
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

// Telling is a Client that reads its kept events first: a refund they
// tell an outcome of is settled with no request (refund.Teller).
type Telling struct {
	*Client
	Events EventStore
	Live   bool // the key's mode: events of the other are not this account's refunds
}

// Told is refund id as the kept events of the key's mode tell it.
func (t *Telling) Told(ctx context.Context, id string) (refund.Refund, bool, error) {
	return events.TellRefund(ctx, t.Events, id, t.tell)
}

// AllTold is every refund the kept events of the key's mode tell of,
// each as Told gives it (audit reads them against the journals).
func (t *Telling) AllTold(ctx context.Context) ([]refund.Refund, error) {
	return events.TellAll(ctx, t.Events, t.tell)
}

// tell is k's word, of the key's mode only: events of the other are not
// this account's refunds.
func (t *Telling) tell(k *Kept) (events.Told, bool) {
	return k.event.told(), k.event.Livemode == t.Live
}

var (
	_ refund.Teller    = (*Telling)(nil)
	_ refund.AllTeller = (*Telling)(nil)
)

// Close closes the events file (the Client holds nothing to close).
func (t *Telling) Close() error { return t.Events.Close() }
