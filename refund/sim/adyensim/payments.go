package adyensim

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/refundkit/refundkit/refund/sim"
)

// Payment is a captured payment, as seeded (JSON lines of these fields).
type Payment struct {
	// PSPReference is letters and digits (Adyen's: 16).
	PSPReference string `json:"psp_reference"`
	// Currency is an ISO code, upper or lower case; empty means EUR.
	Currency string `json:"currency,omitempty"`
	// Amount is the captured amount in the currency's minor units.
	Amount int64 `json:"amount"`
	// MerchantAccount is its account (empty: the simulator's); the API key
	// acts for every account a payment names.
	MerchantAccount string `json:"merchant_account,omitempty"`
}

var (
	pspRE      = regexp.MustCompile(`^[A-Za-z0-9]{1,64}$`)
	currencyRE = regexp.MustCompile(`^[A-Za-z]{3}$`)
	merchantRE = regexp.MustCompile(`^[A-Za-z0-9_.\-]{1,80}$`)
)

// Validate reports the first thing wrong with the payment, if any.
func (p *Payment) Validate() error {
	switch {
	case !pspRE.MatchString(p.PSPReference):
		return fmt.Errorf("psp_reference %q: want 1-64 letters and digits", p.PSPReference)
	case p.Currency != "" && !currencyRE.MatchString(p.Currency):
		return fmt.Errorf("currency %q: want a three-letter ISO code", p.Currency)
	case p.Amount <= 0:
		return fmt.Errorf("amount %d: want a positive whole number of minor units", p.Amount)
	case p.MerchantAccount != "" && !merchantRE.MatchString(p.MerchantAccount):
		return fmt.Errorf("merchant_account %q: want 1-80 letters, digits, '_', '-' or '.'", p.MerchantAccount)
	}
	return nil
}

// GeneratePayments makes n EUR payments SIMPAY0000000001, ... of 1.00 to
// 1000.00 drawn from seed.
func GeneratePayments(n int, seed int64) []Payment {
	return sim.Generate(n, seed, 0xad7e, func(num int, amount int64) Payment {
		return Payment{PSPReference: sim.Padded("SIMPAY", 10, num), Currency: "EUR", Amount: amount}
	})
}

// maxLine bounds one line of a payments file.
const maxLine = 1 << 20

// ReadPayments reads payments as JSON lines; errors read "name:line: ...".
func ReadPayments(r io.Reader, name string) ([]Payment, error) {
	return sim.ReadSeeds[Payment](r, name, maxLine, "payment", nil)
}

// IDs is the payment's.
func (p *Payment) IDs() []string { return []string{"payment", p.PSPReference} }

// payment is one payment; mu guards its refunds and what they told.
type payment struct {
	psp, currency, merchant string
	amount                  int64

	mu      sync.Mutex
	refunds []*refund // oldest first; never removed
}

// AddPayments adds payments, all or none.
func (s *Server) AddPayments(ps ...Payment) error {
	s.payments.Lock()
	defer s.payments.Unlock()
	if err := sim.CheckNew(&s.payments, "payment", ps); err != nil {
		return err
	}
	for _, p := range ps {
		pm := &payment{psp: p.PSPReference, currency: cmp.Or(strings.ToUpper(p.Currency), "EUR"), merchant: cmp.Or(p.MerchantAccount, s.merchant), amount: p.Amount}
		s.merchants[pm.merchant] = true
		s.payments.Put(p.PSPReference, pm)
	}
	return nil
}

// knownMerchant reports whether the API key acts for account m.
func (s *Server) knownMerchant(m string) bool {
	s.payments.RLock()
	defer s.payments.RUnlock()
	return s.merchants[m]
}

// held is what the payment's refunds hold; the caller holds p.mu.
func (p *payment) held() int64 {
	var n int64
	for _, r := range p.refunds {
		if r.holds() {
			n += r.Amount
		}
	}
	return n
}

// PaymentState is a payment as the simulator holds it, for checks.
type PaymentState struct {
	PSPReference    string `json:"psp_reference"`
	Currency        string `json:"currency"`
	Amount          int64  `json:"amount"`
	MerchantAccount string `json:"merchant_account"`
	// Refunded is what its refunds hold (refusals and those told failed or
	// reversed hold nothing).
	Refunded int64 `json:"refunded"`
	// Refunds counts its refunds, refused ones included.
	Refunds int `json:"refunds"`
}

// Payments returns every payment, by pspReference.
func (s *Server) Payments() []PaymentState {
	s.payments.RLock()
	all := slices.SortedFunc(maps.Values(s.payments.M), func(a, b *payment) int { return strings.Compare(a.psp, b.psp) })
	s.payments.RUnlock()
	return sim.Map(all, (*payment).state)
}

// Payment returns the state of one payment, and whether it exists.
func (s *Server) Payment(psp string) (PaymentState, bool) {
	p := s.payments.Get(psp)
	if p == nil {
		return PaymentState{}, false
	}
	return p.state(), true
}

func (p *payment) state() PaymentState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PaymentState{PSPReference: p.psp, Currency: p.currency, Amount: p.amount, MerchantAccount: p.merchant,
		Refunded: p.held(), Refunds: len(p.refunds)}
}
