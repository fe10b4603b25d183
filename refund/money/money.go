// Package money is the one place that knows each currency's decimals: minor
// units as money for people (Format), exactly to and from decimal strings
// (Value, ParseValue), and summed, checked: a total never wraps (Add, Totals).
package money

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The currencies whose minor unit is not a hundredth, as Stripe lists them
// (docs.stripe.com/currencies).
var (
	zeroDecimal = map[string]bool{
		"bif": true, "clp": true, "djf": true, "gnf": true, "jpy": true, "kmf": true, "krw": true, "mga": true,
		"pyg": true, "rwf": true, "ugx": true, "vnd": true, "vuv": true, "xaf": true, "xof": true, "xpf": true,
	}
	threeDecimal = map[string]bool{"bhd": true, "jod": true, "kwd": true, "omr": true, "tnd": true}
)

// Decimals is how many decimal places currency (an ISO code) has: 0, 2 or 3.
func Decimals(currency string) int {
	c := strings.ToLower(currency)
	switch {
	case zeroDecimal[c]:
		return 0
	case threeDecimal[c]:
		return 3
	}
	return 2
}

// Format writes minor units of currency as money: 1007392 usd is
// "10,073.92 USD", 500 jpy "500 JPY"; without a currency, as they are.
func Format(minor int64, currency string) string {
	if currency == "" {
		return strconv.FormatInt(minor, 10) + " (minor units, currency unknown)"
	}
	var b strings.Builder
	neg, whole, frac := split(minor, Decimals(currency))
	if neg {
		b.WriteByte('-')
	}
	for i, c := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if frac != "" {
		b.WriteByte('.')
		b.WriteString(frac)
	}
	b.WriteByte(' ')
	b.WriteString(strings.ToUpper(currency))
	return b.String()
}

// Sums that cannot wrap: every total refundkit prints or decides by.

// MaxAmount is the largest amount in minor units any provider accepts for
// one payment (Stripe's twelve digits for IDR): the bound the sums are
// proven against, not a limit anything enforces.
const MaxAmount = 999_999_999_999

// MaxItems is the batch size the sums are proven for: MaxItems amounts of
// MaxAmount sum below math.MaxInt64. Beyond int64 a sum is an *OverflowError.
const MaxItems = 1_000_000

// A constant that does not fit a uint64 does not compile.
const _ uint64 = math.MaxInt64 - MaxAmount*MaxItems

// ErrOverflow is what every *OverflowError is.
var ErrOverflow = errors.New("beyond what an int64 of minor units holds")

// OverflowError is a sum that would have wrapped: Sum plus Amount.
type OverflowError struct {
	Currency    string // as the amounts name it ("" for none)
	Sum, Amount int64
}

func (e *OverflowError) Error() string {
	what := "the amounts"
	if e.Currency != "" {
		what = "the " + strings.ToUpper(e.Currency) + " amounts"
	}
	return fmt.Sprintf("%s sum beyond %s, the most an int64 of minor units holds (%s plus %s)",
		what, Format(limit(e.Sum, e.Amount), e.Currency), Format(e.Sum, e.Currency), Format(e.Amount, e.Currency))
}

// Is makes errors.Is(err, ErrOverflow) true.
func (e *OverflowError) Is(target error) bool { return target == ErrOverflow }

// limit is the end of int64 that a+b went beyond.
func limit(a, b int64) int64 {
	if a < 0 && b < 0 {
		return math.MinInt64
	}
	return math.MaxInt64
}

// Add is sum+amount of currency, or an *OverflowError (and sum unchanged)
// when that is beyond int64.
func Add(sum, amount int64, currency string) (int64, error) {
	t := sum + amount
	// It wraps exactly when both have one sign and the result the other.
	if (sum >= 0) == (amount >= 0) && (t >= 0) != (sum >= 0) {
		return sum, &OverflowError{Currency: currency, Sum: sum, Amount: amount}
	}
	return t, nil
}

// Totals sums amounts per currency, in minor units.
type Totals map[string]int64

// Add adds amount to currency's total (made even for 0); beyond int64 it
// is an *OverflowError and the total stays as it was.
func (t Totals) Add(currency string, amount int64) error {
	sum, err := Add(t[currency], amount, currency)
	if err != nil {
		return err
	}
	t[currency] = sum
	return nil
}

// TotalError is an *OverflowError where it happened: What total ("the
// refunded total"), Where ("item i2 of batch b1").
type TotalError struct {
	What, Where string
	Err         *OverflowError
}

func (e *TotalError) Error() string {
	return fmt.Sprintf("%s overflows at %s: %v", e.What, e.Where, e.Err)
}
func (e *TotalError) Unwrap() error { return e.Err }

// Amounts as exact decimal strings, as APIs other than Stripe's carry them.

// Why ParseValue refuses a string; its errors wrap one of these.
var (
	ErrSyntax    = errors.New("not a decimal number")                // a sign, exponent, separator, space, "1." or nothing
	ErrPrecision = errors.New("more decimals than the currency has") // even zeros
	ErrRange     = errors.New("too large")                           // for minor units in an int64
)

// split writes minor units with d decimals: the sign, the whole part and
// d fraction digits (1050 is "10", "50"; 5 with 3 decimals "0", "005").
func split(minor int64, d int) (neg bool, whole, frac string) {
	u := uint64(minor)
	if minor < 0 {
		neg, u = true, uint64(-(minor+1))+1 // also right for the smallest int64
	}
	digits := strconv.FormatUint(u, 10)
	if len(digits) <= d {
		digits = strings.Repeat("0", d-len(digits)+1) + digits
	}
	return neg, digits[:len(digits)-d], digits[len(digits)-d:]
}

// Value writes minor units of currency as a decimal string with the
// currency's own decimals (Decimals): 1050 usd is "10.50", 500 jpy "500",
// 1500 kwd "1.500", -5 usd "-0.05".
func Value(minor int64, currency string) string {
	neg, whole, frac := split(minor, Decimals(currency))
	s := whole
	if frac != "" {
		s += "." + frac
	}
	if neg {
		s = "-" + s
	}
	return s
}

// ParseValue reads a decimal string of currency as minor units, exactly:
// "10.5" usd is 1050, ".5" usd 50. An optional '-', digits, and at most
// the currency's decimals after a '.' ("500.0" jpy is ErrPrecision, never
// rounded); anything else is ErrSyntax.
func ParseValue(s, currency string) (int64, error) {
	v, neg := strings.CutPrefix(s, "-")
	whole, frac, dot := strings.Cut(v, ".")
	if !digits(whole) || !digits(frac) || whole == "" && frac == "" || dot && frac == "" {
		return 0, fmt.Errorf("%q: %w", s, ErrSyntax)
	}
	d := Decimals(currency)
	if len(frac) > d {
		return 0, fmt.Errorf("%q %s: %w (%d)", s, strings.ToUpper(currency), ErrPrecision, d)
	}
	n, err := strconv.ParseUint(whole+frac+strings.Repeat("0", d-len(frac)), 10, 64)
	limit := uint64(1<<63 - 1)
	if neg {
		limit++
	}
	if err != nil || n > limit {
		return 0, fmt.Errorf("%q: %w", s, ErrRange)
	}
	if neg {
		return int64(-n), nil // -(1<<63) wraps to itself: the smallest int64
	}
	return int64(n), nil
}

// digits reports whether s is ASCII digits only ("" is).
func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
