package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"time"
)

// Faults are the misbehaviours the simulator injects, each as the share of
// eligible requests (0 to 1) it hits. One set of knobs serves every API:
// a knob that names a concept of all (latency, 429, 500 before or after
// commit, dropped answers, the gateway) hits Stripe's, PayPal's and Adyen's
// routes alike; the Stripe, PayPal or Adyen ones hit only theirs. Draws come from the seed
// and the order requests arrive in, so a sequential client sees the same
// faults on every run.
type Faults struct {
	// Latency is added to every API request; a POST holds its idempotency
	// key (PayPal-Request-Id) for that long, so a concurrent retry with the
	// key gets a 409.
	Latency time.Duration
	// LatencyJitter adds up to this much more, drawn per request.
	LatencyJitter time.Duration
	// RateLimitShare of API requests are answered 429 (Stripe's
	// rate_limit, PayPal's RATE_LIMIT_REACHED) before anything else
	// happens; the answer is never saved under a key.
	RateLimitShare float64
	// ErrorBeforeCommitShare of refund creations are answered 500 without
	// creating the refund. Stripe saves the 500 under the key; PayPal does
	// not (its docs say a 5xx may be retried with the request id), so a
	// retry makes the refund.
	ErrorBeforeCommitShare float64
	// ErrorAfterCommitShare of refund creations create the refund, then
	// answer 500; the 500 is saved under the key (PayPal: a retry with the
	// request id gets the refund's latest status).
	ErrorAfterCommitShare float64
	// DropAfterCommitShare of refund creations create the refund and save the
	// success under the key, then close the connection without answering
	// (the server must allow hijacking: HTTP/1.x, as Start and
	// httptest.NewServer serve).
	DropAfterCommitShare float64
	// RequiresActionShare of new Stripe refunds get status requires_action
	// instead of succeeded (they still hold their amount until canceled).
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
	// GatewayStripeBody gives the gateway's answers a JSON error body in
	// the API's own shape (Stripe's api_error, PayPal's
	// INTERNAL_SERVER_ERROR), as some gateways forward or forge; otherwise
	// they carry an HTML page. Neither carries the API's request id header
	// (Request-Id, Paypal-Debug-Id): only the API's own answers do, and that
	// is how a client tells them apart.
	GatewayStripeBody bool
	// RateLimits enforces Stripe's documented rate limits as token buckets
	// (off in the zero value) on Stripe's routes; PayPal publishes no
	// numbers, so its routes are never limited by them.
	RateLimits RateLimits

	// PayPalPendingShare of new PayPal refunds are PENDING (status_details
	// reason ECHECK) instead of COMPLETED; they settle PayPalPendingFor
	// after they were made.
	PayPalPendingShare float64
	// PayPalPendingFor is how long a PENDING refund stays so; 0 keeps it
	// PENDING for good (an eCheck that never clears while the run lasts).
	PayPalPendingFor time.Duration
	// PayPalFailedShare of PENDING refunds end FAILED instead of COMPLETED,
	// giving their amount back to the capture.
	PayPalFailedShare float64
	// PayPalTokenTTL is the lifetime of new access tokens; 0 is PayPal's
	// usual nine hours. A short one makes clients renew tokens mid-run.
	PayPalTokenTTL time.Duration

	// AdyenRefundFailedShare of new Adyen refunds are refused: their REFUND
	// notification says success "false" and they hold nothing.
	AdyenRefundFailedShare float64
	// AdyenRefundFailedLaterShare of the others succeed (REFUND "true"),
	// then fail: a REFUND_FAILED notification follows (the bank returned
	// the money), and the amount is refundable again.
	AdyenRefundFailedLaterShare float64
	// AdyenReversedShare of the others succeed, then come back: a
	// REFUNDED_REVERSED notification follows.
	AdyenReversedShare float64
	// AdyenNotifyDelay is how long after a refund is made its first
	// notification is due (each later one as long after the one before);
	// AdyenNotifyJitter adds up to this much more, drawn per notification.
	AdyenNotifyDelay  time.Duration
	AdyenNotifyJitter time.Duration
	// AdyenNotifyDuplicateShare of notifications are delivered twice, as
	// Adyen may: the same item, signed alike.
	AdyenNotifyDuplicateShare float64
	// AdyenNotifyReorder sends a refund's later notification
	// (REFUND_FAILED, REFUNDED_REVERSED) before its REFUND.
	AdyenNotifyReorder bool
	// AdyenNotifyFailShare of delivery attempts count as failed whatever
	// the receiver answered, so Adyen sends the notification again.
	AdyenNotifyFailShare float64
	// AdyenConflictStatus is the status of the 704 answer to a request
	// whose Idempotency-Key is still in flight: 422 (when 0) or 409, the
	// two Adyen documents.
	AdyenConflictStatus int
	// AdyenOverRefund422 refuses a refund past the payment's refundable
	// amount at once, 422 errorCode 137; otherwise Adyen's way: the
	// refund is received (201) and its REFUND notification says success
	// "false", reason "Insufficient balance on payment".
	AdyenOverRefund422 bool
}

