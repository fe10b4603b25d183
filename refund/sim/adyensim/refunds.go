package adyensim

import (
	"time"

	"github.com/refundkit/refundkit/refund/sim"

	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
)

// What a refund ends as, fixed when it is made; its notifications tell it.
const (
	OutcomeRefunded = "refunded" // REFUND success "true"
	OutcomeRefused  = "refused"  // REFUND success "false": nothing refunded
	OutcomeFailed   = "failed"   // REFUND "true", then REFUND_FAILED
	OutcomeReversed = "reversed" // REFUND "true", then REFUNDED_REVERSED
	// StatusReceived is a refund's status until its REFUND is delivered.
	StatusReceived = "received"
)

// refundPrefix and ten digits make a pspReference, 16 characters as Adyen's.
const refundPrefix = "SIMREF"

// refund is one refund, fixed when made but for what was told (under p.mu).
type refund struct {
	Refund     // as made: Status is status's
	n      int // its number, for the draws of its notifications
	p      *payment

	// Under p.mu: which of its events a receiver has accepted.
	refundTold, laterTold bool
}

// holds reports whether the refund holds its amount; the caller holds r.p.mu.
func (r *refund) holds() bool { return r.Outcome != OutcomeRefused && !r.laterTold }

// status is what the delivered notifications told; the caller holds r.p.mu.
func (r *refund) status() string {
	switch {
	case r.laterTold:
		return r.Outcome
	case r.refundTold && r.Outcome == OutcomeRefused:
		return OutcomeRefused
	case r.refundTold:
		return OutcomeRefunded
	}
	return StatusReceived
}

// events are the refund's items, unsigned, in the order they happen.
func (r *refund) events() []wire.Item {
	it := wire.Item{Amount: wire.Amount{Currency: r.p.currency, Value: r.Amount}, EventCode: wire.EventRefund,
		EventDate: time.Unix(r.Created, 0).UTC().Format(time.RFC3339), MerchantAccountCode: r.MerchantAccount, MerchantReference: r.Reference,
		OriginalReference: r.p.psp, PSPReference: r.ID, Success: "true"}
	if r.Outcome == OutcomeRefused {
		it.Success, it.Reason = "false", r.Reason
		return []wire.Item{it}
	}
	out := []wire.Item{it}
	switch r.Outcome {
	case OutcomeFailed:
		it.EventCode, it.Reason = wire.EventRefundFailed, reasonFailed
		out = append(out, it)
	case OutcomeReversed:
		it.EventCode, it.Reason = wire.EventRefundReversed, reasonReversed
		out = append(out, it)
	}
	return out
}

// addRefund numbers r and records it on r.p, whose lock the caller holds.
func (s *Server) addRefund(r *refund) {
	r.Payment, r.Currency = r.p.psp, r.p.currency
	s.refunds.Add(func(n int, id string) *refund { r.n, r.ID = n, id; return r })
	r.p.refunds = append(r.p.refunds, r)
}

// Refund is a refund as the simulator holds it, for checks.
type Refund struct {
	// ID is the refund's pspReference; Payment, its payment's.
	ID       string `json:"id"`
	Payment  string `json:"payment"`
	Amount   int64  `json:"amount"` // minor units
	Currency string `json:"currency"`
	// Reference is the request's (merchantReference in notifications).
	Reference       string `json:"reference"`
	MerchantAccount string `json:"merchant_account"`
	// Status is what its delivered notifications told; Outcome, its end.
	Status string `json:"status"`
	// Outcome is what it ends as, once every notification is delivered.
	Outcome string `json:"outcome"`
	// Reason is a refused refund's reason (REFUND success "false").
	Reason  string `json:"reason,omitempty"`
	Created int64  `json:"created"`
	// IdempotencyKey made it; Adyen does not show it, checks may.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// Refunds returns every refund, oldest first, as they stand now.
func (s *Server) Refunds() []Refund {
	return sim.Map(s.refunds.All(), func(r *refund) Refund {
		r.p.mu.Lock()
		defer r.p.mu.Unlock()
		out := r.Refund
		out.Status = r.status()
		return out
	})
}

// delivered is told that a receiver accepted item.
func (s *Server) delivered(it *wire.Item) {
	r, ok := s.refunds.Get(it.PSPReference)
	if !ok {
		return
	}
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	if it.EventCode == wire.EventRefund {
		r.refundTold = true
	} else {
		r.laterTold = true
	}
}
