package wire

import (
	"errors"
	"testing"

	"github.com/refundkit/refundkit/refund/money"
)

// TestValues: minor units to PayPal's value and back, for currencies with
// 2 (USD), 0 (JPY) and 3 (KWD) decimals, and HUF, which refundkit counts
// in hundredths and PayPal takes whole.
func TestValues(t *testing.T) {
	for _, tc := range []struct {
		minor    int64
		currency string
		value    string
	}{
		{1050, "usd", "10.50"}, {1, "USD", "0.01"}, {0, "usd", "0.00"},
		{500, "jpy", "500"}, {1, "JPY", "1"},
		{1500, "kwd", "1.500"}, {5, "KWD", "0.005"},
		{150000, "huf", "1500"}, {100, "HUF", "1"}, {0, "huf", "0"}, {100, "twd", "1"},
	} {
		v, err := Value(tc.minor, tc.currency)
		if err != nil || v != tc.value {
			t.Errorf("Value(%d, %s) = %q, %v; want %q", tc.minor, tc.currency, v, err, tc.value)
		}
		back, err := ParseValue(tc.value, tc.currency)
		if err != nil || back != tc.minor {
			t.Errorf("ParseValue(%q, %s) = %d, %v; want %d", tc.value, tc.currency, back, err, tc.minor)
		}
	}
}

// TestWholeOnly: PayPal's whole-only currencies refuse decimals both ways,
// as PayPal refuses them (DECIMALS_NOT_SUPPORTED); other currencies keep
// money's rules.
func TestWholeOnly(t *testing.T) {
	for _, tc := range []struct {
		minor    int64
		currency string
	}{{150050, "huf"}, {1, "HUF"}, {199, "twd"}} {
		if v, err := Value(tc.minor, tc.currency); !errors.Is(err, ErrDecimalsNotSupported) {
			t.Errorf("Value(%d, %s) = %q, %v; want DECIMALS_NOT_SUPPORTED", tc.minor, tc.currency, v, err)
		}
	}
	for _, tc := range []struct {
		value, currency string
		want            error
	}{
		{"1500.50", "HUF", ErrDecimalsNotSupported}, {"1500.00", "HUF", ErrDecimalsNotSupported},
		{"1.5", "TWD", ErrDecimalsNotSupported}, {"500.0", "JPY", ErrDecimalsNotSupported},
		{"10.505", "USD", money.ErrPrecision}, {"1.5000", "KWD", money.ErrPrecision},
		{"1e3", "HUF", money.ErrSyntax}, {"", "USD", money.ErrSyntax},
	} {
		if n, err := ParseValue(tc.value, tc.currency); !errors.Is(err, tc.want) {
			t.Errorf("ParseValue(%q, %s) = %d, %v; want %v", tc.value, tc.currency, n, err, tc.want)
		}
	}
	for c, want := range map[string]int{"usd": 2, "JPY": 0, "huf": 0, "TWD": 0, "kwd": 3, "eur": 2} {
		if got := Decimals(c); got != want {
			t.Errorf("Decimals(%s) = %d, want %d", c, got, want)
		}
	}
}
