package money

// Amounts as exact decimal strings, the way payment APIs other than
// Stripe's carry them ("10.50" USD, "500" JPY, "1.500" KWD): integers
// only, never floats, never rounded.

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Why ParseValue refuses a string; its errors wrap one of these.
var (
	// ErrSyntax: not a decimal number (a sign, exponent, separator, space,
	// "1." or nothing at all).
	ErrSyntax = errors.New("not a decimal number")
	// ErrPrecision: more decimals than the currency has, even zeros.
	ErrPrecision = errors.New("more decimals than the currency has")
	// ErrRange: too large for minor units in an int64.
	ErrRange = errors.New("too large")
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
// "10.5" usd is 1050, ".5" usd 50, "500" jpy 500, "1.5" kwd 1500. It takes
// an optional leading '-', digits, and at most the currency's decimals
// after a '.': "10.505" usd and "500.0" jpy are ErrPrecision, never
// rounded or trimmed; anything else is ErrSyntax.
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
