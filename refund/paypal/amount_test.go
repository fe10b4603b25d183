package paypal

import (
	"math"
	"testing"
)

// TestAmounts: minor units to PayPal's value and back, exactly, for
// currencies with 2, 0 and 3 decimals and those PayPal takes whole.
func TestAmounts(t *testing.T) {
	for _, tc := range []struct {
		minor    int64
		currency string
		value    string
	}{
		{1050, "usd", "10.50"},
		{1, "usd", "0.01"},
		{100, "USD", "1.00"},
		{500, "jpy", "500"},
		{1, "jpy", "1"},
		{1500, "kwd", "1.500"},
		{5, "kwd", "0.005"},
		{150000, "huf", "1500"},
		{100, "twd", "1"},
		{math.MaxInt64, "usd", "92233720368547758.07"},
	} {
		v, err := formatValue(tc.minor, tc.currency)
		if err != nil || v != tc.value {
			t.Errorf("formatValue(%d, %s) = %q, %v; want %q", tc.minor, tc.currency, v, err, tc.value)
		}
		back, err := parseValue(tc.value, tc.currency)
		if err != nil || back != tc.minor {
			t.Errorf("parseValue(%q, %s) = %d, %v; want %d", tc.value, tc.currency, back, err, tc.minor)
		}
	}
}

func TestAmountsRefused(t *testing.T) {
	for _, tc := range []struct {
		minor    int64
		currency string
	}{{0, "usd"}, {-5, "usd"}, {150050, "huf"}, {1, "twd"}} {
		if v, err := formatValue(tc.minor, tc.currency); err == nil {
			t.Errorf("formatValue(%d, %s) = %q, want an error", tc.minor, tc.currency, v)
		}
	}
	for _, tc := range []struct{ value, currency string }{
		{"10.505", "usd"}, {"1.5", "jpy"}, {"-1.00", "usd"}, {"1e3", "usd"}, {"1,000.00", "usd"},
		{"", "usd"}, {".50", "usd"}, {"10.", "usd"}, {"99999999999999999999", "usd"},
	} {
		if n, err := parseValue(tc.value, tc.currency); err == nil {
			t.Errorf("parseValue(%q, %s) = %d, want an error", tc.value, tc.currency, n)
		}
	}
	// Trailing zeros beyond the currency's decimals say nothing more.
	for _, tc := range []struct {
		value, currency string
		want            int64
	}{{"10.500", "usd", 1050}, {"500.00", "jpy", 500}, {"1500.00", "huf", 150000}} {
		if n, err := parseValue(tc.value, tc.currency); err != nil || n != tc.want {
			t.Errorf("parseValue(%q, %s) = %d, %v; want %d", tc.value, tc.currency, n, err, tc.want)
		}
	}
}
