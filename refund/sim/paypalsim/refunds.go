package paypalsim

import (
	"time"

	"github.com/refundkit/refundkit/refund/sim"
)

// refund is one refund. Nothing of it changes after creation: a PENDING
// refund's later status is fixed when it is made (settleAt, final) and
// read against the clock, so a look-up needs no lock and no timer runs.
type refund struct {
	id        string
	cp        *capture
	amount    int64
	fields    refundFields
	created   time.Time
	requestID string // the PayPal-Request-Id that made it ("" if none or seeded)

	initial  string    // the status it was made with
	settleAt time.Time // when a PENDING one settles; zero: never
	final    string    // what a PENDING one settles to
}

// refundFields are the optional fields of a refund request, kept as given.
type refundFields struct {
	customID, invoiceID, noteToPayer string
}

// statusAt is the refund's status at now.
func (r *refund) statusAt(now time.Time) string {
	if r.initial == StatusPending && !r.settleAt.IsZero() && !now.Before(r.settleAt) {
		return r.final
	}
	return r.initial
}

// updatedAt is when the refund last changed status, as seen at now.
func (r *refund) updatedAt(now time.Time) time.Time {
	if r.statusAt(now) != r.initial {
		return r.settleAt
	}
	return r.created
}

// refundPrefix and the number in eleven digits make a refund's id: 17
// characters, like PayPal's ids.
const refundPrefix = "REFSIM"

func refundID(n int) string { return sim.Padded(refundPrefix, 11, n) }

// addRefund numbers r and records it on r.cp, whose lock the caller holds
// or which nobody else sees yet. r is complete: nothing of it changes after.
func (s *Server) addRefund(r *refund) *refund {
	s.refunds.Add(func(_ int, id string) *refund { r.id = id; return r })
	r.cp.refunds = append(r.cp.refunds, r)
	return r
}

func (s *Server) refundByID(id string) *refund {
	r, _ := s.refunds.Get(id)
	return r
}

// Refund is a refund as the simulator holds it, for checks by tests and
// scripts (GET /_sim/refunds writes these as JSON lines after Stripe's).
type Refund struct {
	ID       string `json:"id"`
	Capture  string `json:"capture"`
	Amount   int64  `json:"amount"` // minor units
	Currency string `json:"currency"`
	Status   string `json:"status"`
	// Reason is status_details.reason (ECHECK) while PENDING or once FAILED.
	Reason      string `json:"reason,omitempty"`
	CustomID    string `json:"custom_id,omitempty"`
	InvoiceID   string `json:"invoice_id,omitempty"`
	NoteToPayer string `json:"note_to_payer,omitempty"`
	Created     int64  `json:"created"`
	// RequestID is the PayPal-Request-Id of the request that made it;
	// PayPal does not show it, checks may.
	RequestID string `json:"paypal_request_id,omitempty"`
}

// Refunds returns every refund, oldest first, as they stand now.
func (s *Server) Refunds() []Refund {
	all := s.refunds.All()
	now := s.now()
	out := make([]Refund, len(all))
	for i, r := range all {
		st := r.statusAt(now)
		out[i] = Refund{ID: r.id, Capture: r.cp.id, Amount: r.amount, Currency: r.cp.currency, Status: st,
			Reason: reasonOf(st), CustomID: r.fields.customID, InvoiceID: r.fields.invoiceID,
			NoteToPayer: r.fields.noteToPayer, Created: r.created.Unix(), RequestID: r.requestID}
	}
	return out
}

// reasonOf is status_details.reason for a status: the simulator's pending
// refunds are eChecks that have not cleared (PayPal's one documented
// reason, "why the refund has the PENDING or FAILED status").
func reasonOf(status string) string {
	if status == StatusPending || status == StatusFailed {
		return "ECHECK"
	}
	return ""
}
