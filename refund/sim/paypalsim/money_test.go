package paypalsim

import "testing"

// TestValueProblems: a refund's value string, as PayPal sorts it: exact
// minor units, or the answer its refusal gets (HUF and JPY whole only).
func TestValueProblems(t *testing.T) {
	for _, tt := range []struct {
		value, currency string
		minor           int64
		problem         valueProblem
	}{
		{"10.50", "USD", 1050, valueOK},
		{"10.5", "USD", 1050, valueOK},
		{".5", "USD", 50, valueOK},
		{"92233720368547758.07", "USD", 9223372036854775807, valueOK},
		{"92233720368547758.08", "USD", 0, valueSyntax},
		{"10.505", "USD", 0, valuePrecision},
		{"500", "JPY", 500, valueOK},
		{"500.0", "JPY", 0, valueDecimals},
		{"1.500", "KWD", 1500, valueOK},
		{"1.5000", "KWD", 0, valuePrecision},
		{"1500", "HUF", 150000, valueOK},
		{"1500.50", "HUF", 0, valueDecimals},
		{"1500.00", "HUF", 0, valueDecimals},
		{"0", "USD", 0, valueNotPositive},
		{"0.00", "USD", 0, valueNotPositive},
		{"-1.00", "USD", 0, valueNotPositive},
		{"", "USD", 0, valueSyntax},
		{"1e3", "USD", 0, valueSyntax},
		{"1.", "USD", 0, valueSyntax},
		{" 1", "USD", 0, valueSyntax},
		{"000000000000000000000000000000001", "USD", 0, valueSyntax}, // longer than PayPal's 32
	} {
		minor, problem := parseValue(tt.value, tt.currency)
		if minor != tt.minor || problem != tt.problem {
			t.Errorf("parseValue(%q, %s) = %d, %d; want %d, %d", tt.value, tt.currency, minor, problem, tt.minor, tt.problem)
		}
	}
}
