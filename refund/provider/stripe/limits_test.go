package stripe

import (
	"testing"

	"github.com/refundkit/refundkit/refund"
)

func TestLimits(t *testing.T) {
	for _, tc := range []struct {
		live  bool
		share float64
		want  refund.Limits
	}{
		{false, 0.8, refund.Limits{Global: 20, Create: 20, List: 20, Charges: 20, Get: 20}},
		{true, 0.8, refund.Limits{Global: 80, Create: 20, List: 20, Charges: 20, Get: 20}},
		{true, 0.2, refund.Limits{Global: 20, Create: 5, List: 5, Charges: 5, Get: 5}}, // one of four shard workers
	} {
		if got := Limits(tc.live, tc.share); got != tc.want {
			t.Errorf("Limits(%v, %v) = %+v, want %+v", tc.live, tc.share, got, tc.want)
		}
	}
}
