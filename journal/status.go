package journal

// The one allow-list of refund statuses: what a refunded record's status
// says of the money. A status is judged by being on the list, never by
// not being a known bad one: a status this build does not know (edited,
// removed, or new at a provider) means neither done nor failed.

// Refund statuses, in refundkit's words (Stripe's): every provider maps
// its own onto these (refund/provider/stripe, refund/provider/paypal, refund/provider/adyen,
// refund/provider/exec), and records and findings use them.
const (
	SucceededStatus = "succeeded" // done: the money moved
	// PendingStatus is the Status of a refunded record whose refund the
	// provider accepted and has not finished (Stripe's and PayPal's
	// pending): the item is StatusPending until a later record settles it.
	PendingStatus = "pending"
	// RequiresActionStatus is Stripe's status of a refund that waits for
	// the customer to act: no money has moved, and Stripe cancels it if
	// they do not. Like PendingStatus, it is not done.
	RequiresActionStatus = "requires_action"
	FailedStatus         = "failed"   // ended without moving money
	CanceledStatus       = "canceled" // ended without moving money
)

// Outcome is what a refund status says of the money.
type Outcome uint8

const (
	// OutcomeUnknown: a status not on the list. Whether money moved
	// cannot be told: the item is not done and not failed (in doubt,
	// code CodeStatusUnknown), and nothing new is sent for it.
	OutcomeUnknown Outcome = iota
	OutcomeDone            // the money moved
	OutcomeMoving          // accepted, not finished: no money moved yet
	OutcomeDead            // ended without moving money
)

// Statuses is the allow-list: every status refundkit knows, and its
// outcome. docs/records.md's status table is tested against it.
var Statuses = map[string]Outcome{
	SucceededStatus:      OutcomeDone,
	PendingStatus:        OutcomeMoving,
	RequiresActionStatus: OutcomeMoving,
	FailedStatus:         OutcomeDead,
	CanceledStatus:       OutcomeDead,
}

// OutcomeOf is the outcome of a refund in status: OutcomeUnknown for any
// status not on the list, "" included.
func OutcomeOf(status string) Outcome { return Statuses[status] }

// Done reports a status that says the money moved.
func Done(status string) bool { return OutcomeOf(status) == OutcomeDone }

// Unfinished reports the statuses of a refund that exists and has not
// finished (pending, requires_action): its item is StatusPending until a
// later record says how it ended.
func Unfinished(status string) bool { return OutcomeOf(status) == OutcomeMoving }

// DeadStatus reports the statuses of a refund that ended without moving
// money (failed, canceled): a refunded record in one of them, as older
// builds wrote a create answered so, credits no refund.
func DeadStatus(status string) bool { return OutcomeOf(status) == OutcomeDead }

// CodeStatusUnknown is the code of an item whose refund is journaled in a
// status not on the list: in doubt, its refund id kept, and settled only
// by the provider's word on that refund (a status on the list).
const CodeStatusUnknown = "refund_status_unknown"
