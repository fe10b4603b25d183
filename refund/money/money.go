// Package money is the one place that knows how many decimals each
// currency has: it writes minor units as money for people (Format) and
// converts them exactly to and from decimal strings (Value, ParseValue);
// and the one place that sums them (Add, Totals), checked: a total never
// wraps.
package money

import (
	"strconv"
	"strings"
)

// zeroDecimal and threeDecimal are the currencies whose minor unit is not a
// hundredth, as Stripe lists them (docs.stripe.com/currencies); every other
// currency has two decimals.
var (
	zeroDecimal = map[string]bool{
		"bif": true, "clp": true, "djf": true, "gnf": true, "jpy": true, "kmf": true, "krw": true, "mga": true,
		"pyg": true, "rwf": true, "ugx": true, "vnd": true, "vuv": true, "xaf": true, "xof": true, "xpf": true,
	}
	threeDecimal = map[string]bool{"bhd": true, "jod": true, "kwd": true, "omr": true, "tnd": true}
)

// Decimals is how many decimal places currency (a lower- or upper-case ISO
// code) has: 0, 2 or 3.
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
// "10,073.92 USD", 500 jpy "500 JPY", 1500 kwd "1.500 KWD". Without a
// currency the minor units are shown as they are.
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
