package refund

import (
	"errors"
	"fmt"
	"strings"
)

// ItemDecoder decodes plan item lines in the one grammar of docs/records.md
// (Plan item), for refund, audit --plan and plan alike. Stricter than
// encoding/json (which matches "AMOUNT" to amount, lets a repeated field
// win, turns broken text into U+FFFD), and several times faster. It keeps
// the last batch and currency read, for lines to share; not safe for
// concurrent use.
type ItemDecoder struct {
	// Input decodes plan's input: batch and item may be left out, and the
	// item is returned unvalidated, for plan to complete.
	Input bool
	// KeepUnknown keeps a field of no known name whose value is a string,
	// number or boolean as metadata, as written (plan --keep-columns).
	KeepUnknown bool

	batch, currency string
	planItems       int // the plan_items of the line last decoded
}

// PlanItems is the plan_items the line last decoded gave (0: none): the
// size of the plan plan wrote, a hint that is not part of the item.
func (d *ItemDecoder) PlanItems() int { return d.planItems }

// ErrUnknownField is the Err of an *InputError for a field of no known name
// that KeepUnknown would keep.
var ErrUnknownField = errors.New("unknown field")

// The fields of a plan item, in the order messages list them.
const (
	fBatch = iota
	fItem
	fCharge
	fPaymentIntent
	fCapture
	fPSPReference
	fAmount
	fCurrency
	fReason
	fMetadata
	fPlanItems
	nFields
)

var fieldNames = [nFields]string{"batch", "item", "charge", "payment_intent", "capture", "psp_reference", "amount", "currency", "reason", "metadata", "plan_items"}

// Decode decodes one line and, unless d.Input, validates the item. A bad
// line is an *InputError naming the field at fault; Name and Line are the
// caller's to set.
func (d *ItemDecoder) Decode(line []byte) (Item, error) {
	var it Item
	d.planItems = 0
	s := scanner{b: line}
	given, nulls, err := d.object(&s, &it)
	if err != nil {
		return Item{}, err
	}
	if targets(&it) == 0 {
		for _, f := range []int{fCharge, fPaymentIntent, fCapture, fPSPReference} {
			if nulls&(1<<f) != 0 {
				return Item{}, fieldError(fieldNames[f], "null: %s", targetRule)
			}
		}
	}
	if d.Input {
		return it, nil
	}
	if err := required(fBatch, given, nulls, batchRule); err != nil {
		return Item{}, err
	}
	if err := required(fItem, given, nulls, idRule); err != nil {
		return Item{}, err
	}
	if err := it.Validate(); err != nil {
		return Item{}, err
	}
	return it, nil
}

// required is what is wrong with required field f, missing or null.
func required(f int, given, nulls uint16, rule string) error {
	switch {
	case given&(1<<f) == 0:
		return fieldError(fieldNames[f], "missing: %s", rule)
	case nulls&(1<<f) != 0:
		return fieldError(fieldNames[f], "null: %s", rule)
	}
	return nil
}

