package journal

// The one allow-list of refund statuses: a status counts by being on the
// list, so one this build does not know is neither done nor failed.

// Refund statuses, in refundkit's (Stripe's) words: every provider maps
// its own onto these.
const (
	SucceededStatus = "succeeded" // done: the money moved
	// PendingStatus: accepted, not finished (StatusPending until settled).
	PendingStatus = "pending"
	// RequiresActionStatus: Stripe waits for the customer; no money moved.
	RequiresActionStatus = "requires_action"
	FailedStatus         = "failed"   // ended without moving money
	CanceledStatus       = "canceled" // ended without moving money
)

// Outcome is what a refund status says of the money.
type Outcome uint8

const (
	// OutcomeUnknown: a status not on the list: in doubt (CodeStatusUnknown),
	// and nothing new is sent.
	OutcomeUnknown Outcome = iota
	OutcomeDone            // the money moved
	OutcomeMoving          // accepted, not finished: no money moved yet
	OutcomeDead            // ended without moving money
)

// Statuses is the allow-list (docs/records.md is tested against it).
var Statuses = map[string]Outcome{
	SucceededStatus:      OutcomeDone,
	PendingStatus:        OutcomeMoving,
	RequiresActionStatus: OutcomeMoving,
	FailedStatus:         OutcomeDead,
	CanceledStatus:       OutcomeDead,
}

// OutcomeOf is OutcomeUnknown for any status not on the list, "" included.
func OutcomeOf(status string) Outcome { return Statuses[status] }

func Done(status string) bool { return OutcomeOf(status) == OutcomeDone }

// Unfinished: pending or requires_action.
func Unfinished(status string) bool { return OutcomeOf(status) == OutcomeMoving }

// DeadStatus: failed or canceled; a refunded record in one credits nothing.
func DeadStatus(status string) bool { return OutcomeOf(status) == OutcomeDead }

// CodeStatusUnknown is the code of an item whose refund's status is not
// on the list, until the provider's word on that refund settles it.
const CodeStatusUnknown = "refund_status_unknown"
