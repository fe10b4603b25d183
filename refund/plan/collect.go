package plan

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/refundkit/refundkit/refund"
)

// collector validates rows as the readers produce them, detects duplicates
// over the whole input and gathers problems.
type collector struct {
	name     string
	opts     Options
	plan     *Plan
	problems []*refund.InputError
	total    int
	// targets maps every charge, payment intent, capture and psp_reference
	// listed to the entry of its first row. That row's item id is most
	// often the target's own id (given or not), so explicit only needs to
	// hold the others: in most plans, none.
	targets  map[string]int32
	explicit map[string]int32 // item id -> entry, for ids not found through targets
	// currencies interns currency codes: a million rows share a few.
	currencies map[string]uint16
	last       struct { // the previous row's currency, the usual case
		code  string
		index uint16
	}
}

func newCollector(name string, opts Options) *collector {
	return &collector{
		name:       name,
		opts:       opts,
		plan:       newPlan(opts.Batch),
		targets:    make(map[string]int32),
		explicit:   make(map[string]int32),
		currencies: make(map[string]uint16),
	}
}

// problem records a problem at line (0: the whole input) that no one
// field is at fault for.
func (c *collector) problem(line int, format string, args ...any) {
	c.fail(line, &refund.InputError{Err: fmt.Errorf(format, args...)})
}

// fail records err, found at line: an *refund.InputError keeps its field.
func (c *collector) fail(line int, err error) {
	c.total++
	if len(c.problems) < c.opts.MaxProblems {
		ie := &refund.InputError{Err: err}
		if e, ok := err.(*refund.InputError); ok {
			copied := *e
			ie = &copied
		}
		ie.Name, ie.Line = c.name, line
		c.problems = append(c.problems, ie)
	}
}

// result is what Read returns: an I/O error first, else the problems, if
// any, else the plan.
func (c *collector) result(ioErr error) (*Plan, error) {
	switch {
	case ioErr != nil:
		return nil, ioErr
	case c.total > 0:
		return nil, &Rejection{Problems: c.problems, Total: c.total}
	}
	return c.plan, nil
}

// add completes one item as plan's input may leave it (batch and item id
// left out, currency in capitals), validates it and keeps it, or records
// why it cannot. shared: its strings point into the reader's line.
func (c *collector) add(line int, it *refund.Item, shared bool) {
	if c.otherBatch(line, it.Batch) {
		return
	}
	it.Batch = c.opts.Batch
	if k, bad := notUTF8(it.Metadata); bad {
		// Excel's plain "CSV" export is Windows-1252: catch it here rather
		// than let JSON encoding turn accented letters into U+FFFD.
		c.fail(line, &refund.InputError{Field: refund.MetadataField(k), Err: errors.New("not UTF-8 text (in Excel, save as CSV UTF-8)")})
		return
	}
	it.Currency = lowerASCII(it.Currency)
	derived := it.Item == ""
	if derived {
		it.Item = it.Target()
	}
	if err := it.Validate(); err != nil {
		if derived {
			// Name the bad charge, capture or psp_reference, not the item
			// id made from it.
			probe := *it
			probe.Item = "x"
			if perr := probe.Validate(); perr != nil {
				err = perr
			} else {
				err = &refund.InputError{Field: targetKind(it), Err: fmt.Errorf("%s: longer than 128 characters: give the row an item id", refund.Show(it.Target()))}
			}
		}
		c.fail(line, err)
		return
	}
	if c.duplicate(line, it, derived) {
		return
	}
	c.keep(line, it, derived, shared)
}

// otherBatch reports a row naming a batch that is not the plan's.
func (c *collector) otherBatch(line int, batch string) bool {
	if batch == "" || batch == c.opts.Batch {
		return false
	}
	c.fail(line, &refund.InputError{Field: "batch", Err: fmt.Errorf("%s: the plan is for batch %s", refund.Show(batch), c.opts.Batch)})
	return true
}

// notUTF8 returns the first metadata key, in key order, whose key or value
// is not UTF-8.
func notUTF8(md map[string]string) (key string, bad bool) {
	for k, v := range md {
		if (!utf8.ValidString(k) || !utf8.ValidString(v)) && (!bad || k < key) {
			key, bad = k, true
		}
	}
	return key, bad
}

