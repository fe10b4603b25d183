package money

import (
	"math"
	"testing"
)

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		minor    int64
		currency string
		want     string
	}{
		{1007392, "usd", "10,073.92 USD"},
		{5, "usd", "0.05 USD"},
		{0, "eur", "0.00 EUR"},
		{100, "EUR", "1.00 EUR"},
		{123456789, "gbp", "1,234,567.89 GBP"},
		{500, "jpy", "500 JPY"},
		{1234567, "krw", "1,234,567 KRW"},
		{1500, "kwd", "1.500 KWD"},
		{7, "bhd", "0.007 BHD"},
		{-250, "usd", "-2.50 USD"},
		{math.MinInt64, "usd", "-92,233,720,368,547,758.08 USD"},
		{42, "", "42 (minor units, currency unknown)"},
	} {
		if got := Format(tc.minor, tc.currency); got != tc.want {
			t.Errorf("Format(%d, %q) = %q, want %q", tc.minor, tc.currency, got, tc.want)
		}
	}
}

func TestDecimals(t *testing.T) {
	for c, want := range map[string]int{"usd": 2, "jpy": 0, "JPY": 0, "kwd": 3, "tnd": 3, "xyz": 2} {
		if got := Decimals(c); got != want {
			t.Errorf("Decimals(%q) = %d, want %d", c, got, want)
		}
	}
}
