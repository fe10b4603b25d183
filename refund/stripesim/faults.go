package stripesim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Faults are the misbehaviours the simulator injects, each as the share of
// eligible requests (0 to 1) it hits. Draws come from Config.Seed and the
// order requests arrive in, so a sequential client sees the same faults on
// every run.
type Faults struct {
	// Latency is added to every API request; a POST holds its idempotency
	// key for that long, so a concurrent retry with the key gets a 409.
	Latency time.Duration
	// LatencyJitter adds up to this much more, drawn per request.
	LatencyJitter time.Duration
	// RateLimitShare of API requests are answered 429 rate_limit before
	// anything else happens; the answer is never saved under a key.
	RateLimitShare float64
	// ErrorBeforeCommitShare of refund creations are answered 500 api_error
	// without creating the refund; the 500 is saved under the key.
	ErrorBeforeCommitShare float64
	// ErrorAfterCommitShare of refund creations create the refund, then
	// answer 500 api_error; the 500 is saved under the key.
	ErrorAfterCommitShare float64
	// DropAfterCommitShare of refund creations create the refund and save the
	// success under the key, then close the connection without answering
	// (the server must allow hijacking: HTTP/1.x, as Start and
	// httptest.NewServer serve).
	DropAfterCommitShare float64
	// RequiresActionShare of new refunds get status requires_action instead
	// of succeeded (they still hold their amount until canceled).
	RequiresActionShare float64
	// GatewayTimeoutShare of refund creations get a gateway's answer
	// (GatewayStatus, else 504) at once while the request goes on behind it
	// exactly as it would have: it holds its key for its latency, then
	// commits and saves its answer under the key. A retry with the key
	// meanwhile gets 409, after it the saved answer replayed. Close and
	// Shutdown wait for such requests; Settle waits for them alone.
	GatewayTimeoutShare float64
	// GatewayErrorAfterCommitShare of refund creations create the refund
	// and save the success under the key, then get a gateway's answer
	// (GatewayStatus, else 502) instead of it.
	GatewayErrorAfterCommitShare float64
	// GatewayStatus is the status of the gateway's answers, 500 to 599;
	// 0 gives 504 for timeouts and 502 for errors after commit.
	GatewayStatus int
	// GatewayStripeBody gives the gateway's answers a Stripe-shaped
	// api_error JSON body, as some gateways forward or forge; otherwise
	// they carry an HTML page. Neither carries a Request-Id header: only
	// Stripe's own answers do, and that is how a client tells them apart.
	GatewayStripeBody bool
	// RateLimits enforces Stripe's documented rate limits as token buckets
	// (off in the zero value). Unlike RateLimitShare, which refuses a share
	// of requests at random, the buckets refuse exactly what Stripe's limits
	// would, with the Stripe-Rate-Limited-Reason header. The buckets start
	// full and keep their tokens across SetFaults calls that leave the
	// limits as they are.
	RateLimits RateLimits
}

// gatewayStatus is the status a gateway answers with, def unless
// GatewayStatus says otherwise.
func (f *Faults) gatewayStatus(def int) int {
	if f.GatewayStatus != 0 {
		return f.GatewayStatus
	}
	return def
}

// Validate reports the first knob out of range, if any.
func (f *Faults) Validate() error {
	if f.Latency < 0 || f.LatencyJitter < 0 {
		return fmt.Errorf("latency %v, jitter %v: want durations of zero or more", f.Latency, f.LatencyJitter)
	}
	for _, s := range []struct {
		name  string
		share float64
	}{
		{"rate_limit_share", f.RateLimitShare},
		{"error_before_commit_share", f.ErrorBeforeCommitShare},
		{"error_after_commit_share", f.ErrorAfterCommitShare},
		{"drop_after_commit_share", f.DropAfterCommitShare},
		{"requires_action_share", f.RequiresActionShare},
		{"gateway_timeout_share", f.GatewayTimeoutShare},
		{"gateway_error_after_commit_share", f.GatewayErrorAfterCommitShare},
	} {
		if !(s.share >= 0 && s.share <= 1) { // also rejects NaN
			return fmt.Errorf("%s %v: want a share between 0 and 1", s.name, s.share)
		}
	}
	if f.GatewayStatus != 0 && (f.GatewayStatus < 500 || f.GatewayStatus > 599) {
		return fmt.Errorf("gateway_status %d: want 0 (504 for timeouts, 502 after commit) or a status from 500 to 599", f.GatewayStatus)
	}
	return f.RateLimits.Validate()
}

// faultsJSON is the wire form of Faults for the control endpoint: snake_case
// names and durations as Go duration strings ("20ms").
type faultsJSON struct {
	Latency                jsonDuration `json:"latency"`
	LatencyJitter          jsonDuration `json:"latency_jitter"`
	RateLimitShare         float64      `json:"rate_limit_share"`
	ErrorBeforeCommitShare float64      `json:"error_before_commit_share"`
	ErrorAfterCommitShare  float64      `json:"error_after_commit_share"`
	DropAfterCommitShare   float64      `json:"drop_after_commit_share"`
	RequiresActionShare    float64      `json:"requires_action_share"`

	GatewayTimeoutShare          float64 `json:"gateway_timeout_share"`
	GatewayErrorAfterCommitShare float64 `json:"gateway_error_after_commit_share"`
	GatewayStatus                int     `json:"gateway_status"`
	GatewayStripeBody            bool    `json:"gateway_stripe_body"`

	RateLimits RateLimits `json:"rate_limits"`
}

