package events

// PayPal's events as the receiver keeps them, and a Client that settles
// refunds from them (refund.Teller) before it asks PayPal.

import (
	"context"
	"errors"
	"maps"
	"strconv"
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

// EventsFile is PayPal's kept events in a file (refund/provider/events).
type EventsFile struct {
	*store.File[Kept]
}

// OpenEvents opens the file of PayPal's kept events at path, whose lines
// must verify under v (its WebhookID, roots and hosts; its clock is not
// used: a kept line's age is no fault). write as events.Open.
func OpenEvents(path string, v *Verifier, write bool) (*EventsFile, error) {
	if v == nil || v.WebhookID == "" {
		return nil, errors.New("paypal events file: no verifier with a webhook id")
	}
	f, err := store.Open(path, keptCodec(v), write)
	if err != nil {
		return nil, err
	}
	return &EventsFile{f}, nil
}

// ErrEventsReadOnly is Add on a file opened for reading.
var ErrEventsReadOnly = errors.New("paypal events file opened for reading: Add needs write")

func keptCodec(v *Verifier) *store.Codec[Kept] {
	return &store.Codec[Kept]{
		File:  "paypal events file",
		Noun:  "event",
		Check: func(k *Kept) string { return checkKept(k, v) },
		Key:   func(k *Kept) string { return k.event.ID }, // PayPal's retries send the event id again
		Refs: func(k *Kept) (string, string) {
			if r := k.event.Refund; r != nil {
				return r.ID, r.Capture
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
func checkKept(k *Kept, v *Verifier) string {
	if k.V != KeptVersion {
		return "unknown version v=" + strconv.Itoa(k.V) + " (this build reads v=" + strconv.Itoa(KeptVersion) + ": use a newer refundkit)"
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

// Add keeps k durably unless its event is kept already (false, once that
// one is on disk). The receiver checked the delivery's age; Add checks
// the signature again, as every reader will.
func (x *EventsFile) Add(ctx context.Context, k Kept) (bool, error) {
	return x.File.Add(ctx, k, ErrEventsReadOnly)
}

// Telling is a Client that reads its kept events first: a refund they
// tell an outcome of is settled with no request (refund.Teller). The
// Client is embedded, so Telling is a refund.Provider (and PaymentKeeper)
// as it is; nil Client: Told and AllTold only.
type Telling struct {
	*paypal.Client
	Events *EventsFile
}

// Told is refund id as the kept events tell it.
func (t *Telling) Told(ctx context.Context, id string) (refund.Refund, bool, error) {
	kept, err := t.Events.ForRefund(id)
	if err != nil {
		return refund.Refund{}, false, err
	}
	evs := make([]Event, len(kept))
	for i := range kept {
		evs[i] = kept[i].event
	}
	r, ok := Outcome(id, evs)
	return r, ok, nil
}

// AllTold is every refund the kept events tell of, each as Told gives it
// (audit reads them against the journals).
func (t *Telling) AllTold(ctx context.Context) ([]refund.Refund, error) {
	kept, err := t.Events.All()
	if err != nil {
		return nil, err
	}
	told := make([]store.Told, len(kept))
	for i := range kept {
		e := &kept[i].event
		told[i] = store.Told{At: e.Created, ID: e.ID, Refund: e.Refund}
	}
	return store.Outcomes(told), nil
}

var (
	_ refund.Teller    = (*Telling)(nil)
	_ refund.AllTeller = (*Telling)(nil)
	_ refund.Provider  = (*Telling)(nil)
)

// Close closes the events file (the Client holds nothing to close).
func (t *Telling) Close() error { return t.Events.Close() }
