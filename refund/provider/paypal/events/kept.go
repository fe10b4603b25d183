package events

// PayPal's events as the receiver keeps them, and a Client that settles
// refunds from them (refund.Teller) before it asks PayPal.

import (
	"context"
	"errors"
	"time"

	"github.com/refundkit/refundkit/refund"
	store "github.com/refundkit/refundkit/refund/provider/events"
	"github.com/refundkit/refundkit/refund/provider/paypal"
)

// KeptVersion is the version of a kept event's line.
const KeptVersion = 1

// ReverifyTimeout bounds the verification of one kept line, a certificate
// fetch included (certificates are cached by URL: a file costs one fetch
// per certificate, not per line).
const ReverifyTimeout = 30 * time.Second

// Kept is one of PayPal's events as the receiver accepted it: the body
// byte for byte and the five headers that signed it, so that every reader
// verifies it again (a line edited by hand, or written by anyone without
// PayPal's key, is refused).
type Kept struct {
	V        int       `json:"v"`
	Received time.Time `json:"received"` // the receiver's clock
	Headers  Headers   `json:"paypal"`
	Payload  string    `json:"payload"`

	event Event // read from Payload by the codec's Check
}

// Event is what the kept payload says (valid once it was checked).
func (k *Kept) Event() Event { return k.event }

// EventStore is where the receiver keeps PayPal's events and refund
// reads them: a file (OpenEvents) or a table of the PostgreSQL
// checkpoint's database that many receivers share (pgstore.Open with
// EventsTable). Every reader verifies each event again.
type EventStore = store.Store[Kept]

// EventsFile is PayPal's kept events in a file (refund/provider/events).
type EventsFile = store.File[Kept]

// EventsTable is the table of PayPal's kept events in the PostgreSQL
// checkpoint's database (refundkit.paypal_events, one row per event id),
// read under Codec(v): refund/provider/events/pgstore opens it.
var EventsTable = store.EventTable("refundkit.paypal_events", "paypal events", eventOf, func(k *Kept) time.Time { return k.Received })

func eventOf(k *Kept) (string, string, **refund.Refund) {
	return k.event.ID, k.event.Type, &k.event.Refund
}

// Codec is how kept events read: each verifies again under v, two are
// one by event id, looked up by refund and capture.
func Codec(v *Verifier) (*store.Codec[Kept], error) {
	if v == nil || v.WebhookID == "" {
		return nil, errors.New("paypal events: no verifier with a webhook id")
	}
	return store.EventCodec("paypal events file", ErrEventsReadOnly, func(k *Kept) string { return checkKept(k, v) }, eventOf,
		func(r *refund.Refund) string { return r.Capture }), nil
}

// OpenEvents opens the file of PayPal's kept events at path, whose lines
// must verify under v (its WebhookID, roots and hosts; its clock is not
// used: a kept line's age is no fault). write as events.Open.
func OpenEvents(path string, v *Verifier, write bool) (*EventsFile, error) {
	c, err := Codec(v)
	if err != nil {
		return nil, errors.New("paypal events file: no verifier with a webhook id")
	}
	return store.Open(path, c, write)
}

// ErrEventsReadOnly is Add on a file opened for reading.
var ErrEventsReadOnly = errors.New("paypal events file opened for reading: Add needs write")

// checkKept verifies k's signature again, with no tolerance (it was
// checked at receipt), and reads its event.
func checkKept(k *Kept, v *Verifier) string {
	if why := store.CheckVersion(k.V, KeptVersion); why != "" {
		return why
	}
	ctx, cancel := context.WithTimeout(context.Background(), ReverifyTimeout)
	defer cancel()
	if err := v.Reverify(ctx, k.Headers, []byte(k.Payload)); err != nil {
		if errors.Is(err, ErrCertFetch) {
			return "cannot verify the PayPal signature now (read again once the certificate can be fetched): " + err.Error()
		}
		return "PayPal signature does not verify for the webhook (forged, altered, or sent to another webhook): " + err.Error()
	}
	e, err := ReadEvent([]byte(k.Payload))
	if err != nil {
		return err.Error()
	}
	k.event = e
	return ""
}

// Telling is a Client that reads its kept events first: a refund they
// tell an outcome of is settled with no request (refund.Teller). The
// Client is embedded, so Telling is a refund.Provider (and PaymentKeeper)
// as it is; nil Client: Told and AllTold only.
type Telling struct {
	*paypal.Client
	Events EventStore
}

// Told is refund id as the kept events tell it.
func (t *Telling) Told(ctx context.Context, id string) (refund.Refund, bool, error) {
	return store.TellRefund(ctx, t.Events, id, tell)
}

// AllTold is every refund the kept events tell of, each as Told gives it
// (audit reads them against the journals).
func (t *Telling) AllTold(ctx context.Context) ([]refund.Refund, error) {
	return store.TellAll(ctx, t.Events, tell)
}

func tell(k *Kept) (store.Told, bool) { return k.event.told(), true }

var (
	_ refund.Teller    = (*Telling)(nil)
	_ refund.AllTeller = (*Telling)(nil)
	_ refund.Provider  = (*Telling)(nil)
)

// Close closes the events file (the Client holds nothing to close).
func (t *Telling) Close() error { return t.Events.Close() }
