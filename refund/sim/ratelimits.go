package sim

import (
	"cmp"
	"fmt"
	"math"
	"strconv"
)

// Stripe's documented rate limits (docs.stripe.com/rate-limits), per
// second: 100 (live) or 25 (test) for the account, 25 for each endpoint, a
// method and a route (every id of GET /v1/refunds/{id} counts as one).
const (
	StripeLiveGlobalRate = 100
	StripeTestGlobalRate = 25
	StripeEndpointRate   = 25
)

// Rate-limit modes: whose limits the test-mode keys get.
const (
	RateLimitsOff  = "off"
	RateLimitsTest = "test"
	RateLimitsLive = "live"
)

// RateLimits are Stripe's rate limits as token buckets, one for the account
// and one per endpoint: a request takes a token from both, or from neither
// and gets 429 rate_limit with Stripe-Rate-Limited-Reason, never saved
// under a key. Unknown routes take from the account's only; control
// endpoints and requests without a valid key are never limited. The zero
// value enforces nothing; zero numbers are Stripe's for the mode, and a
// burst one second's worth (Stripe documents none).
type RateLimits struct {
	// Mode is "test" or "live"; "" or "off" enforces nothing.
	Mode string `json:"mode"`
	// GlobalRate is the account's requests per second; GlobalBurst, its burst.
	GlobalRate  float64 `json:"global_rate"`
	GlobalBurst int     `json:"global_burst"`
	// EndpointRate and EndpointBurst are each endpoint's.
	EndpointRate  float64 `json:"endpoint_rate"`
	EndpointBurst int     `json:"endpoint_burst"`
}

// Enabled reports whether the limits are enforced.
func (l RateLimits) Enabled() bool { return l.Mode != "" && l.Mode != RateLimitsOff }

// Effective is l with Stripe's numbers where l has zeros.
func (l RateLimits) Effective() RateLimits {
	if !l.Enabled() {
		return RateLimits{}
	}
	global := float64(StripeTestGlobalRate)
	if l.Mode == RateLimitsLive {
		global = StripeLiveGlobalRate
	}
	l.GlobalRate = cmp.Or(l.GlobalRate, global)
	l.EndpointRate = cmp.Or(l.EndpointRate, StripeEndpointRate)
	l.GlobalBurst = cmp.Or(l.GlobalBurst, defaultBurst(l.GlobalRate))
	l.EndpointBurst = cmp.Or(l.EndpointBurst, defaultBurst(l.EndpointRate))
	return l
}

// defaultBurst is one second's worth of a rate, and at least one request.
func defaultBurst(r float64) int { return int(max(1, math.Ceil(r))) }

// String describes the limits in force for people ("off" when none).
func (l RateLimits) String() string {
	if !l.Enabled() {
		return "off"
	}
	e := l.Effective()
	return fmt.Sprintf("%s mode, %s requests/s for the account (burst %d), %s per endpoint (burst %d)",
		e.Mode, strconv.FormatFloat(e.GlobalRate, 'g', -1, 64), e.GlobalBurst, strconv.FormatFloat(e.EndpointRate, 'g', -1, 64), e.EndpointBurst)
}

// Validate reports the first field out of range, if any.
func (l RateLimits) Validate() error {
	switch l.Mode {
	case "", RateLimitsOff:
		if l != (RateLimits{Mode: l.Mode}) {
			return fmt.Errorf("rate_limits: numbers without a mode: want mode %q or %q", RateLimitsTest, RateLimitsLive)
		}
		return nil
	case RateLimitsTest, RateLimitsLive:
	default:
		return fmt.Errorf("rate_limits.mode %q: want %q, %q or %q", l.Mode, RateLimitsTest, RateLimitsLive, RateLimitsOff)
	}
	for i, v := range []float64{l.GlobalRate, l.EndpointRate} {
		if !(v >= 0) || math.IsInf(v, 0) { // also rejects NaN
			return fmt.Errorf("rate_limits.%s %v: want requests per second, or 0 for Stripe's", [...]string{"global_rate", "endpoint_rate"}[i], v)
		}
	}
	for i, v := range []int{l.GlobalBurst, l.EndpointBurst} {
		if v < 0 {
			return fmt.Errorf("rate_limits.%s %d: want a number of requests, or 0 for one second's worth", [...]string{"global_burst", "endpoint_burst"}[i], v)
		}
	}
	return nil
}
