package paypalsim

import (
	"strconv"
	"strings"

	"github.com/refundkit/refundkit/refund/money"
)

// PayPal's money is {"currency_code":"USD","value":"10.50"}: a decimal
// string with the currency's own decimals (none for JPY, three for KWD).

// formatValue writes minor units of currency as PayPal's value string.
func formatValue(minor int64, currency string) string {
	d := money.Decimals(currency)
	s := strconv.FormatInt(minor, 10)
	if d == 0 {
		return s
	}
	for len(s) <= d {
		s = "0" + s
	}
	return s[:len(s)-d] + "." + s[len(s)-d:]
}

// valueProblem is why a value string is refused.
type valueProblem int

const (
	valueOK          valueProblem = iota
	valueSyntax                   // not PayPal's decimal pattern: 400
	valuePrecision                // more decimals than the currency has: 422
	valueNotPositive              // zero or negative: 422
)

// parseValue turns a value string into exact minor units of currency,
// without floating point: "10.5" USD is 1050, "500" JPY 500, "1.5" KWD
// 1500. Fewer decimals than the currency's are allowed, more are not.
func parseValue(value, currency string) (int64, valueProblem) {
	if len(value) == 0 || len(value) > 32 {
		return 0, valueSyntax
	}
	neg := strings.HasPrefix(value, "-")
	v := strings.TrimPrefix(value, "-")
	whole, frac, hasDot := strings.Cut(v, ".")
	if !digits(whole) && !(hasDot && whole == "") || hasDot && (frac == "" || !digits(frac)) {
		return 0, valueSyntax
	}
	d := money.Decimals(currency)
	if len(frac) > d {
		return 0, valuePrecision
	}
	frac += strings.Repeat("0", d-len(frac))
	n, err := strconv.ParseInt(whole+frac, 10, 64)
	if whole+frac == "" || err != nil {
		return 0, valueSyntax
	}
	if neg || n == 0 {
		return 0, valueNotPositive
	}
	return n, valueOK
}

func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
