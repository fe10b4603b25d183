package stripesim

import (
	"net/http"

	"github.com/refundkit/refundkit/refund/sim"
)

// chargeByIntent is the charge of a payment intent, nil if none. A
// simulated payment intent is the one charge it captured (Charge's
// PaymentIntent): the refund endpoints and GET /v1/charges find the charge
// by it.
func (s *Server) chargeByIntent(id string) *charge {
	s.chargesMu.RLock()
	defer s.chargesMu.RUnlock()
	return s.byIntent[id]
}

// listCharges is GET /v1/charges filtered by payment_intent, the one filter
// the tools use: the charges of a payment intent (here at most one).
func (s *Server) listCharges(c apiCall) answer {
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
	if ch := s.chargeByIntent(pi); ch != nil {
		ch.mu.Lock()
		list.Data = append(list.Data, ch.object())
		ch.mu.Unlock()
	}
	return answer{status: http.StatusOK, body: sim.MustJSON(list)}
}

// target finds the charge a refund request names by its id, or else by
// its payment intent, or answers Stripe's 404 for the one it names.
func (s *Server) target(chargeID, intentID string) (*charge, answer, bool) {
	if chargeID != "" {
		if ch := s.chargeByID(chargeID); ch != nil {
			return ch, answer{}, true
		}
		return nil, missing("charge", "charge", chargeID), false
	}
	if ch := s.chargeByIntent(intentID); ch != nil {
		return ch, answer{}, true
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