// PayPalTokenTTLDefault is an access token's life when PayPalTokenTTL is 0:
// PayPal's tokens last about nine hours (expires_in 32400).
const PayPalTokenTTLDefault = 9 * time.Hour

// GatewayStatusOr is the status a gateway answers with, def unless
// GatewayStatus says otherwise.
func (f *Faults) GatewayStatusOr(def int) int {
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
	if f.AdyenNotifyDelay < 0 || f.AdyenNotifyJitter < 0 {
		return fmt.Errorf("adyen_notify_delay %v, adyen_notify_jitter %v: want durations of zero or more", f.AdyenNotifyDelay, f.AdyenNotifyJitter)
	}
	if f.AdyenConflictStatus != 0 && f.AdyenConflictStatus != 409 && f.AdyenConflictStatus != 422 {
		return fmt.Errorf("adyen_conflict_status %d: want 422 (or 0) or 409, the statuses Adyen documents for errorCode 704", f.AdyenConflictStatus)
	}
	if f.PayPalPendingFor < 0 || f.PayPalTokenTTL < 0 {
		return fmt.Errorf("paypal_pending_for %v, paypal_token_ttl %v: want durations of zero or more", f.PayPalPendingFor, f.PayPalTokenTTL)
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
		{"paypal_pending_share", f.PayPalPendingShare},
		{"paypal_failed_share", f.PayPalFailedShare},
		{"adyen_refund_failed_share", f.AdyenRefundFailedShare},
		{"adyen_refund_failed_later_share", f.AdyenRefundFailedLaterShare},
		{"adyen_reversed_share", f.AdyenReversedShare},
		{"adyen_notify_duplicate_share", f.AdyenNotifyDuplicateShare},
		{"adyen_notify_fail_share", f.AdyenNotifyFailShare},
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

	PayPalPendingShare float64      `json:"paypal_pending_share"`
	PayPalPendingFor   jsonDuration `json:"paypal_pending_for"`
	PayPalFailedShare  float64      `json:"paypal_failed_share"`
	PayPalTokenTTL     jsonDuration `json:"paypal_token_ttl"`

	AdyenRefundFailedShare      float64      `json:"adyen_refund_failed_share"`
	AdyenRefundFailedLaterShare float64      `json:"adyen_refund_failed_later_share"`
	AdyenReversedShare          float64      `json:"adyen_reversed_share"`
	AdyenNotifyDelay            jsonDuration `json:"adyen_notify_delay"`
	AdyenNotifyJitter           jsonDuration `json:"adyen_notify_jitter"`
	AdyenNotifyDuplicateShare   float64      `json:"adyen_notify_duplicate_share"`
	AdyenNotifyReorder          bool         `json:"adyen_notify_reorder"`
	AdyenNotifyFailShare        float64      `json:"adyen_notify_fail_share"`
	AdyenConflictStatus         int          `json:"adyen_conflict_status"`
	AdyenOverRefund422          bool         `json:"adyen_over_refund_422"`
}

// MarshalJSON writes the faults with snake_case names and duration strings.
func (f Faults) MarshalJSON() ([]byte, error) {
	var w faultsJSON
	copyFields(reflect.ValueOf(&w).Elem(), reflect.ValueOf(f))
	return json.Marshal(w)
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
	*f = Faults{}
	copyFields(reflect.ValueOf(f).Elem(), reflect.ValueOf(w))
	return nil
}

// copyFields copies field i of from to field i of to, for Faults and
// faultsJSON, which list the same fields in the same order.
func copyFields(to, from reflect.Value) {
	for i := range to.NumField() {
		to.Field(i).Set(from.Field(i).Convert(to.Field(i).Type()))
	}
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
