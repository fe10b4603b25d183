package paypalsim

// Orders v2: the order a capture was made through, where PayPal lists a
// capture's refunds with their custom_id (payment_collection).

import (
	"fmt"
	"net/http"
	"time"

	"github.com/refundkit/refundkit/refund/sim"
)

// order is an order and its captures (never changed), in one purchase unit.
type order struct {
	id       string
	currency string
	created  time.Time
	captures []*capture // in the order they were added
}

// orderPrefix and eleven digits make the id of a capture's own order.
const orderPrefix = "ORDSIM"

// checkOrders refuses two currencies in one order; under captures' lock.
func (s *Server) checkOrders(cs []Capture) error {
	currency := map[string]string{}
	for id, o := range s.orders {
		currency[id] = o.currency
	}
	for i := range cs {
		if err := inOneCurrency(currency, &cs[i]); err != nil {
			return fmt.Errorf("capture %d: %w", i+1, err)
		}
	}
	return nil
}

// inOneCurrency checks c's order's currency (order id: currency), noting it.
func inOneCurrency(currency map[string]string, c *Capture) error {
	if c.OrderID == "" {
		return nil
	}
	cur := currencyOf(c.Currency)
	if was, ok := currency[c.OrderID]; ok && was != cur {
		return fmt.Errorf("%s in %s, its order %s is in %s", c.ID, cur, c.OrderID, was)
	}
	currency[c.OrderID] = cur
	return nil
}

// placeInOrder adds cp to order id ("": a new ORDSIM one); under captures' lock.
func (s *Server) placeInOrder(cp *capture, id string, now time.Time) {
	if id == "" {
		for id == "" || s.orders[id] != nil {
			s.ordersMade++
			id = sim.Padded(orderPrefix, 11, s.ordersMade)
		}
	}
	o := s.orders[id]
	if o == nil {
		o = &order{id: id, currency: cp.currency, created: now}
		s.orders[id] = o
	}
	o.captures = append(o.captures, cp)
	cp.order = o
}

// orderID is the id of the capture's order, "" when it has none.
func (cp *capture) orderID() string {
	if cp.order == nil {
		return ""
	}
	return cp.order.id
}

// getOrder is GET /v2/checkout/orders/{id}: the order as it is now.
func (s *Server) getOrder(w http.ResponseWriter, c call) {
	s.show(w, c, func() ([]byte, bool) {
		s.captures.RLock()
		o := s.orders[c.id]
		s.captures.RUnlock()
		if o == nil {
			return nil, false
		}
		return sim.MustJSON(o.object(c.base, s.now())), true
	})
}

// orderJSON is an order, as show-order answers it.
type orderJSON struct {
	ID            string             `json:"id"`
	Intent        string             `json:"intent"`
	Status        string             `json:"status"`
	PurchaseUnits []purchaseUnitJSON `json:"purchase_units"`
	CreateTime    string             `json:"create_time"`
	UpdateTime    string             `json:"update_time"`
	Links         []linkJSON         `json:"links"`
}

type purchaseUnitJSON struct {
	ReferenceID string       `json:"reference_id"`
	Amount      moneyJSON    `json:"amount"`
	Payments    paymentsJSON `json:"payments"`
}

// paymentsJSON is Orders v2's payment_collection.
type paymentsJSON struct {
	Captures []captureJSON `json:"captures"`
	Refunds  []refundJSON  `json:"refunds,omitempty"`
}

// object renders the order at now, each capture under its own lock.
func (o *order) object(base string, now time.Time) orderJSON {
	var total int64
	pay := paymentsJSON{Captures: make([]captureJSON, 0, len(o.captures))}
	updated := o.created
	for _, cp := range o.captures {
		total += cp.amount
		cp.mu.Lock()
		c := cp.object(base, now)
		for _, r := range cp.refunds {
			pay.Refunds = append(pay.Refunds, r.object(base, now))
		}
		cp.mu.Unlock()
		if t, err := time.Parse(time.RFC3339, c.UpdateTime); err == nil && t.After(updated) {
			updated = t
		}
		pay.Captures = append(pay.Captures, c)
	}
	return orderJSON{
		ID: o.id, Intent: "CAPTURE", Status: "COMPLETED",
		PurchaseUnits: []purchaseUnitJSON{{ReferenceID: "default", Amount: moneyOf(total, o.currency), Payments: pay}},
		CreateTime:    stamp(o.created), UpdateTime: stamp(updated),
		Links: []linkJSON{{Href: base + "/v2/checkout/orders/" + o.id, Rel: "self", Method: "GET"}},
	}
}
