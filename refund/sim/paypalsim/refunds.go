package paypalsim

import (
	"time"

	"github.com/refundkit/refundkit/refund/sim"
)

// refund is one refund, never changed: a PENDING one's later status is
// fixed when made and read against the clock.
type refund struct {
	Refund  // as made: Status and Reason are statusAt's
	cp      *capture
	created time.Time

	initial  string    // the status it was made with
	settleAt time.Time // when a PENDING one settles; zero: never
	final    string    // what a PENDING one settles to
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

// refundPrefix and eleven digits make a refund's id, 17 characters.
const refundPrefix = "REFSIM"

// addRefund numbers r and adds it to r.cp, which the caller holds.
func (s *Server) addRefund(r *refund) *refund {
	r.Capture, r.Currency, r.Created = r.cp.id, r.cp.currency, r.created.Unix()
	s.refunds.Add(func(_ int, id string) *refund { r.ID = id; return r })
	r.cp.refunds = append(r.cp.refunds, r)
	return r
}

func (s *Server) refundByID(id string) *refund {
	r, _ := s.refunds.Get(id)
	return r
}

// Refund is a refund as the simulator holds it, for checks.
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
	// RequestID made it; PayPal does not show it, checks may.
	RequestID string `json:"paypal_request_id,omitempty"`
}

// Refunds returns every refund, oldest first, as they stand now.
func (s *Server) Refunds() []Refund {
	now := s.now()
	return sim.Map(s.refunds.All(), func(r *refund) Refund {
		out := r.Refund
		out.Status = r.statusAt(now)
		out.Reason = reasonOf(out.Status)
		return out
	})
}

// reasonOf is status_details.reason: ECHECK while PENDING or once FAILED.
func reasonOf(status string) string {
	if status == StatusPending || status == StatusFailed {
		return "ECHECK"
	}
	return ""
}
