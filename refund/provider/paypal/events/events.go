package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/refundkit/refundkit/refund"
	store "github.com/refundkit/refundkit/refund/provider/events"
	"github.com/refundkit/refundkit/refund/provider/paypal"
)

// RefundEvents are the event types whose resource is a refund. Only the
// first two are in PayPal's published list (Payments v2); the others are
// names PayPal has used for a refund's later states, read when they come.
// The refund's own status says what happened, never the event's name.
var RefundEvents = map[string]bool{
	"PAYMENT.CAPTURE.REFUNDED": true, // a merchant's refund of a capture
	"PAYMENT.CAPTURE.REVERSED": true, // PayPal's (a refund refundkit did not ask for)
	"PAYMENT.REFUND.PENDING":   true,
	"PAYMENT.REFUND.FAILED":    true,
	"PAYMENT.REFUND.CANCELLED": true,
}

// Event is what refundkit reads of one of PayPal's webhook events.
type Event struct {
	ID, Type string
	Created  time.Time      // PayPal's create_time; zero when unreadable
	Refund   *refund.Refund // the refund it tells of; nil for another event
}

// eventJSON is PayPal's event envelope.
type eventJSON struct {
	ID           string          `json:"id"`
	EventType    string          `json:"event_type"`
	ResourceType string          `json:"resource_type"`
	CreateTime   string          `json:"create_time"`
	Resource     json.RawMessage `json:"resource"`
}

// ReadEvent reads a verified event's body. An event of another type is
// kept (ID, Type, Created) with no refund.
func ReadEvent(body []byte) (Event, error) {
	var e eventJSON
	if err := json.Unmarshal(body, &e); err != nil {
		return Event{}, fmt.Errorf("not a PayPal event: %w", err)
	}
	if e.ID == "" || e.EventType == "" {
		return Event{}, errors.New("not a PayPal event: no id or event_type")
	}
	out := Event{ID: e.ID, Type: e.EventType}
	if t, err := time.Parse(time.RFC3339, e.CreateTime); err == nil {
		out.Created = t
	}
	if !RefundEvents[out.Type] {
		return out, nil
	}
	if e.ResourceType != "" && e.ResourceType != "refund" {
		return Event{}, fmt.Errorf("event %s (%s): resource is a %q, not a refund", e.ID, e.EventType, e.ResourceType)
	}
	if len(e.Resource) == 0 || string(e.Resource) == "null" {
		return Event{}, fmt.Errorf("event %s (%s): no resource", e.ID, e.EventType)
	}
	r, err := paypal.ReadRefund(e.Resource)
	if err != nil {
		return Event{}, fmt.Errorf("event %s (%s): resource: %w", e.ID, e.EventType, err)
	}
	out.Refund = &r
	return out, nil
}

// told is e's word on its refund.
func (e *Event) told() store.Told { return store.Told{At: e.Created, ID: e.ID, Refund: e.Refund} }
