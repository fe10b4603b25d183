package stripesim

import (
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	"github.com/refundkit/refundkit/refund/sim"
)

// Charge is a charge, as seeded (JSON lines of these fields).
type Charge struct {
	ID            string `json:"id"`
	PaymentIntent string `json:"payment_intent,omitempty"`
	// Currency is a lower-case ISO code; empty means usd.
	Currency string `json:"currency,omitempty"`
	// Amount is the captured amount in the currency's minor units.
	Amount int64 `json:"amount"`
	// Refunds already on the charge, oldest first: an earlier run's traces.
	Refunds []SeedRefund `json:"refunds,omitempty"`
}

// SeedRefund is a refund made before the run under test.
type SeedRefund struct {
	Amount int64 `json:"amount"`
	// Status is succeeded (""), pending, requires_action, canceled or failed
	// (the last two hold nothing), or StatusUnlistedPrefix...: served as it is.
	Status   string            `json:"status,omitempty"`
	Reason   string            `json:"reason,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Refund statuses, as Stripe names them.
const (
	StatusSucceeded      = "succeeded"
	StatusPending        = "pending"
	StatusRequiresAction = "requires_action"
	StatusCanceled       = "canceled"
	StatusFailed         = "failed"
	// StatusUnlistedPrefix begins a status Stripe does not document, for tests
	// of a client's allow-list; such a refund holds its amount.
	StatusUnlistedPrefix = "unlisted_"
)

var (
	chargeIDRE = regexp.MustCompile(`^(ch|py)_[A-Za-z0-9]{1,250}$`)
	intentIDRE = regexp.MustCompile(`^pi_[A-Za-z0-9]{1,250}$`)
	currencyRE = regexp.MustCompile(`^[a-z]{3}$`)
)

// reasons are the refund reasons Stripe accepts on create.
var reasons = []string{"duplicate", "fraudulent", "requested_by_customer"}

// countsAgainstCharge reports whether a refund of this status holds its
// amount of the charge.
func countsAgainstCharge(status string) bool {
	return status != StatusCanceled && status != StatusFailed
}

// Validate reports the first thing wrong with the charge, if any.
func (c *Charge) Validate() error {
	switch {
	case !chargeIDRE.MatchString(c.ID):
		return fmt.Errorf("charge id %q: want ch_ or py_ followed by letters and digits", c.ID)
	case c.PaymentIntent != "" && !intentIDRE.MatchString(c.PaymentIntent):
		return fmt.Errorf("payment_intent %q: want pi_ followed by letters and digits", c.PaymentIntent)
	case c.Currency != "" && !currencyRE.MatchString(c.Currency):
		return fmt.Errorf("currency %q: want a three-letter lower-case ISO code", c.Currency)
	case c.Amount <= 0:
		return fmt.Errorf("amount %d: want a positive whole number of minor units", c.Amount)
	}
	var held int64
	for i, r := range c.Refunds {
		switch r.Status {
		case "", StatusSucceeded, StatusPending, StatusRequiresAction, StatusCanceled, StatusFailed:
		default:
			if !strings.HasPrefix(r.Status, StatusUnlistedPrefix) {
				return fmt.Errorf("refunds[%d]: status %q: want succeeded, pending, requires_action, canceled, failed or %s...", i, r.Status, StatusUnlistedPrefix)
			}
		}
		if r.Amount <= 0 {
			return fmt.Errorf("refunds[%d]: amount %d: want a positive whole number of minor units", i, r.Amount)
		}
		if r.Reason != "" && !slices.Contains(reasons, r.Reason) {
			return fmt.Errorf("refunds[%d]: reason %q: want one of %s", i, r.Reason, strings.Join(reasons, ", "))
		}
		if msg := checkMetadata(r.Metadata); msg != "" {
			return fmt.Errorf("refunds[%d]: %s", i, msg)
		}
		if countsAgainstCharge(r.Status) {
			held += r.Amount
		}
	}
	if held > c.Amount {
		return fmt.Errorf("refunds total %d: more than the charge amount %d", held, c.Amount)
	}
	return nil
}

// checkMetadata applies Stripe's limits: 50 keys of 1-40 characters
// without [ or ], values up to 500.
func checkMetadata(md map[string]string) string {
	if len(md) > 50 {
		return fmt.Sprintf("metadata has %d keys: at most 50", len(md))
	}
	for k, v := range md {
		if k == "" || len(k) > 40 || strings.ContainsAny(k, "[]") {
			return fmt.Sprintf("metadata key %q: want 1-40 characters without [ or ]", k)
		}
		if len(v) > 500 {
			return fmt.Sprintf("metadata %q: value longer than 500 characters", k)
		}
	}
	return ""
}

// GenerateCharges makes n usd charges ch_sim0000001 (pi_sim0000001), ... of
// 1.00 to 1000.00 drawn from seed.
func GenerateCharges(n int, seed int64) []Charge {
	return sim.Generate(n, seed, 0x5eed, func(num int, amount int64) Charge {
		return Charge{ID: sim.Padded("ch_sim", 7, num), PaymentIntent: sim.Padded("pi_sim", 7, num), Currency: "usd", Amount: amount}
	})
}

// maxLine bounds a line: 50 seeded refunds full of metadata fit.
const maxLine = 4 << 20

// ReadCharges reads charges as JSON lines; errors read "name:line: ...".
func ReadCharges(r io.Reader, name string) ([]Charge, error) {
	return sim.ReadSeeds[Charge](r, name, maxLine, "charge", nil)
}

// IDs are the charge's and its payment intent's, if any.
func (c *Charge) IDs() []string {
	if c.PaymentIntent == "" {
		return []string{"charge", c.ID}
	}
	return []string{"charge", c.ID, "payment_intent", c.PaymentIntent}
}
