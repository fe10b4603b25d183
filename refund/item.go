// Package refund issues the refunds of a plan exactly once: every call is
// preceded by a durable journal intent and followed by a durable outcome, and
// items in doubt are reconciled with Stripe before anything is sent again.
package refund

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Item is one planned refund: the JSON-lines schema that plan writes and
// refund reads.
type Item struct {
	Batch         string `json:"batch"`
	Item          string `json:"item"`
	Charge        string `json:"charge,omitempty"`
	PaymentIntent string `json:"payment_intent,omitempty"`
	// Amount in the currency's minor units; 0 means the full remaining amount.
	Amount int64 `json:"amount,omitempty"`
	// Currency is informational: Stripe refunds in the charge's currency.
	Currency string            `json:"currency,omitempty"`
	Reason   string            `json:"reason,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Reasons Stripe accepts on a refund.
var Reasons = []string{"duplicate", "fraudulent", "requested_by_customer"}

// Metadata keys refund sets on every refund so Stripe-side records can be
// matched to their item; plan metadata may not use them.
const (
	MetaBatch   = "refundkit_batch"
	MetaItem    = "refundkit_item"
	MetaAttempt = "refundkit_attempt"
)

// Id alphabets. Hand-written checks instead of regular expressions: they
// run for every line of a million-item plan.
func alnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// validID: 1 to max bytes, the first alphanumeric, the rest alphanumeric or
// in extra.
func validID(s string, max int, extra string) bool {
	if len(s) == 0 || len(s) > max || !alnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !alnum(c) && strings.IndexByte(extra, c) < 0 {
			return false
		}
	}
	return true
}

// validStripeID: prefix then 1-250 alphanumerics.
func validStripeID(s string, prefixes ...string) bool {
	for _, p := range prefixes {
		if rest, ok := strings.CutPrefix(s, p); ok {
			if len(rest) == 0 || len(rest) > 250 {
				return false
			}
			for i := 0; i < len(rest); i++ {
				if !alnum(rest[i]) {
					return false
				}
			}
			return true
		}
	}
	return false
}

func validCurrency(s string) bool {
	return len(s) == 3 && s[0] >= 'a' && s[0] <= 'z' && s[1] >= 'a' && s[1] <= 'z' && s[2] >= 'a' && s[2] <= 'z'
}

// ValidBatch reports whether id may name a batch: 1-64 of [A-Za-z0-9_.-],
// starting with a letter or digit.
func ValidBatch(id string) bool { return validID(id, 64, "_.-") }

// Validate reports the first thing wrong with the item, if any.
func (it *Item) Validate() error {
	switch {
	case !ValidBatch(it.Batch):
		return fmt.Errorf("batch %q: want 1-64 characters of A-Z a-z 0-9 _ . - starting with a letter or digit", it.Batch)
	case !validID(it.Item, 128, "_.:-"):
		return fmt.Errorf("item %q: want 1-128 characters of A-Z a-z 0-9 _ . : - starting with a letter or digit", it.Item)
	case it.Charge == "" && it.PaymentIntent == "":
		return errors.New("needs a charge (ch_/py_) or a payment_intent (pi_)")
	case it.Charge != "" && it.PaymentIntent != "":
		return errors.New("names both a charge and a payment_intent: give one")
	case it.Charge != "" && !validStripeID(it.Charge, "ch_", "py_"):
		return fmt.Errorf("charge %q: want an id starting ch_ or py_", it.Charge)
	case it.PaymentIntent != "" && !validStripeID(it.PaymentIntent, "pi_"):
		return fmt.Errorf("payment_intent %q: want an id starting pi_", it.PaymentIntent)
	case it.Amount < 0:
		return fmt.Errorf("amount %d: want a positive whole number of minor units", it.Amount)
	case it.Currency != "" && !validCurrency(it.Currency):
		return fmt.Errorf("currency %q: want a three-letter lower-case ISO code", it.Currency)
	case it.Reason != "" && !validReason(it.Reason):
		return fmt.Errorf("reason %q: want one of %s", it.Reason, strings.Join(Reasons, ", "))
	}
	if len(it.Metadata) > 40 {
		return fmt.Errorf("metadata has %d keys: at most 40 (Stripe allows 50, refund sets 3)", len(it.Metadata))
	}
	for k, v := range it.Metadata {
		if strings.HasPrefix(k, "refundkit_") {
			return fmt.Errorf("metadata key %q: the refundkit_ prefix is reserved", k)
		}
		if k == "" || len(k) > 40 || strings.ContainsAny(k, "[]") {
			return fmt.Errorf("metadata key %q: want 1-40 characters without [ or ]", k)
		}
		if len(v) > 500 {
			return fmt.Errorf("metadata %q: value longer than 500 characters", k)
		}
	}
	return nil
}

func validReason(r string) bool {
	for _, ok := range Reasons {
		if r == ok {
			return true
		}
	}
	return false
}

// Target is the id the refund is made against: the charge or payment intent.
func (it *Item) Target() string {
	if it.Charge != "" {
		return it.Charge
	}
	return it.PaymentIntent
}

// IdempotencyKey is the key of one attempt at an item. It depends only on
// batch, item and attempt, so every run, machine and operator that sends the
// same attempt sends the same key, and Stripe answers at most once.
func IdempotencyKey(batch, item string, attempt int) string {
	return "refundkit:" + batch + ":" + item + ":" + strconv.Itoa(attempt)
}

// ParseItem decodes and validates one plan line. It is stricter than
// encoding/json: field names must match exactly and appear once, amounts
// must be whole numbers, and nothing may follow the object. Nothing is
// refunded for a line that was not fully understood.
func ParseItem(line []byte) (Item, error) {
	it, err := decodeItem(line)
	if err != nil {
		return Item{}, err
	}
	if err := it.Validate(); err != nil {
		return Item{}, err
	}
	return it, nil
}
