package money

// Sums of amounts that cannot wrap: every total refundkit prints or
// decides by is added here, checked, never with a bare +=.

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// MaxAmount is the largest amount in minor units any provider refundkit
// speaks to accepts for one payment: Stripe's twelve digits for IDR
// (docs.stripe.com/currencies#minimum-and-maximum-charge-amounts; most
// currencies stop at eight, 99,999,999). Nothing refuses an amount above
// it (each provider refuses what it does not take); it is the bound the
// sums are proven against.
const MaxAmount = 999_999_999_999

// MaxItems is the batch size the sums are proven for: MaxItems amounts of
// MaxAmount each sum below math.MaxInt64 (10^18 of 9.2*10^18), so any real
// batch's totals print right. Beyond int64, a sum is an *OverflowError.
const MaxItems = 1_000_000

// A constant that does not fit a uint64 does not compile.
const _ uint64 = math.MaxInt64 - MaxAmount*MaxItems

// ErrOverflow is what every *OverflowError is: a sum beyond what an int64
// of minor units holds.
var ErrOverflow = errors.New("beyond what an int64 of minor units holds")

// OverflowError is a sum that would have wrapped: Sum, the total so far,
// plus Amount goes beyond int64.
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
	// Two's complement wraps exactly when both have one sign and the
	// result the other.
	if (sum >= 0) == (amount >= 0) && (t >= 0) != (sum >= 0) {
		return sum, &OverflowError{Currency: currency, Sum: sum, Amount: amount}
	}
	return t, nil
}

// Totals sums amounts per currency (a map of currency to minor units, as
// it prints in JSON).
type Totals map[string]int64

// Add adds amount to currency's total; beyond int64 it is an
// *OverflowError and the total stays as it was. A total is made even for
// an amount of 0: the currency is named.
func (t Totals) Add(currency string, amount int64) error {
	sum, err := Add(t[currency], amount, currency)
	if err != nil {
		return err
	}
	t[currency] = sum
	return nil
}

// TotalError is an *OverflowError where it happened: What total ("the
// refunded total") and Where the amount that took it there came from
// ("item i2 of batch b1").
type TotalError struct {
	What, Where string
	Err         *OverflowError
}

func (e *TotalError) Error() string {
	return fmt.Sprintf("%s overflows at %s: %v", e.What, e.Where, e.Err)
}
func (e *TotalError) Unwrap() error { return e.Err }
