package sim

import (
	"fmt"
	"testing"
)

// TestKnobNumbers pins the knob numbers: each is part of its draws, so a
// knob inserted before another would change what every recorded seed gives.
func TestKnobNumbers(t *testing.T) {
	got := []Knob{KnobRateLimit, KnobJitter, KnobErrorBeforeCommit, KnobErrorAfterCommit, KnobDropAfterCommit,
		KnobRequiresAction, KnobGatewayTimeout, KnobGatewayErrorAfterCommit, KnobPayPalPending, KnobPayPalFailed}
	for i, k := range got {
		if k != Knob(i+1) {
			t.Errorf("knob %d has number %d, want %d: add new knobs at the end", i, k, i+1)
		}
	}
	// And the draw itself: a change to Draw changes every seed's faults.
	if d := Draw(7, 1, KnobRateLimit); fmt.Sprintf("%.12f", d) != "0.384962275758" {
		t.Errorf("Draw(7, 1, rate limit) = %.12f, want 0.384962275758", d)
	}
}
