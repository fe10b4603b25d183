package paypal

// Amounts: refundkit's minor units to PayPal's decimal strings and back,
// exactly (integers only, never floats).

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/refundkit/refundkit/refund/money"
)

// wholeOnly are the currencies whose minor unit refundkit counts in
// hundredths (money.Decimals says 2, as Stripe does) but which PayPal
// takes without decimals: "This currency does not support decimals. If you
// pass a decimal amount, an error occurs" (PayPal REST currency codes:
// HUF, JPY, TWD; JPY has no decimals in money already).
var wholeOnly = map[string]bool{"huf": true, "twd": true}

// decimals is how many decimals refundkit's minor units of currency carry.
func decimals(currency string) int { return money.Decimals(currency) }

// formatValue writes minor units of currency as PayPal's amount value:
// 1050 usd is "10.50", 500 jpy "500", 1500 kwd "1.500". HUF and TWD must be
// whole at PayPal: 150000 huf is "1500"; 150050 huf is refused.
func formatValue(minor int64, currency string) (string, error) {
	if minor <= 0 {
		return "", fmt.Errorf("amount %d: want a positive number of minor units", minor)
	}
	c := strings.ToLower(currency)
	d := decimals(c)
	digits := strconv.FormatInt(minor, 10)
	if len(digits) <= d {
		digits = strings.Repeat("0", d-len(digits)+1) + digits
	}
	whole, frac := digits[:len(digits)-d], digits[len(digits)-d:]
	if wholeOnly[c] {
		if strings.Trim(frac, "0") != "" {
			return "", fmt.Errorf("amount %d %s: PayPal takes %s in whole units only", minor, c, strings.ToUpper(c))
		}
		return whole, nil
	}
	if d == 0 {
		return whole, nil
	}
	return whole + "." + frac, nil
}

// parseValue reads PayPal's amount value of currency as minor units. It
// takes at most the currency's decimals ("10.5" usd is 1050; "10.505" usd
// is an error, never rounded) and no sign, exponent or separator.
func parseValue(value, currency string) (int64, error) {
	c := strings.ToLower(currency)
	d := decimals(c)
	whole, frac, _ := strings.Cut(value, ".")
	if whole == "" || !allDigits(whole) || !allDigits(frac) || (strings.Contains(value, ".") && frac == "") {
		return 0, fmt.Errorf("amount %q %s: not a decimal number", value, c)
	}
	if len(frac) > d {
		if strings.Trim(frac[d:], "0") != "" {
			return 0, fmt.Errorf("amount %q %s: more than %d decimals", value, c, d)
		}
		frac = frac[:d]
	}
	frac += strings.Repeat("0", d-len(frac))
	n, err := strconv.ParseInt(whole+frac, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("amount %q %s: too large", value, c)
	}
	return n, nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