// MarshalJSON writes the faults with snake_case names and duration strings.
func (f Faults) MarshalJSON() ([]byte, error) {
	return json.Marshal(faultsJSON{
		Latency:                jsonDuration(f.Latency),
		LatencyJitter:          jsonDuration(f.LatencyJitter),
		RateLimitShare:         f.RateLimitShare,
		ErrorBeforeCommitShare: f.ErrorBeforeCommitShare,
		ErrorAfterCommitShare:  f.ErrorAfterCommitShare,
		DropAfterCommitShare:   f.DropAfterCommitShare,
		RequiresActionShare:    f.RequiresActionShare,

		GatewayTimeoutShare:          f.GatewayTimeoutShare,
		GatewayErrorAfterCommitShare: f.GatewayErrorAfterCommitShare,
		GatewayStatus:                f.GatewayStatus,
		GatewayStripeBody:            f.GatewayStripeBody,

		RateLimits: f.RateLimits,
	})
}

// UnmarshalJSON reads what MarshalJSON writes; absent knobs are zero and
// unknown names are an error, so a typo cannot silently disable a fault.
func (f *Faults) UnmarshalJSON(b []byte) error {
	var w faultsJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return err
	}
	*f = Faults{
		Latency:                time.Duration(w.Latency),
		LatencyJitter:          time.Duration(w.LatencyJitter),
		RateLimitShare:         w.RateLimitShare,
		ErrorBeforeCommitShare: w.ErrorBeforeCommitShare,
		ErrorAfterCommitShare:  w.ErrorAfterCommitShare,
		DropAfterCommitShare:   w.DropAfterCommitShare,
		RequiresActionShare:    w.RequiresActionShare,

		GatewayTimeoutShare:          w.GatewayTimeoutShare,
		GatewayErrorAfterCommitShare: w.GatewayErrorAfterCommitShare,
		GatewayStatus:                w.GatewayStatus,
		GatewayStripeBody:            w.GatewayStripeBody,

		RateLimits: w.RateLimits,
	}
	return nil
}

// jsonDuration is a duration written as "1.5s" and read from such a string
// or from a number of nanoseconds.
type jsonDuration time.Duration

func (d jsonDuration) MarshalJSON() ([]byte, error) {
	return strconv.AppendQuote(nil, time.Duration(d).String()), nil
}

func (d *jsonDuration) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		*d = jsonDuration(v)
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("duration %s: want a string such as \"20ms\" or nanoseconds", b)
	}
	*d = jsonDuration(n)
	return nil
}

// knob names one independent draw made for a request. New knobs go at the
// end: a knob's number is part of its draws, so renumbering one would change
// the faults every recorded seed gives.
type knob uint64

const (
	knobRateLimit knob = iota + 1
	knobJitter
	knobErrorBeforeCommit
	knobErrorAfterCommit
	knobDropAfterCommit
	knobRequiresAction
	knobGatewayTimeout
	knobGatewayErrorAfterCommit
)

// draw returns a number in [0, 1) that depends only on the seed, the
// request's arrival number and the knob: no lock, no shared RNG state.
func draw(seed, seq uint64, k knob) float64 {
	x := seed ^ (seq * 0x9e3779b97f4a7c15) ^ (uint64(k) * 0xd1b54a32d192ed03)
	// splitmix64 finalizer: good avalanche from structured inputs.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}

// pause waits out the injected latency of request seq.
func (s *Server) pause(f *Faults, seq uint64) {
	d := f.Latency
	if f.LatencyJitter > 0 {
		d += time.Duration(draw(s.seed, seq, knobJitter) * float64(f.LatencyJitter))
	}
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-s.closing:
		t.Stop()
	}
}

// writeGatewayAnswer writes what a gateway in front of Stripe answers on
// its own: none of Stripe's headers (no Request-Id, no Idempotency-Key),
// and an HTML page unless stripeBody asks for Stripe's api_error shape.
func writeGatewayAnswer(w http.ResponseWriter, status int, stripeBody bool) {
	text := http.StatusText(status)
	if text == "" {
		text = "Server Error"
	}
	var body []byte
	h := w.Header()
	if stripeBody {
		body = errorBody(apiError{Type: typeAPI, Message: fmt.Sprintf("An error occurred at the gateway in front of the API (%d %s).", status, text)})
		h["Content-Type"] = []string{"application/json"}
	} else {
		body = fmt.Appendf(nil, "<html>\r\n<head><title>%d %s</title></head>\r\n<body>\r\n<center><h1>%d %s</h1></center>\r\n<hr><center>gateway</center>\r\n</body>\r\n</html>\r\n", status, text, status, text)
		h["Content-Type"] = []string{"text/html"}
	}
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(status)
	w.Write(body)
}

// dropConnection closes the connection without a byte of answer, as a
// load balancer or a network failure would after the work was done.
func dropConnection(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		// Not hijackable (HTTP/2, a recorder): abort the handler instead.
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	conn.Close()
}
