package paypalsim

import "testing"

// TestValueConversion: PayPal's decimal strings and minor units convert
// exactly both ways, for currencies with 2, 0 and 3 decimals.
func TestValueConversion(t *testing.T) {
	for _, tt := range []struct {
		value, currency string
		minor           int64
		problem         valueProblem
	}{
		{"10.50", "USD", 1050, valueOK},
		{"10.5", "USD", 1050, valueOK},
		{"10", "USD", 1000, valueOK},
		{"0.01", "USD", 1, valueOK},
		{".5", "USD", 50, valueOK},
		{"92233720368547758.07", "USD", 9223372036854775807, valueOK},
		{"92233720368547758.08", "USD", 0, valueSyntax},
		{"10.505", "USD", 0, valuePrecision},
		{"500", "JPY", 500, valueOK},
		{"500.0", "JPY", 0, valuePrecision},
		{"1.500", "KWD", 1500, valueOK},
		{"1.5", "KWD", 1500, valueOK},
		{"0.001", "KWD", 1, valueOK},
		{"1.5000", "KWD", 0, valuePrecision},
		{"0", "USD", 0, valueNotPositive},
		{"0.00", "USD", 0, valueNotPositive},
		{"-1.00", "USD", 0, valueNotPositive},
		{"", "USD", 0, valueSyntax},
		{"1e3", "USD", 0, valueSyntax},
		{"1.", "USD", 0, valueSyntax},
		{"1,00", "USD", 0, valueSyntax},
		{" 1", "USD", 0, valueSyntax},
		{"١٠", "USD", 0, valueSyntax},
	} {
		minor, problem := parseValue(tt.value, tt.currency)
		if minor != tt.minor || problem != tt.problem {
			t.Errorf("parseValue(%q, %s) = %d, %d; want %d, %d", tt.value, tt.currency, minor, problem, tt.minor, tt.problem)
		}
	}
	for _, tt := range []struct {
		minor    int64
		currency string
		value    string
	}{
		{1050, "USD", "10.50"}, {1, "USD", "0.01"}, {100, "usd", "1.00"},
		{500, "JPY", "500"}, {1500, "KWD", "1.500"}, {1, "KWD", "0.001"}, {10000, "KWD", "10.000"},
	} {
		if got := formatValue(tt.minor, tt.currency); got != tt.value {
			t.Errorf("formatValue(%d, %s) = %q, want %q", tt.minor, tt.currency, got, tt.value)
		}
		if back, p := parseValue(tt.value, tt.currency); back != tt.minor || p != valueOK {
			t.Errorf("round trip %d %s: %d, %d", tt.minor, tt.currency, back, p)
		}
	}
}
