package stripe

// Stripe's webhook events about refunds: verified under the endpoint's
// signing secrets by stripe-go's own webhook package, and read into the
// refund they tell of. What an event says is matched to an item only by
// the refund's id and metadata, and checked against the journal's binding
// by the engine, never trusted alone.

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	stripego "github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/provider/events"
)

// SignatureHeader is the header Stripe signs an event in.
const SignatureHeader = "Stripe-Signature"

// Tolerance is how old a signature's timestamp may be when the event
// arrives (Stripe's default): an older one is a replay.
const Tolerance = webhook.DefaultTolerance

// RefundEvents are the event types whose object is a refund.
var RefundEvents = map[string]bool{
	"refund.created":        true,
	"refund.updated":        true,
	"refund.failed":         true,
	"charge.refund.updated": true,
}

// ChargeRefunded is the event of a charge refunded in part or whole: its
// object is the charge, which names none of its refunds since API version
// 2022-11-15, so it is kept but settles nothing.
const ChargeRefunded = "charge.refunded"

// Event is what refundkit reads of one of Stripe's events.
type Event struct {
	ID, Type string
	Created  int64          // Unix seconds, Stripe's clock
	Livemode bool           // of a live account's refund, not a test one's
	Refund   *refund.Refund // the refund it tells of; nil for another event
}

// VerifyEvent checks that header (Stripe-Signature) signs payload under
// one of secrets (several while a secret is rolled), with a timestamp no
// older than tolerance; tolerance 0 checks the signature alone, as a
// reader of events kept long ago does. Each v1= signature is compared in
// constant time.
func VerifyEvent(payload []byte, header string, secrets []string, tolerance time.Duration) error {
	if len(secrets) == 0 {
		return errors.New("no signing secret")
	}
	var err error
	for _, s := range secrets {
		if tolerance == 0 {
			err = webhook.ValidatePayloadIgnoringTolerance(payload, header, s)
		} else {
			err = webhook.ValidatePayloadWithTolerance(payload, header, s, tolerance)
		}
		if !errors.Is(err, webhook.ErrNoValidSignature) {
			return err // nil, or a header no secret can make good
		}
	}
	return err
}

// envelope is what ReadEvent reads of an event beside its object: not
// stripego.Event, whose data decodes the object twice more (once into a
// map), a third of a settling rerun's time over 60,000 kept events.
type envelope struct {
	Account  string `json:"account"`
	Created  int64  `json:"created"`
	ID       string `json:"id"`
	Livemode bool   `json:"livemode"`
	Type     string `json:"type"`
	Data     *struct {
		Raw json.RawMessage `json:"object"`
	} `json:"data"`
}

// ReadEvent reads a verified event's payload.
func ReadEvent(payload []byte) (Event, error) {
	var e envelope
	if err := json.Unmarshal(payload, &e); err != nil {
		return Event{}, fmt.Errorf("not a Stripe event: %w", err)
	}
	if e.ID == "" || e.Type == "" {
		return Event{}, errors.New("not a Stripe event: no id or type")
	}
	out := Event{ID: e.ID, Type: e.Type, Created: e.Created, Livemode: e.Livemode}
	// A Connect endpoint also gets its connected accounts' events (account
	// set): their refunds are not the platform's, whose key refundkit uses.
	if !RefundEvents[out.Type] || e.Account != "" {
		return out, nil
	}
	if e.Data == nil || len(e.Data.Raw) == 0 {
		return Event{}, fmt.Errorf("event %s (%s): no data.object", e.ID, e.Type)
	}
	var r stripego.Refund
	if err := json.Unmarshal(e.Data.Raw, &r); err != nil {
		return Event{}, fmt.Errorf("event %s (%s): data.object: %w", e.ID, e.Type, err)
	}
	if r.ID == "" || r.Object != "refund" {
		return Event{}, fmt.Errorf("event %s (%s): data.object is no refund (object %q, id %q)", e.ID, e.Type, r.Object, r.ID)
	}
	rf := toRefund(&r)
	out.Refund = &rf
	return out, nil
}

// Outcome is refund id as its events tell it, in any order they came
// (events.Outcome: the most final status stands; disagreeing events
// settle nothing). ok is false when none names it.
func Outcome(id string, evs []Event) (refund.Refund, bool) {
	told := make([]events.Told, len(evs))
	for i := range evs {
		told[i] = evs[i].told()
	}
	return events.Outcome(id, told)
}

// told is e's word on its refund.
func (e *Event) told() events.Told {
	return events.Told{At: time.Unix(e.Created, 0), ID: e.ID, Refund: e.Refund}
}

// ReasonContradicts is the FailureReason of a refund whose events disagree.
const ReasonContradicts = events.ReasonContradicts
