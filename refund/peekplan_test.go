package refund_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/refundkit/refundkit/refund"
)

// TestPeekPlan: the first line that is not blank is checked as a plan item
// before a run opens anything, and the reader returned gives back the
// whole input.
func TestPeekPlan(t *testing.T) {
	const item = `{"batch":"b1","item":"i1","charge":"ch_1"}`
	for _, c := range []struct {
		name, in string
		ok       bool
		err      string // "" for none
		notItem  bool   // wraps ErrNotPlanItem
	}{
		{"a plan", item + "\n" + item + "\n", true, "", false},
		{"blank lines first", "\n  \n" + item + "\n", true, "", false},
		{"empty", "", false, "", false},
		{"blank only", "\n\n \n", false, "", false},
		{"an id", "ch_1\n", false, "p:1: not a plan item: ch_1 (want a JSON object)", true},
		{"a CSV header after blank lines", "\n\ncharge,amount\nch_1,5\n", false, "p:3: not a plan item: charge,amount (want a JSON object)", true},
		{"an object that is not an item", `{"batch":"b1","charge":"ch_1"}` + "\n", false, "p:1: item: missing: ", false},
		{"a bad second line is the run's to find", item + "\nch_2\n", true, "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, ok, err := refund.PeekPlan(strings.NewReader(c.in), "p")
			if c.err == "" {
				if err != nil || ok != c.ok {
					t.Fatalf("ok %v, err %v; want ok %v", ok, err, c.ok)
				}
				if ok {
					all, err := io.ReadAll(r)
					if err != nil || string(all) != c.in {
						t.Errorf("read back %q, %v; want %q", all, err, c.in)
					}
				}
				return
			}
			var ie *refund.InputError
			if !errors.As(err, &ie) || !strings.HasPrefix(err.Error(), c.err) || ok {
				t.Fatalf("ok %v, err %v; want an *InputError starting %q", ok, err, c.err)
			}
			if got := errors.Is(err, refund.ErrNotPlanItem); got != c.notItem {
				t.Errorf("errors.Is(err, ErrNotPlanItem) = %v, want %v", got, c.notItem)
			}
		})
	}
}

// TestPeekPlanReadsOnlyTheFirstLine: on a pipe whose producer is still
// writing, PeekPlan returns once the first line is in, without waiting for
// the rest: a plan that streams in is worked on as it comes.
func TestPeekPlanReadsOnlyTheFirstLine(t *testing.T) {
	pr, pw := io.Pipe()
	const first, second = `{"batch":"b1","item":"i1","charge":"ch_1"}` + "\n", `{"batch":"b1","item":"i2","charge":"ch_2"}` + "\n"
	go pw.Write([]byte(first))
	r, ok, err := refund.PeekPlan(pr, "p")
	if err != nil || !ok {
		t.Fatalf("ok %v, err %v", ok, err)
	}
	go func() {
		pw.Write([]byte(second))
		pw.Close()
	}()
	all, err := io.ReadAll(r)
	if err != nil || string(all) != first+second {
		t.Errorf("read back %q, %v", all, err)
	}
}
