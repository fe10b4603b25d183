package refund

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/refundkit/refundkit/refund/money"
)

func TestResultAppendJSONMatchesEncodingJSON(t *testing.T) {
	for _, r := range []Result{
		{Batch: "b", Item: "i", Status: StatusSkipped},
		{Batch: "b", Item: "i:1", Charge: "ch_1", Status: StatusRefunded, Refund: "re_1", Amount: 500, Currency: "usd", Attempt: 2},
		{Batch: "b", Item: "i", PaymentIntent: "pi_1", Status: StatusFailed, Code: "amount_too_large", Message: "Refund amount (€5.00) is greater than \"charge\" <amount>\n\t&"},
		{Batch: "b", Item: "i", Status: StatusInDoubt, Message: "\x00\x1f\u2028 bad \xff utf8"},
		{Batch: "b", Item: "i", Capture: "2GG279541U471931P", Status: StatusPending, Refund: "r1", Found: true},
		{Batch: "b", Item: "i", PSPReference: "8815658961765250", Status: StatusRefunded, Refund: "r2", Amount: 100, Currency: "eur", Attempt: 1},
	} {
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(r.AppendJSON(nil)); got != string(want)+"\n" {
			t.Errorf("AppendJSON\n got %s\nwant %s", got, want)
		}
	}
}

func TestSummaryString(t *testing.T) {
	s := Summary{Provider: "Stripe", Items: 1, ByStatus: map[string]int{StatusRefunded: 1},
		Refunded: map[string]int64{"usd": 1007392, "jpy": 500}, Found: map[string]int64{"kwd": 1500},
		CreateCalls: 1, PaymentReads: 2, RefundLists: 1, RefundReads: 3, Records: 2, Fsyncs: 2}
	want := "1 item: 1 refunded, 0 skipped, 0 failed, 0 in_doubt; refunded 500 JPY; refunded 10,073.92 USD; found at Stripe (refunded earlier) 1.500 KWD; " +
		"1 creates, 2 payment reads, 1 refund lists, 3 refund reads, 0 retried, 0 rate-limited, 0 reconciled, 0 new keys; 2 journal records in 2 fsyncs"
	if got := s.String(); got != want {
		t.Errorf("String() =\n%s\nwant\n%s", got, want)
	}
}

// TestSummaryTotalsCannotWrap: a million refunds of the largest amount
// Stripe takes in most currencies sum exactly; a total beyond int64 is
// said to be beyond it, in the text and the log record, never wrapped or
// partial, and Overflow names the total and the item; the other totals go
// on.
func TestSummaryTotalsCannotWrap(t *testing.T) {
	s := Summary{ByStatus: map[string]int{}}
	for range 1_000_000 {
		s.add(Result{Batch: "b", Item: "i", Status: StatusRefunded, Amount: 99_999_999, Currency: "usd"})
	}
	if s.Refunded["usd"] != 99_999_999_000_000 || s.Overflow != nil {
		t.Fatalf("a million of 99,999,999: %d, %v", s.Refunded["usd"], s.Overflow)
	}
	if got, want := s.String(), "; refunded 999,999,990,000.00 USD;"; !strings.Contains(got, want) {
		t.Errorf("summary %q, want %q", got, want)
	}

	s = Summary{ByStatus: map[string]int{}}
	for _, r := range []Result{
		{Batch: "b", Item: "i1", Status: StatusRefunded, Amount: 1 << 62, Currency: "usd"},
		{Batch: "b", Item: "i2", Status: StatusRefunded, Amount: 1 << 62, Currency: "usd"},
		{Batch: "b", Item: "i3", Status: StatusRefunded, Amount: 1, Currency: "usd"},
		{Batch: "b", Item: "i4", Status: StatusRefunded, Amount: 500, Currency: "eur"},
		{Batch: "b", Item: "i5", Status: StatusRefunded, Amount: 1 << 62, Currency: "usd", Found: true},
	} {
		s.add(r)
	}
	want := "the refunded total overflows at item i2 of batch b: the USD amounts sum beyond 92,233,720,368,547,758.07 USD"
	if s.Overflow == nil || !strings.HasPrefix(s.Overflow.Error(), want) || !errors.Is(s.Overflow, money.ErrOverflow) {
		t.Fatalf("Overflow %v, want %q...", s.Overflow, want)
	}
	text := s.String()
	for _, part := range []string{"; refunded 5.00 EUR; refunded more than 92,233,720,368,547,758.07 USD (beyond what an int64 of minor units holds); found at the provider (refunded earlier) 46,116,860,184,273,879.04 USD;"} {
		if !strings.Contains(text, part) {
			t.Errorf("summary %q, want %q", text, part)
		}
	}
	if strings.Contains(text, "46,116,860,184,273,879.05") || strings.Contains(text, " -9") {
		t.Errorf("summary %q holds a partial or wrapped total", text)
	}
	attrs := s.LogAttrs()
	for k := 0; k+1 < len(attrs); k += 2 {
		switch attrs[k] {
		case "refunded_minor_units":
			if m := attrs[k+1].(money.Totals); len(m) != 1 || m["eur"] != 500 {
				t.Errorf("refunded_minor_units %v, want only eur's (usd's is beyond int64)", m)
			}
		case "overflow":
			if attrs[k+1] != s.Overflow.Error() {
				t.Errorf("overflow %v", attrs[k+1])
			}
			return
		}
	}
	t.Errorf("no overflow in the log record: %v", attrs)
}

// TestLiveSumCannotWrap: live refunds that add up beyond int64 are no sum
// (a full refund is never said equal to its payment, nor its rest told by
// them); canceled ones are not added.
func TestLiveSumCannotWrap(t *testing.T) {
	huge := Refund{ID: "re_1", Amount: 1 << 62, Currency: "usd", Status: RefundSucceeded}
	canceled := Refund{ID: "re_3", Amount: 1 << 62, Currency: "usd", Status: RefundCanceled}
	if n, ok := liveSum([]Refund{huge, canceled}); !ok || n != 1<<62 {
		t.Errorf("one live of 2^62 and a canceled one: %d, %v", n, ok)
	}
	if n, ok := liveSum([]Refund{huge, huge}); ok {
		t.Errorf("two live of 2^62: %d, %v; want no sum", n, ok)
	}
}
