package stripesim

import "github.com/refundkit/refundkit/refund/sim"

// The knobs and rate limits are the core's; these names keep stripesim's API.
type (
	// Faults are the fault knobs (sim.Faults).
	Faults = sim.Faults
	// RateLimits are Stripe's rate limits as token buckets (sim.RateLimits).
	RateLimits = sim.RateLimits
)

// Rate-limit modes and Stripe's documented rates (sim's).
const (
	RateLimitsOff        = sim.RateLimitsOff
	RateLimitsTest       = sim.RateLimitsTest
	RateLimitsLive       = sim.RateLimitsLive
	StripeLiveGlobalRate = sim.StripeLiveGlobalRate
	StripeTestGlobalRate = sim.StripeTestGlobalRate
	StripeEndpointRate   = sim.StripeEndpointRate
)
