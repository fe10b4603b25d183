package sim

import (
	"fmt"
	"math"
	"strconv"
)

// Stripe's documented rate limits (https://docs.stripe.com/rate-limits):
// per account, 100 requests a second in live mode and 25 in test mode (a
// sandbox) for all endpoints together, and 25 a second for each endpoint
// unless its documentation says otherwise (the refund and charge endpoints
// do not). An endpoint is a method and a route: POST /v1/refunds and GET
// /v1/refunds are limited separately, and GET /v1/refunds/{id} counts every
// id against one limit.
const (
	StripeLiveGlobalRate = 100
	StripeTestGlobalRate = 25
	StripeEndpointRate   = 25
)

// Rate-limit modes: whose limits the simulator's keys get. It accepts only
// test-mode keys, which Stripe gives test-mode limits; "live" gives them
// live-mode limits for a run that measures pacing against those.
const (
	RateLimitsOff  = "off"
	RateLimitsTest = "test"
	RateLimitsLive = "live"
)

// RateLimits are Stripe's rate limits enforced as token buckets: one for
// the account (global) and one per endpoint, each refilled at its rate and
// holding at most its burst. A request takes a token from both or, if
// either is empty, from neither and is answered 429 rate_limit with a
// Stripe-Rate-Limited-Reason header (global-rate when both are empty).
// Such an answer is never saved under an idempotency key. A request the
// simulator has no endpoint for takes from the global bucket only; control
// endpoints (/_sim/) and requests without a valid key are never limited.
//
// The zero value enforces nothing, so tests and benchmarks that do not ask
// for limits keep their behaviour. Zero numbers take Stripe's documented
// ones for the mode; Stripe does not document bursts, so a bucket holds one
// second's worth (its rate, rounded up) unless told otherwise.
type RateLimits struct {
	// Mode is "test" (25 requests/s for the account) or "live" (100/s);
	// "" or "off" enforces no limit and allows no other field.
	Mode string `json:"mode"`
	// GlobalRate is the account's requests per second over all endpoints;
	// GlobalBurst, how many it may send at once after a pause.
	GlobalRate  float64 `json:"global_rate"`
	GlobalBurst int     `json:"global_burst"`
	// EndpointRate is the requests per second of each endpoint (25 in both
	// modes); EndpointBurst, how many one endpoint takes at once.
	EndpointRate  float64 `json:"endpoint_rate"`
	EndpointBurst int     `json:"endpoint_burst"`
}

// Enabled reports whether the limits are enforced.
func (l RateLimits) Enabled() bool { return l.Mode != "" && l.Mode != RateLimitsOff }

// Effective returns the limits with Stripe's numbers for the mode filled in
// where l leaves them zero; the zero value when l enforces nothing.
func (l RateLimits) Effective() RateLimits {
	if !l.Enabled() {
		return RateLimits{}
	}
	e := l
	if e.GlobalRate == 0 {
		e.GlobalRate = StripeTestGlobalRate
		if e.Mode == RateLimitsLive {
			e.GlobalRate = StripeLiveGlobalRate
		}
	}
	if e.EndpointRate == 0 {
		e.EndpointRate = StripeEndpointRate
	}
	if e.GlobalBurst == 0 {
		e.GlobalBurst = defaultBurst(e.GlobalRate)
	}
	if e.EndpointBurst == 0 {
		e.EndpointBurst = defaultBurst(e.EndpointRate)
	}
	return e
}

// defaultBurst is one second's worth of a rate, and at least one request.
func defaultBurst(r float64) int {
	return int(max(1, math.Ceil(r)))
}

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
	for _, r := range []struct {
		name string
		v    float64
	}{{"global_rate", l.GlobalRate}, {"endpoint_rate", l.EndpointRate}} {
		if !(r.v >= 0) || math.IsInf(r.v, 0) { // also rejects NaN
			return fmt.Errorf("rate_limits.%s %v: want requests per second, or 0 for Stripe's", r.name, r.v)
		}
	}
	for _, b := range []struct {
		name string
		v    int
	}{{"global_burst", l.GlobalBurst}, {"endpoint_burst", l.EndpointBurst}} {
		if b.v < 0 {
			return fmt.Errorf("rate_limits.%s %d: want a number of requests, or 0 for one second's worth", b.name, b.v)
		}
	}
	return nil
}
