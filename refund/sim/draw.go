package sim

// Knob names one independent draw made for a request. New knobs go at the
// end: a knob's number is part of its draws, so renumbering one would change
// the faults every recorded seed gives.
type Knob uint64

// The draws, shared by both APIs: a request of either draws the same knob
// for the same concept (a 500 before commit is KnobErrorBeforeCommit on
// Stripe's route and on PayPal's).
const (
	KnobRateLimit Knob = iota + 1
	KnobJitter
	KnobErrorBeforeCommit
	KnobErrorAfterCommit
	KnobDropAfterCommit
	KnobRequiresAction
	KnobGatewayTimeout
	KnobGatewayErrorAfterCommit
	KnobPayPalPending
	KnobPayPalFailed
	KnobAdyenRefundFailed
	KnobAdyenRefundFailedLater
	KnobAdyenReversed
	KnobAdyenNotifyJitter
	KnobAdyenNotifyDuplicate
	KnobAdyenNotifyFail
)

// Draw returns a number in [0, 1) that depends only on the seed, the
// request's arrival number and the knob: no lock, no shared RNG state.
func Draw(seed, seq uint64, k Knob) float64 {
	x := seed ^ (seq * 0x9e3779b97f4a7c15) ^ (uint64(k) * 0xd1b54a32d192ed03)
	// splitmix64 finalizer: good avalanche from structured inputs.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}
