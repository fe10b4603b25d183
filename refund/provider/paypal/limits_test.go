package paypal

import (
	"testing"

	"github.com/refundkit/refundkit/refund"
)

func TestLimits(t *testing.T) {
	for _, tc := range []struct {
		share float64
		want  refund.Limits
	}{
		{0.8, refund.Limits{Global: 8, Create: 8, List: 4, Charges: 8, Get: 8, ListRequests: 2}},
		{0.2, refund.Limits{Global: 2, Create: 2, List: 1, Charges: 2, Get: 2, ListRequests: 2}}, // one of four shard workers
	} {
		if got := Limits(tc.share); got != tc.want {
			t.Errorf("Limits(%v) = %+v, want %+v", tc.share, got, tc.want)
		}
	}
}
