package money

import (
	"errors"
	"math"
	"testing"
)

// TestValueRoundTrip: minor units to decimal strings and back, exactly,
// for currencies with 2 (USD, and HUF as refundkit counts it), 0 (JPY)
// and 3 (KWD) decimals, up to the ends of int64.
func TestValueRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		minor    int64
		currency string
		value    string
	}{
		{1050, "usd", "10.50"}, {1, "USD", "0.01"}, {100, "usd", "1.00"}, {0, "usd", "0.00"},
		{-5, "usd", "-0.05"}, {math.MaxInt64, "usd", "92233720368547758.07"},
		{math.MinInt64, "usd", "-92233720368547758.08"},
		{500, "jpy", "500"}, {1, "JPY", "1"}, {0, "jpy", "0"}, {math.MaxInt64, "jpy", "9223372036854775807"},
		{1500, "kwd", "1.500"}, {5, "kwd", "0.005"}, {10000, "KWD", "10.000"}, {123456789, "kwd", "123456.789"},
		{150000, "huf", "1500.00"}, {150050, "huf", "1500.50"},
	} {
		if got := Value(tc.minor, tc.currency); got != tc.value {
			t.Errorf("Value(%d, %s) = %q, want %q", tc.minor, tc.currency, got, tc.value)
		}
		if back, err := ParseValue(tc.value, tc.currency); err != nil || back != tc.minor {
			t.Errorf("ParseValue(%q, %s) = %d, %v; want %d", tc.value, tc.currency, back, err, tc.minor)
		}
	}
}

// TestParseValueShortFractions: fewer decimals than the currency has are
// exact too.
func TestParseValueShortFractions(t *testing.T) {
	for _, tc := range []struct {
		value, currency string
		want            int64
	}{
		{"10.5", "usd", 1050}, {"10", "usd", 1000}, {".5", "usd", 50}, {"1.5", "kwd", 1500},
		{"0.001", "kwd", 1}, {"1500", "huf", 150000}, {"007", "jpy", 7}, {"-0", "usd", 0},
	} {
		if n, err := ParseValue(tc.value, tc.currency); err != nil || n != tc.want {
			t.Errorf("ParseValue(%q, %s) = %d, %v; want %d", tc.value, tc.currency, n, err, tc.want)
		}
	}
}

// TestParseValueRefused: nothing is rounded, trimmed or guessed.
func TestParseValueRefused(t *testing.T) {
	for _, tc := range []struct {
		value, currency string
		want            error
	}{
		{"10.505", "usd", ErrPrecision}, {"10.500", "usd", ErrPrecision}, {"500.0", "jpy", ErrPrecision},
		{"1.5000", "kwd", ErrPrecision}, {"1500.001", "huf", ErrPrecision},
		{"", "usd", ErrSyntax}, {".", "usd", ErrSyntax}, {"-", "usd", ErrSyntax}, {"10.", "usd", ErrSyntax},
		{"+1", "usd", ErrSyntax}, {"1e3", "usd", ErrSyntax}, {"1,000.00", "usd", ErrSyntax}, {" 1", "usd", ErrSyntax},
		{"1 ", "usd", ErrSyntax}, {"--1", "usd", ErrSyntax}, {"1.2.3", "usd", ErrSyntax}, {"١٠", "usd", ErrSyntax},
		{"0x10", "usd", ErrSyntax}, {"NaN", "usd", ErrSyntax},
		{"92233720368547758.08", "usd", ErrRange}, {"-92233720368547758.09", "usd", ErrRange},
		{"99999999999999999999", "jpy", ErrRange}, {"123456789012345678901234567890", "usd", ErrRange},
	} {
		n, err := ParseValue(tc.value, tc.currency)
		if !errors.Is(err, tc.want) {
			t.Errorf("ParseValue(%q, %s) = %d, %v; want %v", tc.value, tc.currency, n, err, tc.want)
		}
	}
}

// FuzzParseValue: whatever ParseValue accepts, Value writes back to a
// string that parses to the same minor units, with no float anywhere.
func FuzzParseValue(f *testing.F) {
	for _, s := range []string{"10.50", "500", "1.500", ".5", "-0.05", "92233720368547758.07", "1e3"} {
		f.Add(s, "usd")
		f.Add(s, "jpy")
		f.Add(s, "kwd")
	}
	f.Fuzz(func(t *testing.T, s, currency string) {
		n, err := ParseValue(s, currency)
		if err != nil {
			return
		}
		back, err := ParseValue(Value(n, currency), currency)
		if err != nil || back != n {
			t.Fatalf("ParseValue(%q, %q) = %d; Value %q parses to %d, %v", s, currency, n, Value(n, currency), back, err)
		}
	})
}
