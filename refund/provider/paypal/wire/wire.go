// Package wire holds what PayPal's client (refund/provider/paypal) and its
// simulator (refund/sim/paypalsim) must read alike: the headers of
// idempotency and support, how long a request id is kept, and amounts
// ({"currency_code":"USD","value":"10.50"}, converted exactly by
// refund/money, with the one rule that is PayPal's own).
package wire

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/refundkit/refundkit/refund/money"
)

// wholeOnly are the currencies PayPal takes without decimals although
// refundkit counts them in hundredths, as Stripe does (JPY has none in
// money already).
var wholeOnly = map[string]bool{"huf": true, "twd": true}

// ErrDecimalsNotSupported: an amount with decimals in a currency PayPal
// takes whole only (PayPal's 422 issue DECIMALS_NOT_SUPPORTED).
var ErrDecimalsNotSupported = errors.New("currency does not support decimals at PayPal")

// Decimals is how many decimals PayPal writes for currency: 0 for JPY,
// HUF and TWD, else the currency's own (money.Decimals).
func Decimals(currency string) int {
	if wholeOnly[strings.ToLower(currency)] {
		return 0
	}
	return money.Decimals(currency)
}

// Value writes minor units of currency as PayPal's value: 1050 usd is
// "10.50", 500 jpy "500", 1500 kwd "1.500", 150000 huf "1500". Minor
// units that are not whole in a whole-only currency (150050 huf) are
// ErrDecimalsNotSupported.
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

// ParseValue reads PayPal's value of currency as minor units, exactly
// (money.ParseValue), signed. A '.' in a currency PayPal takes whole
// ("500.0" JPY, "1500.50" HUF) is ErrDecimalsNotSupported, as PayPal
// answers it.
func ParseValue(value, currency string) (int64, error) {
	if Decimals(currency) == 0 && strings.Contains(value, ".") {
		return 0, fmt.Errorf("%q %s: %w", value, strings.ToUpper(currency), ErrDecimalsNotSupported)
	}
	return money.ParseValue(value, currency)
}

// RequestIDHeader carries the idempotency key of a POST.
const RequestIDHeader = "PayPal-Request-Id"

// RequestIDTTL is how long PayPal keeps a PayPal-Request-Id (Payments v2,
// captures.refund).
const RequestIDTTL = 45 * 24 * time.Hour

// DebugIDHeader is on every answer of PayPal's own (PayPal's support asks
// for it); an answer without it came from something in front of PayPal.
const DebugIDHeader = "Paypal-Debug-Id"
