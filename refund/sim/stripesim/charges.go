package stripesim

import (
	"cmp"
	"fmt"
	"maps"
	"sync"

	"github.com/refundkit/refundkit/refund/sim"
)

// charge is one charge; mu guards AmountRefunded (what its refunds hold),
// their statuses and list.
type charge struct {
	ChargeState
	created int64

	mu      sync.Mutex
	refunds []*refund // oldest first; entries are never removed
}

// AddCharges adds charges and their seeded refunds, all or none.
func (s *Server) AddCharges(charges ...Charge) error {
	s.charges.Lock()
	defer s.charges.Unlock()
	s.byIntent.Lock()
	defer s.byIntent.Unlock()
	if err := sim.CheckNew(&s.charges, "charge", charges); err != nil {
		return err
	}
	for i, c := range charges {
		if c.PaymentIntent != "" && s.byIntent.M[c.PaymentIntent] != nil {
			return fmt.Errorf("charge %d: payment intent %s already has a charge", i+1, c.PaymentIntent)
		}
	}
	now := s.now().Unix()
	for _, c := range charges {
		ch := &charge{ChargeState: ChargeState{ID: c.ID, PaymentIntent: c.PaymentIntent, Currency: cmp.Or(c.Currency, "usd"), Amount: c.Amount}, created: now}
		ch.mu.Lock()
		for _, r := range c.Refunds {
			s.addRefund(ch, r.Amount, cmp.Or(r.Status, StatusSucceeded), r.Reason, copyMetadata(r.Metadata), "")
		}
		ch.mu.Unlock()
		s.charges.Put(ch.ID, ch)
		if ch.PaymentIntent != "" {
			s.byIntent.Put(ch.PaymentIntent, ch)
		}
	}
	return nil
}

// copyMetadata copies a metadata map; an empty one becomes nil.
func copyMetadata(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}

// ChargeState is a charge as the simulator holds it, for checks.
type ChargeState struct {
	ID             string `json:"id"`
	PaymentIntent  string `json:"payment_intent,omitempty"`
	Currency       string `json:"currency"`
	Amount         int64  `json:"amount"`
	AmountRefunded int64  `json:"amount_refunded"`
}

// Charge returns the state of one charge, and whether it exists.
func (s *Server) Charge(id string) (ChargeState, bool) {
	ch := s.charges.Get(id)
	if ch == nil {
		return ChargeState{}, false
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.ChargeState, true
}

func (s *Server) getCharge(c apiCall) sim.Answer {
	expand, a, ok := parseExpandOnly(c.form, "refunds")
	if !ok {
		return a
	}
	ch := s.charges.Get(c.id)
	if ch == nil {
		return missing("charge", "id", c.id)
	}
	ch.mu.Lock()
	obj := ch.object()
	if expand {
		obj.Refunds = ch.refundList()
	}
	ch.mu.Unlock()
	return found(obj)
}

// chargeRefunds is how many refunds an expanded charge shows, newest
// first, as Stripe's sublists do; has_more says the list pages on.
const chargeRefunds = 10

// refundList is the charge's refunds as its expanded sublist; the caller
// holds ch.mu.
func (ch *charge) refundList() *refundList {
	n := min(len(ch.refunds), chargeRefunds)
	list := &refundList{Object: "list", Data: make([]refundObject, n), HasMore: len(ch.refunds) > n,
		URL: "/v1/charges/" + ch.ID + "/refunds"}
	for i := range n {
		list.Data[i] = ch.refunds[len(ch.refunds)-1-i].object(false)
	}
	return list
}

// chargeObject is the part of Stripe's charge object the simulator keeps.
type chargeObject struct {
	ID             string            `json:"id"`
	Object         string            `json:"object"`
	Amount         int64             `json:"amount"`
	AmountCaptured int64             `json:"amount_captured"`
	AmountRefunded int64             `json:"amount_refunded"`
	Captured       bool              `json:"captured"`
	Created        int64             `json:"created"`
	Currency       string            `json:"currency"`
	Livemode       bool              `json:"livemode"`
	Metadata       map[string]string `json:"metadata"`
	Paid           bool              `json:"paid"`
	PaymentIntent  *string           `json:"payment_intent"`
	Refunded       bool              `json:"refunded"`
	Status         string            `json:"status"`
	Refunds        *refundList       `json:"refunds,omitempty"` // only when expanded
}

// object renders the charge; the caller holds ch.mu.
func (ch *charge) object() chargeObject {
	return chargeObject{
		ID: ch.ID, Object: "charge", Amount: ch.Amount, AmountCaptured: ch.Amount,
		AmountRefunded: ch.AmountRefunded, Captured: true, Created: ch.created, Currency: ch.Currency,
		Metadata: emptyMetadata, Paid: true, PaymentIntent: optional(ch.PaymentIntent),
		Refunded: ch.AmountRefunded == ch.Amount, Status: "succeeded",
	}
}

// listCharges is GET /v1/charges by payment_intent, the tools' one filter.
func (s *Server) listCharges(c apiCall) sim.Answer {
	form := c.form
	for name := range form {
		switch name {
		case "payment_intent", "limit":
		default:
			return invalid("parameter_unknown", name, "Received unknown parameter: %s", name)
		}
	}
	pi := form.Get("payment_intent")
	if pi == "" {
		return invalid("parameter_missing", "payment_intent", "The simulator lists charges only by payment_intent.")
	}
	list := chargeList{Object: "list", Data: []chargeObject{}, URL: "/v1/charges"}
	if ch := s.byIntent.Get(pi); ch != nil {
		ch.mu.Lock()
		list.Data = append(list.Data, ch.object())
		ch.mu.Unlock()
	}
	return found(list)
}

// target finds the charge a refund request names, or Stripe's 404.
func (s *Server) target(chargeID, intentID string) (*charge, sim.Answer, bool) {
	if chargeID != "" {
		if ch := s.charges.Get(chargeID); ch != nil {
			return ch, sim.Answer{}, true
		}
		return nil, missing("charge", "charge", chargeID), false
	}
	if ch := s.byIntent.Get(intentID); ch != nil {
		return ch, sim.Answer{}, true
	}
	return nil, missing("payment_intent", "payment_intent", intentID), false
}

// chargeList is Stripe's list object of charges.
type chargeList struct {
	Object  string         `json:"object"`
	Data    []chargeObject `json:"data"`
	HasMore bool           `json:"has_more"`
	URL     string         `json:"url"`
}
