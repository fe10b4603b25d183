// Package refund issues the refunds of a plan exactly once: every call is
// preceded by a durable journal intent and followed by a durable outcome, and
// items in doubt are reconciled with the provider before anything is sent again.
package refund

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Item is one planned refund: the JSON-lines schema that plan writes and
// refund reads.
type Item struct {
	Batch         string            `json:"batch"`
	Item          string            `json:"item"`
	Charge        string            `json:"charge,omitempty"`
	PaymentIntent string            `json:"payment_intent,omitempty"`
	Capture       string            `json:"capture,omitempty"`       // a PayPal capture
	PSPReference  string            `json:"psp_reference,omitempty"` // an Adyen payment
	Amount        int64             `json:"amount,omitempty"`        // minor units; 0 is the full remaining amount
	Currency      string            `json:"currency,omitempty"`      // checked against the payment's
	Reason        string            `json:"reason,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
}

// Reasons Stripe accepts on a refund.
var Reasons = []string{"duplicate", "fraudulent", "requested_by_customer"}

// Metadata keys refund sets on every refund, to match it to its item.
const (
	MetaBatch   = "refundkit_batch"
	MetaItem    = "refundkit_item"
	MetaAttempt = "refundkit_attempt"
)

// InputError is an input line that was not understood, or a whole input
// (Line 0): nothing was sent for it nor after it.
type InputError struct {
	Name  string // the input: a file name, or <stdin>
	Line  int    // 1-based; 0 for the whole input
	Field string // the field at fault; "" when no one field is
	Err   error  // what is wrong
}

// Error is name:line: field: what is wrong, without the parts left empty.
func (e *InputError) Error() string {
	s := ""
	if e.Name != "" {
		s = e.Name
		if e.Line > 0 {
			s += ":" + strconv.Itoa(e.Line)
		}
		s += ": "
	}
	if e.Field != "" {
		s += e.Field + ": "
	}
	if e.Err != nil {
		s += e.Err.Error()
	}
	return s
}

// Unwrap is what is wrong, for errors.Is and errors.As.
func (e *InputError) Unwrap() error { return e.Err }

// fieldError is what is wrong with one field, its input and line unknown.
func fieldError(field, format string, args ...any) *InputError {
	return &InputError{Field: field, Err: fmt.Errorf(format, args...)}
}

// Show renders an input value in a message: bare when plain printable
// ASCII, else quoted, and cut short.
func Show(s string) string {
	plain := s != ""
	for i := 0; i < len(s) && plain; i++ {
		plain = s[i] > ' ' && s[i] < 0x7f && s[i] != '"' && s[i] != '\\'
	}
	if !plain {
		return quote(s)
	}
	return cut(s)
}

// quote renders a value quoted, cut short.
func quote(s string) string { return strconv.Quote(cut(s)) }

// cut shortens s to 64 bytes, marking the cut.
func cut(s string) string {
	const max = 64
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}

// Hand-written, not regular expressions: they run for every plan line.
func alnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// validID: 1 to max bytes, alphanumeric first, then alphanumeric or extra.
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
			return validID(rest, 250, "")
		}
	}
	return false
}

func validCurrency(s string) bool {
	return len(s) == 3 && s[0] >= 'a' && s[0] <= 'z' && s[1] >= 'a' && s[1] <= 'z' && s[2] >= 'a' && s[2] <= 'z'
}

// What each field must be, as messages say it.
const (
	batchRule  = "want 1-64 characters of A-Z a-z 0-9 _ . - starting with a letter or digit"
	idRule     = "want 1-128 characters of A-Z a-z 0-9 _ . : - starting with a letter or digit" // an item's, a capture's
	targetRule = "want a charge (ch_/py_), a payment_intent (pi_), a capture or a psp_reference"
	amountRule = "want a positive whole number of minor units"

	pspReferenceRule = "want 16 characters of A-Z 0-9"
)

// ValidCapture reports whether id may name a capture: PayPal's, or the
// payment id of the API an exec command calls. An item id is of this shape too.
func ValidCapture(id string) bool { return validID(id, 128, "_.:-") }

// ValidPSPReference reports whether id may be an Adyen pspReference.
func ValidPSPReference(id string) bool {
	return len(id) == 16 && strings.Trim(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") == ""
}

// targets counts the payments the item names: one is right.
func targets(it *Item) int {
	n := 0
	for _, id := range []string{it.Charge, it.PaymentIntent, it.Capture, it.PSPReference} {
		if id != "" {
			n++
		}
	}
	return n
}

// ValidBatch reports whether id may name a batch.
func ValidBatch(id string) bool { return validID(id, 64, "_.-") }

// Validate reports the first thing wrong with the item as an *InputError
// naming the field at fault (Name and Line left empty).
func (it *Item) Validate() error {
	switch {
	case !ValidBatch(it.Batch):
		return fieldError("batch", "%s: %s", quote(it.Batch), batchRule)
	case !ValidCapture(it.Item):
		return fieldError("item", "%s: %s", quote(it.Item), idRule)
	case targets(it) == 0:
		return &InputError{Err: errors.New("needs a charge (ch_/py_), a payment_intent (pi_), a capture or a psp_reference")}
	case targets(it) > 1:
		return &InputError{Err: errors.New("names more than one of charge, payment_intent, capture and psp_reference: give one")}
	case it.Charge != "" && !validStripeID(it.Charge, "ch_", "py_"):
		return fieldError("charge", "%s: want an id starting ch_ or py_", quote(it.Charge))
	case it.PaymentIntent != "" && !validStripeID(it.PaymentIntent, "pi_"):
		return fieldError("payment_intent", "%s: want an id starting pi_", quote(it.PaymentIntent))
	case it.Capture != "" && !ValidCapture(it.Capture):
		return fieldError("capture", "%s: %s", quote(it.Capture), idRule)
	case it.PSPReference != "" && !ValidPSPReference(it.PSPReference):
		return fieldError("psp_reference", "%s: %s", quote(it.PSPReference), pspReferenceRule)
	case it.Amount < 0:
		return fieldError("amount", "%d: %s", it.Amount, amountRule)
	case it.Currency != "" && !validCurrency(it.Currency):
		return fieldError("currency", "%s: want a three-letter lower-case ISO code", quote(it.Currency))
	case it.Reason != "" && !slices.Contains(Reasons, it.Reason):
		return fieldError("reason", "%s: want one of %s", quote(it.Reason), strings.Join(Reasons, ", "))
	}
	if len(it.Metadata) > 40 {
		return fieldError("metadata", "%d keys: at most 40 (Stripe allows 50, refund sets 3)", len(it.Metadata))
	}
	if len(it.Metadata) == 0 {
		return nil
	}
	// In key order, so that the first of two bad keys is always the one named.
	for _, k := range slices.Sorted(maps.Keys(it.Metadata)) {
		if err := MetadataKeyError(k); err != nil {
			return fieldError(MetadataField(k), "%v", err)
		}
		if len(it.Metadata[k]) > 500 {
			return fieldError(MetadataField(k), "value longer than 500 characters")
		}
	}
	return nil
}

// MetadataKeyError says what is wrong with a metadata key, if anything.
func MetadataKeyError(k string) error {
	switch {
	case strings.HasPrefix(k, "refundkit_"):
		return errors.New("the refundkit_ prefix is reserved")
	case k == "" || len(k) > 40 || strings.ContainsAny(k, "[]"):
		return errors.New("want a key of 1-40 characters without [ or ]")
	}
	return nil
}

// MetadataField names metadata key k in messages, as its CSV column.
func MetadataField(k string) string { return "metadata." + Show(k) }

// ParseAmount parses an amount of minor units above 0: decimal digits
// only, so 10.00, -5, 1e3 and 1,000 are refused, not guessed at.
func ParseAmount(s string) (int64, error) {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fieldError("amount", "%s: %s", Show(s), amountRule)
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if errors.Is(err, strconv.ErrRange) {
		return 0, fieldError("amount", "%s: too large", Show(s))
	}
	if err != nil || n == 0 {
		return 0, fieldError("amount", "%s: %s", Show(s), amountRule)
	}
	return n, nil
}

// clone is a deep copy of it, sharing no memory with its input.
func (it *Item) clone() *Item {
	c := *it
	for _, s := range []*string{&c.Batch, &c.Item, &c.Charge, &c.PaymentIntent, &c.Capture, &c.PSPReference, &c.Currency, &c.Reason} {
		*s = strings.Clone(*s)
	}
	if it.Metadata != nil {
		c.Metadata = make(map[string]string, len(it.Metadata))
		for k, v := range it.Metadata {
			c.Metadata[strings.Clone(k)] = strings.Clone(v)
		}
	}
	return &c
}

// Target is the id of the payment the refund is made on.
func (it *Item) Target() string { return paymentOf(it).ID() }

// IdempotencyKey is the key of one attempt at an item: the same on every
// run, machine and operator, so the provider answers it at most once.
func IdempotencyKey(batch, item string, attempt int) string {
	return "refundkit:" + batch + ":" + item + ":" + strconv.Itoa(attempt)
}

// ParseItem decodes and validates one plan line (ItemDecoder).
func ParseItem(line []byte) (Item, error) {
	var d ItemDecoder
	return d.Decode(line)
}
