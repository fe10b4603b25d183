package paypalsim

import (
	"cmp"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/refundkit/refundkit/refund/provider/paypal/wire"
	"github.com/refundkit/refundkit/refund/sim"
)

// Capture is a captured payment, as seeded (JSON lines of these fields).
type Capture struct {
	// ID is letters and digits (PayPal's: 17 upper-case ones).
	ID string `json:"id"`
	// Currency is an ISO code, upper or lower case; empty means USD.
	Currency string `json:"currency,omitempty"`
	// Amount is the captured amount in the currency's minor units.
	Amount int64 `json:"amount"`
	// Refunds already on the capture when it is added, oldest first.
	Refunds []SeedRefund `json:"refunds,omitempty"`
	// OrderID is the Orders v2 order it was made through, with the others
	// that name it (empty: an order of its own, ORDSIM...).
	OrderID string `json:"order_id,omitempty"`
	// NoOrder: made without Orders v2, so no order lists its refunds.
	NoOrder bool `json:"no_order,omitempty"`
}

// SeedRefund is a refund made before the run under test.
type SeedRefund struct {
	Amount int64 `json:"amount"`
	// Status is COMPLETED (""), PENDING (for good), FAILED or CANCELLED.
	Status   string `json:"status,omitempty"`
	CustomID string `json:"custom_id,omitempty"`
}

// PayPal's refund statuses.
const (
	StatusCompleted = "COMPLETED"
	StatusPending   = "PENDING"
	StatusFailed    = "FAILED"
	StatusCancelled = "CANCELLED"
)

var (
	captureIDRE = regexp.MustCompile(`^[A-Za-z0-9]{1,64}$`)
	// orderIDRE is related_ids.order_id: 1-20 of these.
	orderIDRE  = regexp.MustCompile(`^[A-Z0-9]{1,20}$`)
	currencyRE = regexp.MustCompile(`^[A-Za-z]{3}$`)
	// customIDRE is the refund schema's custom_id: 1-127 of these.
	customIDRE = regexp.MustCompile(`^[A-Za-z0-9\-_.,]{1,127}$`)
)

// holds reports whether a refund of this status holds its amount.
func holds(status string) bool { return status == StatusCompleted || status == StatusPending }

// Validate reports the first thing wrong with the capture, if any.
func (c *Capture) Validate() error {
	switch {
	case !captureIDRE.MatchString(c.ID):
		return fmt.Errorf("capture id %q: want 1-64 letters and digits", c.ID)
	case c.Currency != "" && !currencyRE.MatchString(c.Currency):
		return fmt.Errorf("currency %q: want a three-letter ISO code", c.Currency)
	case c.Amount <= 0:
		return fmt.Errorf("amount %d: want a positive whole number of minor units", c.Amount)
	case c.OrderID != "" && !orderIDRE.MatchString(c.OrderID):
		return fmt.Errorf("order_id %q: want 1-20 upper-case letters and digits", c.OrderID)
	case c.OrderID != "" && c.NoOrder:
		return fmt.Errorf("order_id %q and no_order: a capture made through an order, or without one", c.OrderID)
	}
	if _, err := wire.Value(c.Amount, c.Currency); err != nil {
		return fmt.Errorf("amount: %w", err) // PayPal holds no such capture
	}
	var held int64
	for i, r := range c.Refunds {
		switch r.Status {
		case "", StatusCompleted, StatusPending, StatusFailed, StatusCancelled:
		default:
			return fmt.Errorf("refunds[%d]: status %q: want COMPLETED, PENDING, FAILED or CANCELLED", i, r.Status)
		}
		if r.Amount <= 0 {
			return fmt.Errorf("refunds[%d]: amount %d: want a positive whole number of minor units", i, r.Amount)
		}
		if _, err := wire.Value(r.Amount, c.Currency); err != nil {
			return fmt.Errorf("refunds[%d]: amount: %w", i, err)
		}
		if r.CustomID != "" && !customIDRE.MatchString(r.CustomID) {
			return fmt.Errorf("refunds[%d]: custom_id %q: want 1-127 of A-Z a-z 0-9 - _ . ,", i, r.CustomID)
		}
		if r.Status == "" || holds(r.Status) {
			held += r.Amount
		}
	}
	if held > c.Amount {
		return fmt.Errorf("refunds total %d: more than the capture amount %d", held, c.Amount)
	}
	return nil
}