// object reads the line's one object into it: the fields given, and null.
func (d *ItemDecoder) object(s *scanner, it *Item) (given, nulls uint16, err error) {
	s.ws()
	if s.end() || s.b[s.i] != '{' {
		return 0, 0, &InputError{Err: errors.New("want a JSON object")}
	}
	err = s.members("", func(key string) error {
		f := fieldIndex(key)
		switch {
		case f < 0:
			return d.unknown(s, it, key)
		case given&(1<<f) != 0:
			return fieldError(key, "given twice")
		}
		given |= 1 << f
		s.field = key
		null, err := d.value(s, it, f)
		if null {
			nulls |= 1 << f
		}
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	s.ws()
	if !s.end() {
		return 0, 0, &InputError{Err: errors.New("more than one JSON value on the line")}
	}
	return given, nulls, nil
}

func fieldIndex(key string) int {
	for f, name := range fieldNames {
		if key == name {
			return f
		}
	}
	return -1
}

// value reads field f's value into it. null is absent.
func (d *ItemDecoder) value(s *scanner, it *Item, f int) (null bool, err error) {
	switch f {
	case fAmount:
		return d.amount(s, it)
	case fMetadata:
		return d.metadata(s, it)
	case fPlanItems:
		return d.count(s)
	}
	body, null, err := s.str("want a string")
	if err != nil || null || len(body) == 0 {
		return null, err
	}
	switch f {
	case fBatch:
		it.Batch = recurring(&d.batch, body)
	case fItem:
		it.Item = string(body)
	case fCharge:
		it.Charge = same(it.Item, body)
	case fPaymentIntent:
		it.PaymentIntent = same(it.Item, body)
	case fCapture:
		it.Capture = same(it.Item, body)
	case fPSPReference:
		it.PSPReference = same(it.Item, body)
	case fCurrency:
		it.Currency = recurring(&d.currency, body)
	case fReason:
		it.Reason = known(Reasons, body)
	}
	return false, nil
}

// known returns body as the string in names that it equals, if any, so
// that lines share one copy.
func known(names []string, body []byte) string {
	for _, name := range names {
		if string(body) == name {
			return name
		}
	}
	return string(body)
}

// same returns body as a string, item when equal (an item named by its
// charge).
func same(item string, body []byte) string {
	if string(body) == item {
		return item
	}
	return string(body)
}

// recurring returns body as a string, *last when equal.
func recurring(last *string, body []byte) string {
	if string(body) != *last {
		*last = string(body)
	}
	return *last
}

// number reads the value as a number token, or null; rule says what it
// must be, unit what a string of it is not.
func (s *scanner) number(unit, rule string) (tok []byte, null bool, err error) {
	if s.b[s.i] == '"' {
		body, _, err := s.str("")
		if err != nil {
			return nil, false, err
		}
		return nil, false, fieldError(s.field, "%s: want a JSON number%s, not a string", quote(string(body)), unit)
	}
	tok, err = s.scalar(rule)
	return tok, tok == nil && err == nil, err
}

// amount reads a JSON integer of minor units above 0, or null.
func (d *ItemDecoder) amount(s *scanner, it *Item) (null bool, err error) {
	tok, null, err := s.number(" of minor units", amountRule)
	if err != nil || null {
		return null, err
	}
	if len(tok) > 1 && tok[0] == '0' { // not JSON, which ParseAmount would take
		return false, fieldError("amount", "%s: %s", Show(string(tok)), amountRule)
	}
	if n, ok := digits(tok); ok {
		it.Amount = n
		return false, nil
	}
	it.Amount, err = ParseAmount(string(tok))
	return false, err
}

// count reads plan_items: a JSON integer above 0, or null.
func (d *ItemDecoder) count(s *scanner) (null bool, err error) {
	const rule = "want a whole number of items above 0"
	tok, null, err := s.number("", rule)
	if err != nil || null {
		return null, err
	}
	n, ok := digits(tok)
	if !ok || tok[0] == '0' {
		return false, fieldError("plan_items", "%s: %s", Show(string(tok)), rule)
	}
	d.planItems = int(n)
	return false, nil
}

// digits parses a whole number above 0 of at most 18 digits (no overflow).
func digits(tok []byte) (int64, bool) {
	if len(tok) == 0 || len(tok) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range tok {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, n > 0
}

// metadata reads an object of string values, or null; Validate checks keys.
func (d *ItemDecoder) metadata(s *scanner, it *Item) (null bool, err error) {
	if s.b[s.i] != '{' {
		return s.other("want an object of string values")
	}
	return false, s.members("metadata", func(key string) error {
		field := MetadataField(key)
		if _, dup := it.Metadata[key]; dup {
			return fieldError(field, "given twice")
		}
		s.field = field
		body, null, err := s.str("want a string")
		switch {
		case err != nil:
			return err
		case null:
			return fieldError(field, "null: want a string")
		}
		if it.Metadata == nil {
			it.Metadata = make(map[string]string)
		}
		it.Metadata[key] = string(body)
		s.field = "metadata"
		return nil
	})
}

// unknown reads the value of a field of no known name: an error, unless
// KeepUnknown keeps it as metadata.
func (d *ItemDecoder) unknown(s *scanner, it *Item, key string) error {
	for _, name := range fieldNames {
		if strings.EqualFold(key, name) {
			return fieldError(Show(key), "unknown field: did you mean %s?", name)
		}
	}
	field := Show(key)
	if !d.KeepUnknown {
		return &InputError{Field: field, Err: fmt.Errorf("%w: known are %s", ErrUnknownField, strings.Join(fieldNames[:], ", "))}
	}
	s.field = field
	const want = "want a string, number or boolean to keep as metadata"
	var text string
	if s.b[s.i] == '"' {
		body, _, err := s.str("")
		if err != nil {
			return err
		}
		text = string(body)
	} else {
		tok, err := s.scalar(want)
		switch {
		case err != nil:
			return err
		case tok == nil:
			return nil
		case string(tok) != "true" && string(tok) != "false" && !jsonNumber(tok):
			return fieldError(field, "%s: %s", Show(string(tok)), want)
		}
		text = string(tok)
	}
	if err := MetadataKeyError(key); err != nil {
		return fieldError(field, "cannot be kept as metadata: %v", err)
	}
	if _, dup := it.Metadata[key]; dup {
		return fieldError(field, "given twice")
	}
	if it.Metadata == nil {
		it.Metadata = make(map[string]string)
	}
	it.Metadata[key] = text
	return nil
}
