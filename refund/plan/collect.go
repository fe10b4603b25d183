package plan

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/refundkit/refundkit/refund"
)

// row is one input row as read, before validation: empty strings are
// absent values.
type row struct {
	line          int
	batch         string
	item          string
	charge        string
	paymentIntent string
	amount        string // decimal digits of minor units; "" is the full remaining amount
	currency      string
	reason        string
	metadata      map[string]string
	// shared: the strings point into the reader's line, so what is kept
	// must be copied for the line to be freed.
	shared bool
}

// own returns s, copied if it points into the reader's line.
func (r *row) own(s string) string {
	if r.shared {
		return strings.Clone(s)
	}
	return s
}

// collector validates rows as the readers produce them, detects duplicates
// over the whole input and gathers problems.
type collector struct {
	name     string
	opts     Options
	plan     *Plan
	problems []Problem
	total    int
	// targets maps every charge and payment intent listed to the entry of
	// its first row. That row's item id is most often the target's own id
	// (given or not), so explicit only needs to hold the others: in most
	// plans, none.
	targets  map[string]int32
	explicit map[string]int32 // item id -> entry, for ids not found through targets
	// currencies interns currency codes: a million rows share a few.
	currencies map[string]uint16
	recurring  map[string]string // see interned
	last       struct {          // the previous row's currency, the usual case
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
		recurring:  make(map[string]string),
	}
}

// problem records a problem at line (0: the whole input).
func (c *collector) problem(line int, format string, args ...any) {
	c.total++
	if len(c.problems) < c.opts.MaxProblems {
		c.problems = append(c.problems, Problem{Name: c.name, Line: line, Msg: fmt.Sprintf(format, args...)})
	}
}

// result is what Read returns: an I/O error first, else the problems, if
// any, else the plan.
func (c *collector) result(ioErr error) (*Plan, error) {
	switch {
	case ioErr != nil:
		return nil, ioErr
	case c.total > 0:
		return nil, &InputError{Problems: c.problems, Total: c.total}
	}
	return c.plan, nil
}

// add validates one row and keeps its item, or records why it cannot.
func (c *collector) add(r *row) {
	if r.batch != "" && r.batch != c.opts.Batch {
		c.problem(r.line, "batch %s: the plan is for batch %s", show(r.batch), c.opts.Batch)
		return
	}
	amount, err := parseAmount(r.amount)
	if err != nil {
		c.problem(r.line, "%v", err)
		return
	}
	for k, v := range r.metadata {
		// Excel's plain "CSV" export is Windows-1252: catch it here rather
		// than let JSON encoding turn accented letters into U+FFFD.
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			c.problem(r.line, "metadata %s: not UTF-8 text (in Excel, save as CSV UTF-8)", show(k))
			return
		}
	}
	it := refund.Item{
		Batch:         c.opts.Batch,
		Item:          r.item,
		Charge:        r.charge,
		PaymentIntent: r.paymentIntent,
		Amount:        amount,
		Currency:      lowerASCII(r.currency),
		Reason:        r.reason,
		Metadata:      r.metadata,
	}
	derived := it.Item == ""
	if derived {
		it.Item = it.Target()
	}
	if err := it.Validate(); err != nil {
		if derived {
			// Name the bad charge, not the item id made from it.
			probe := it
			probe.Item = "x"
			if perr := probe.Validate(); perr != nil {
				err = perr
			} else {
				err = fmt.Errorf("%s %s: longer than 128 characters: give the row an item id", targetKind(&it), show(it.Target()))
			}
		}
		c.problem(r.line, "%v", err)
		return
	}
	if c.duplicate(r.line, &it, derived) {
		return
	}
	c.keep(r, &it, derived)
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

// keep stores a valid item and remembers its ids.
func (c *collector) keep(r *row, it *refund.Item, derived bool) {
	if c.plan.Len() == math.MaxInt32 {
		c.problem(r.line, "more than %d rows: split the input", math.MaxInt32)
		return
	}
	e := entry{
		target:   r.own(it.Target()),
		amount:   it.Amount,
		line:     int32(min(r.line, math.MaxInt32)),
		currency: c.currency(it.Currency),
		reason:   reasonIndex(it.Reason),
	}
	if it.PaymentIntent != "" {
		e.flags |= entryIntent
	}
	if !derived {
		e.flags |= entryExplicit
	}
	if it.Item != e.target || it.Metadata != nil {
		e.extra = &extra{metadata: it.Metadata}
		if it.Item != e.target {
			e.extra.item = r.own(it.Item)
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

func targetKind(it *refund.Item) string {
	if it.Charge != "" {
		return "charge"
	}
	return "payment_intent"
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

// errAmount is the message for every amount that is not a positive whole
// number of minor units.
const errAmount = "amount %s: want a positive whole number of minor units"

// parseAmount parses minor units: decimal digits only, so 10.00, -5, +5,
// 1e3 and 1,000 are refused rather than guessed at. "" is 0, the full
// remaining amount.
func parseAmount(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf(errAmount, show(s))
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if errors.Is(err, strconv.ErrRange) {
		return 0, fmt.Errorf("amount %s: too large", show(s))
	}
	if err != nil || n == 0 {
		return 0, fmt.Errorf(errAmount, show(s))
	}
	return n, nil
}
