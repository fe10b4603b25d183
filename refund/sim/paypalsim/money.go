package paypalsim

import (
	"errors"

	"github.com/refundkit/refundkit/refund/money"
	"github.com/refundkit/refundkit/refund/provider/paypal/wire"
)

// PayPal's money (refund/provider/paypal/wire converts it); this file sorts
// what it refuses into PayPal's answers.

// maxValue is the longest value PayPal's money schema takes.
const maxValue = 32

// valueProblem is why a value string is refused.
type valueProblem int

const (
	valueOK          valueProblem = iota
	valueSyntax                   // not a decimal number: 400 INVALID_PARAMETER_SYNTAX
	valuePrecision                // more decimals than the currency has: 422 DECIMAL_PRECISION
	valueDecimals                 // decimals in a whole-only currency: 422 DECIMALS_NOT_SUPPORTED
	valueNotPositive              // zero or negative: 422 CANNOT_BE_ZERO_OR_NEGATIVE
)

// parseValue turns a refund's value string into minor units of currency.
func parseValue(value, currency string) (int64, valueProblem) {
	if len(value) > maxValue {
		return 0, valueSyntax
	}
	n, err := wire.ParseValue(value, currency)
	switch {
	case errors.Is(err, wire.ErrDecimalsNotSupported):
		return 0, valueDecimals
	case errors.Is(err, money.ErrPrecision):
		return 0, valuePrecision
	case err != nil:
		return 0, valueSyntax
	case n <= 0:
		return 0, valueNotPositive
	}
	return n, valueOK
}

// moneyOf is an amount as the API writes it; captures and their parts are
// whole in whole-only currencies, so wire.Value cannot refuse one.
func moneyOf(minor int64, currency string) moneyJSON {
	v, err := wire.Value(minor, currency)
	if err != nil {
		panic(err)
	}
	return moneyJSON{CurrencyCode: currency, Value: v}
}