// duplicate reports a problem and returns true when the item's id or
// target was already listed. A target may appear on several rows only to
// be refunded in parts: each row with its own item id and an amount.
func (c *collector) duplicate(line int, it *refund.Item, derived bool) bool {
	target, kind := it.Target(), targetKind(it)
	if i, ok := c.targets[target]; ok {
		// Later rows of a target are kept only when they and its first row
		// have item ids and amounts, so the first row tells all.
		first := c.plan.at(int(i))
		switch {
		case first.flags&kindFlags != kindFlag(it):
			// One id, two kinds of payment: a capture column holding a
			// Stripe id, most likely. Never two payments of one id.
			c.problem(line, "%s %s already listed at line %d, as a %s", kind, target, first.line, kindName(first.flags))
			return true
		case derived || !first.explicit():
			c.problem(line, "%s %s already listed at line %d", kind, target, first.line)
			return true
		case it.Amount == 0 || first.amount == 0:
			c.problem(line, "%s %s already listed at line %d: refunding a %s in parts needs an amount on every row", kind, target, first.line, kind)
			return true
		}
	}
	if e := c.itemEntry(it.Item); e != nil {
		c.problem(line, "item %s already listed at line %d", it.Item, e.line)
		return true
	}
	return false
}

// itemEntry returns the entry with item id id, if any. An entry whose id
// is its target's, and which is that target's first, is found through
// targets; every other is in explicit.
func (c *collector) itemEntry(id string) *entry {
	if i, ok := c.explicit[id]; ok {
		return c.plan.at(int(i))
	}
	if i, ok := c.targets[id]; ok {
		if e := c.plan.at(int(i)); e.item() == id {
			return e
		}
	}
	return nil
}

// keep stores a valid item and remembers its ids. shared: its strings
// point into the reader's line and must be copied to be kept.
func (c *collector) keep(line int, it *refund.Item, derived, shared bool) {
	if c.plan.Len() == math.MaxInt32 {
		c.problem(line, "more than %d rows: split the input", math.MaxInt32)
		return
	}
	own := func(s string) string {
		if shared {
			return strings.Clone(s)
		}
		return s
	}
	e := entry{
		target:   own(it.Target()),
		amount:   it.Amount,
		line:     int32(min(line, math.MaxInt32)),
		currency: c.currency(it.Currency),
		reason:   reasonIndex(it.Reason),
	}
	e.flags |= kindFlag(it)
	if !derived {
		e.flags |= entryExplicit
	}
	if it.Item != e.target || it.Metadata != nil {
		e.extra = &extra{metadata: it.Metadata}
		if it.Item != e.target {
			e.extra.item = own(it.Item)
		}
	}
	_, seen := c.targets[e.target]
	i := int32(c.plan.add(e))
	if !seen {
		c.targets[e.target] = i
	}
	if e.extra != nil && e.extra.item != "" || seen {
		c.explicit[e.item()] = i
	}
}

// currency returns the index of an interned currency code.
func (c *collector) currency(code string) uint16 {
	if code == c.last.code {
		return c.last.index
	}
	i, ok := c.currencies[code]
	if !ok {
		// Validated codes are three letters a-z: at most 17,576 of them.
		i = uint16(len(c.plan.currencies))
		code = strings.Clone(code)
		c.plan.currencies = append(c.plan.currencies, code)
		c.currencies[code] = i
	}
	c.last.code, c.last.index = code, i
	return i
}

// reasonIndex is 1 + the index of a valid reason in refund.Reasons; 0 for none.
func reasonIndex(r string) uint8 {
	for i, ok := range refund.Reasons {
		if r == ok {
			return uint8(i + 1)
		}
	}
	return 0
}

// targetKind names the field of the item's target, as messages say it.
func targetKind(it *refund.Item) string { return kindName(kindFlag(it)) }

// kindFlag is the entry flag of the item's target.
func kindFlag(it *refund.Item) uint8 {
	for _, f := range []uint8{0, entryIntent, entryCapture} {
		if *targetField(it, f) != "" {
			return f
		}
	}
	return entryPSPReference
}

// targetField is the field of it that an entry with flags names.
func targetField(it *refund.Item, flags uint8) *string {
	switch flags & kindFlags {
	case entryIntent:
		return &it.PaymentIntent
	case entryCapture:
		return &it.Capture
	case entryPSPReference:
		return &it.PSPReference
	}
	return &it.Charge
}

// kindName names the target of an entry with flags.
func kindName(flags uint8) string {
	return map[uint8]string{0: "charge", entryIntent: "payment_intent", entryCapture: "capture", entryPSPReference: "psp_reference"}[flags&kindFlags]
}

// lowerASCII lower-cases ASCII letters: currency codes are written USD as
// often as usd, and Stripe wants usd. Anything else is left for Validate
// to reject.
func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] >= 'A' && s[i] <= 'Z' {
			return strings.ToLower(s)
		}
	}
	return s
}