// GenerateCaptures makes n USD captures CAPSIM00000000001, ... of 1.00 to
// 1000.00 drawn from seed.
func GenerateCaptures(n int, seed int64) []Capture {
	return sim.Generate(n, seed, 0xca97, func(num int, amount int64) Capture {
		return Capture{ID: sim.Padded("CAPSIM", 11, num), Currency: "USD", Amount: amount}
	})
}

// maxLine bounds one line of a captures file.
const maxLine = 1 << 20

// ReadCaptures reads captures as JSON lines; errors read "name:line: ...".
func ReadCaptures(r io.Reader, name string) ([]Capture, error) {
	orders := map[string]string{} // order id: currency
	return sim.ReadSeeds(r, name, maxLine, "capture", func(c *Capture) error { return inOneCurrency(orders, c) })
}

// IDs is the capture's.
func (c *Capture) IDs() []string { return []string{"capture", c.ID} }

// capture is the simulator's state of one capture; mu guards its refunds.
type capture struct {
	id, currency string // currency upper case, as PayPal writes it
	amount       int64
	created      int64 // unix seconds

	order *order // nil: not made through Orders v2

	mu      sync.Mutex
	refunds []*refund // oldest first; never removed
}

// AddCaptures adds captures and their seeded refunds, all or none.
func (s *Server) AddCaptures(cs ...Capture) error {
	s.captures.Lock()
	defer s.captures.Unlock()
	if err := sim.CheckNew(&s.captures, "capture", cs); err != nil {
		return err
	}
	if err := s.checkOrders(cs); err != nil {
		return err
	}
	now := s.now()
	for _, c := range cs {
		cp := &capture{id: c.ID, currency: currencyOf(c.Currency), amount: c.Amount, created: now.Unix()}
		if !c.NoOrder {
			s.placeInOrder(cp, c.OrderID, now)
		}
		for _, r := range c.Refunds {
			s.addRefund(&refund{Refund: Refund{Amount: r.Amount, CustomID: r.CustomID}, cp: cp, created: now, initial: cmp.Or(r.Status, StatusCompleted)})
		}
		s.captures.Put(c.ID, cp)
	}
	return nil
}

// currencyOf is a currency as PayPal writes it (upper case; "": USD).
func currencyOf(c string) string { return cmp.Or(strings.ToUpper(c), "USD") }

// CaptureState is a capture as the simulator holds it, for checks.
type CaptureState struct {
	ID       string `json:"id"`
	Currency string `json:"currency"`
	Amount   int64  `json:"amount"`
	// Refunded is the amount COMPLETED and PENDING refunds hold.
	Refunded int64  `json:"refunded"`
	Status   string `json:"status"`
	// OrderID is the order the capture was made through, "" for none.
	OrderID string `json:"order_id,omitempty"`
}

// Capture returns the state of one capture, and whether it exists.
func (s *Server) Capture(id string) (CaptureState, bool) {
	cp := s.captures.Get(id)
	if cp == nil {
		return CaptureState{}, false
	}
	now := s.now()
	cp.mu.Lock()
	defer cp.mu.Unlock()
	held := cp.held(now)
	return CaptureState{ID: cp.id, Currency: cp.currency, Amount: cp.amount, Refunded: held, Status: cp.status(held), OrderID: cp.orderID()}, true
}

// held is what the capture's refunds hold at now; the caller holds cp.mu.
func (cp *capture) held(now time.Time) int64 {
	var n int64
	for _, r := range cp.refunds {
		if holds(r.statusAt(now)) {
			n += r.Amount
		}
	}
	return n
}

// status is the capture's status given what its refunds hold.
func (cp *capture) status(held int64) string {
	switch {
	case held == 0:
		return StatusCompleted
	case held < cp.amount:
		return "PARTIALLY_REFUNDED"
	}
	return "REFUNDED"
}
