package events

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/refundkit/refundkit/refund"
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

// Outcome is refund id as events tell it, whatever their order: a refund
// that ended without moving money (failed, canceled) stays so; one that
// succeeded is succeeded unless an event says it ended so; else the
// latest event's status. Events that disagree on the capture, amount,
// currency or metadata of one refund contradict: it stays pending, with
// ReasonContradicts, for a person. ok is false when none names it.
func Outcome(id string, events []Event) (r refund.Refund, ok bool) {
	var mine []Event
	for _, e := range events {
		if e.Refund != nil && e.Refund.ID == id {
			mine = append(mine, e)
		}
	}
	if len(mine) == 0 {
		return refund.Refund{}, false
	}
	// Oldest first, the event id breaking ties: the same events give the
	// same refund, field for field, in any order they arrived.
	slices.SortFunc(mine, func(a, b Event) int {
		return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(a.ID, b.ID))
	})
	r = *mine[0].Refund
	for _, e := range mine[1:] {
		got := e.Refund
		if !sameRefund(&r, got) {
			r.Status, r.FailureReason = refund.RefundPending, ReasonContradicts
			return r, true
		}
		if rank(got.Status) >= rank(r.Status) { // equal: the later event's
			r.Status, r.FailureReason = got.Status, got.FailureReason
		}
	}
	return r, true
}

// ReasonContradicts is the FailureReason of a refund whose events disagree.
const ReasonContradicts = "events_contradict"

// rank orders statuses by how final they are: a refund moves up only.
func rank(status string) int {
	switch status {
	case refund.RefundFailed, refund.RefundCanceled:
		return 3
	case refund.RefundSucceeded:
		return 2
	case refund.RefundPending, refund.RefundRequiresAction:
		return 1
	}
	return 0 // a status refundkit does not know: any known one tells more
}

// sameRefund reports whether two readings of one refund agree on what binds
// it to an item.
func sameRefund(a, b *refund.Refund) bool {
	if a.Capture != b.Capture || a.Amount != b.Amount || a.Currency != b.Currency {
		return false
	}
	for _, k := range []string{refund.MetaBatch, refund.MetaItem, refund.MetaAttempt} {
		if a.Metadata[k] != b.Metadata[k] {
			return false
		}
	}
	return true
}
