// Package wire holds what PayPal's client and its simulator must read
// alike: headers, how long a request id is kept, and amounts.
package wire

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/refundkit/refundkit/refund/money"
)

// wholeOnly are the currencies PayPal takes whole that refundkit counts in cents.
var wholeOnly = map[string]bool{"huf": true, "twd": true}

// ErrDecimalsNotSupported: an amount with decimals in a currency PayPal
// takes whole only (PayPal's 422 issue DECIMALS_NOT_SUPPORTED).
var ErrDecimalsNotSupported = errors.New("currency does not support decimals at PayPal")

// Decimals is how many decimals PayPal writes for currency.
func Decimals(currency string) int {
	if wholeOnly[strings.ToLower(currency)] {
		return 0
	}
	return money.Decimals(currency)
}

// Value writes minor units of currency as PayPal's value: 1050 usd is
// "10.50", 150000 huf "1500", 150050 huf ErrDecimalsNotSupported.
func Value(minor int64, currency string) (string, error) {
	v := money.Value(minor, currency)
	if !wholeOnly[strings.ToLower(currency)] {
		return v, nil
	}
	whole, frac, _ := strings.Cut(v, ".")
	if strings.Trim(frac, "0") != "" {
		return "", fmt.Errorf("%d minor units of %s: %w", minor, strings.ToUpper(currency), ErrDecimalsNotSupported)
	}
	return whole, nil
}

// ParseValue reads PayPal's value of currency as minor units, exactly; a
// '.' in a currency PayPal takes whole is ErrDecimalsNotSupported.
func ParseValue(value, currency string) (int64, error) {
	if Decimals(currency) == 0 && strings.Contains(value, ".") {
		return 0, fmt.Errorf("%q %s: %w", value, strings.ToUpper(currency), ErrDecimalsNotSupported)
	}
	return money.ParseValue(value, currency)
}

// RequestIDHeader carries the idempotency key of a POST.
const RequestIDHeader = "PayPal-Request-Id"

// RequestIDTTL is how long PayPal keeps a PayPal-Request-Id.
const RequestIDTTL = 45 * 24 * time.Hour

// DebugIDHeader is on every answer of PayPal's own (its support asks for it).
const DebugIDHeader = "Paypal-Debug-Id"
