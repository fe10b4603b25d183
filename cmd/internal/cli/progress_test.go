package cli

import (
	"strings"
	"testing"

	"github.com/refundkit/refundkit/refund"
)

// TestProgressTotal: with the plan's size known the line shows N/total and
// an ETA; a size the run outgrew (a count edited by hand) is no total at
// all, never more than 100%, and neither is one that is not known yet.
func TestProgressTotal(t *testing.T) {
	size := 4
	p := &progress{size: func() int { return size }, counts: map[string]int{}}
	for range 3 {
		p.add(refund.Result{Status: refund.StatusRefunded})
	}
	now := p.firstAPI.Add(2e9) // 2 items after the first in 2s: 1 item/s
	for _, tt := range []struct {
		size      int
		want      []string
		wantTotal bool
	}{
		{size: 4, want: []string{"refund 3/4 (75%) · ", " · 1.0 items/s · ETA 1s"}, wantTotal: true},
		{size: 3, want: []string{"refund 3/3 (100%) · ", " · 1.0 items/s"}, wantTotal: true},
		{size: 2, want: []string{"refund 3 items · ", " · 1.0 items/s"}},
		{size: 0, want: []string{"refund 3 items · "}},
	} {
		size = tt.size
		line := p.line(now)
		for _, w := range tt.want {
			if !strings.Contains(line, w) {
				t.Errorf("size %d: %q does not say %q", tt.size, line, w)
			}
		}
		if tt.size != 4 && strings.Contains(line, "ETA") {
			t.Errorf("size %d: %q has an ETA", tt.size, line)
		}
		attrs := p.attrs(now)
		hasTotal := false
		for i := 0; i+1 < len(attrs); i += 2 {
			if attrs[i] == "total" {
				hasTotal = true
				if attrs[i+1] != tt.size {
					t.Errorf("size %d: the record's total is %v", tt.size, attrs[i+1])
				}
			}
		}
		if hasTotal != tt.wantTotal {
			t.Errorf("size %d: the record has a total: %v, want %v: %v", tt.size, hasTotal, tt.wantTotal, attrs)
		}
	}
}
