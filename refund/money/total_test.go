package money

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// TestAddRefusesWrap: a sum beyond int64, either end, is an
// *OverflowError that names the currency and the amounts, and leaves the
// sum as it was; up to the ends it is exact.
func TestAddRefusesWrap(t *testing.T) {
	for _, tc := range []struct {
		sum, amount int64
		want        int64
		over        bool
	}{
		{1 << 62, 1 << 62, 0, true},
		{math.MaxInt64, 1, 0, true},
		{math.MaxInt64 - 1, 1, math.MaxInt64, false},
		{math.MinInt64, -1, 0, true},
		{math.MinInt64 + 1, -1, math.MinInt64, false},
		{math.MaxInt64, math.MinInt64, -1, false},
		{-5, 3, -2, false},
		{0, 0, 0, false},
	} {
		got, err := Add(tc.sum, tc.amount, "usd")
		switch {
		case tc.over && !errors.Is(err, ErrOverflow):
			t.Errorf("Add(%d, %d) = %d, %v; want ErrOverflow", tc.sum, tc.amount, got, err)
		case tc.over && got != tc.sum:
			t.Errorf("Add(%d, %d) overflowed to %d; want the sum kept, %d", tc.sum, tc.amount, got, tc.sum)
		case !tc.over && (err != nil || got != tc.want):
			t.Errorf("Add(%d, %d) = %d, %v; want %d", tc.sum, tc.amount, got, err, tc.want)
		}
	}
	_, err := Add(1<<62, 1<<62, "usd")
	var oe *OverflowError
	if !errors.As(err, &oe) || oe.Currency != "usd" || oe.Sum != 1<<62 || oe.Amount != 1<<62 {
		t.Fatalf("Add(2^62, 2^62) = %#v", err)
	}
	want := "the USD amounts sum beyond 92,233,720,368,547,758.07 USD, the most an int64 of minor units holds (46,116,860,184,273,879.04 USD plus 46,116,860,184,273,879.04 USD)"
	if err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if _, err := Add(math.MinInt64, -1, ""); !strings.Contains(err.Error(), "the amounts sum beyond -9223372036854775808 (minor units") {
		t.Errorf("error %q, want the low end named, with no currency", err)
	}
}

// TestTotalsMillionLargest: a million items of the largest amount Stripe
// takes in most currencies, and of the largest it takes at all (IDR), sum
// exactly and print right.
func TestTotalsMillionLargest(t *testing.T) {
	tot := Totals{}
	for range MaxItems {
		for _, a := range []struct {
			currency string
			amount   int64
		}{{"usd", 99_999_999}, {"idr", MaxAmount}, {"jpy", 99_999_999}} {
			if err := tot.Add(a.currency, a.amount); err != nil {
				t.Fatal(err)
			}
		}
	}
	for c, want := range map[string]string{
		"usd": "999,999,990,000.00 USD",
		"idr": "9,999,999,999,990,000.00 IDR",
		"jpy": "99,999,999,000,000 JPY",
	} {
		if got := Format(tot[c], c); got != want {
			t.Errorf("%s: a million of the largest amount print %q, want %q", c, got, want)
		}
	}
}

// TestTotalsKeepOnOverflow: the total that would wrap stays what it was,
// the other currencies go on, and the error names the currency.
func TestTotalsKeepOnOverflow(t *testing.T) {
	tot := Totals{}
	if err := tot.Add("usd", 1<<62); err != nil {
		t.Fatal(err)
	}
	err := tot.Add("usd", 1<<62)
	var oe *OverflowError
	if !errors.As(err, &oe) || oe.Currency != "usd" {
		t.Fatalf("second 2^62 usd: %v, want an *OverflowError naming usd", err)
	}
	if tot["usd"] != 1<<62 {
		t.Errorf("usd total %d after the overflow, want 2^62 kept", tot["usd"])
	}
	if err := tot.Add("eur", 1<<62); err != nil || tot["eur"] != 1<<62 {
		t.Errorf("eur: %v, %d", err, tot["eur"])
	}
	if err := tot.Add("gbp", 0); err != nil || len(tot) != 3 {
		t.Errorf("an amount of 0 names its currency: %v, %v", err, tot)
	}
}

// FuzzAdd: Add is the exact sum (as a big number would say) whenever it
// fits an int64, and an *OverflowError exactly when it does not.
func FuzzAdd(f *testing.F) {
	f.Add(int64(1<<62), int64(1<<62))
	f.Add(int64(math.MaxInt64), int64(1))
	f.Add(int64(math.MinInt64), int64(-1))
	f.Add(int64(-7), int64(7))
	f.Fuzz(func(t *testing.T, a, b int64) {
		got, err := Add(a, b, "usd")
		// The exact sum in 128 bits: hi is the carry word.
		lo := uint64(a) + uint64(b)
		hi := int64(a>>63) + int64(b>>63)
		if lo < uint64(a) {
			hi++
		}
		fits := hi == int64(lo)>>63
		switch {
		case fits && (err != nil || got != int64(lo)):
			t.Fatalf("Add(%d, %d) = %d, %v; want %d", a, b, got, err, int64(lo))
		case !fits && (!errors.Is(err, ErrOverflow) || got != a):
			t.Fatalf("Add(%d, %d) = %d, %v; want ErrOverflow, %d kept", a, b, got, err, a)
		}
	})
}

// TestTotalError: where a total overflowed, and errors.Is sees the cause.
func TestTotalError(t *testing.T) {
	_, err := Add(1<<62, 1<<62, "jpy")
	var oe *OverflowError
	errors.As(err, &oe)
	te := &TotalError{What: "the refunded total", Where: "item i2 of batch b1", Err: oe}
	want := "the refunded total overflows at item i2 of batch b1: the JPY amounts sum beyond 9,223,372,036,854,775,807 JPY, the most an int64 of minor units holds (4,611,686,018,427,387,904 JPY plus 4,611,686,018,427,387,904 JPY)"
	if te.Error() != want || !errors.Is(te, ErrOverflow) {
		t.Errorf("%q (Is ErrOverflow: %v), want %q", te, errors.Is(te, ErrOverflow), want)
	}
}
