package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Faults are the misbehaviours the simulator injects, most as the share
// (0 to 1) of eligible requests they hit. A knob of a concept all APIs
// have hits all their routes; a Stripe, PayPal or Adyen one only its API's.
// Draws come from the seed and the arrival order, so a sequential client
// meets the same faults on every run.
type Faults struct {
	// Latency is added to every API request (a POST holds its key that
	// long); LatencyJitter adds up to this much more, drawn per request.
	Latency       time.Duration
	LatencyJitter time.Duration
	// RateLimitShare of API requests are answered 429 before anything
	// else, never saved under a key.
	RateLimitShare float64
	// ErrorBeforeCommitShare of refund creations are answered 500 without
	// the refund (Stripe saves it under the key; PayPal and Adyen do not).
	ErrorBeforeCommitShare float64
	// ErrorAfterCommitShare of refund creations make the refund, then
	// answer 500, saved under the key.
	ErrorAfterCommitShare float64
	// DropAfterCommitShare of refund creations make the refund and save
	// the success, then close the connection (it must be hijackable).
	DropAfterCommitShare float64
	// RequiresActionShare of new Stripe refunds are requires_action.
	RequiresActionShare float64
	// GatewayTimeoutShare of refund creations get the gateway's answer
	// (GatewayStatus, else 504) at once while the request goes on behind it
	// as it would have, holding its key; Settle waits for them.
	GatewayTimeoutShare float64
	// GatewayErrorAfterCommitShare of refund creations make the refund and
	// save the success, then get the gateway's answer (else 502).
	GatewayErrorAfterCommitShare float64
	// GatewayStatus is the gateway's status, 500 to 599 (0: 504 or 502).
	GatewayStatus int
	// GatewayStripeBody gives the gateway's answers a JSON body in the
	// API's own error shape instead of an HTML page; neither carries the
	// API's request id header, which is how a client tells them apart.
	GatewayStripeBody bool
	// RateLimits enforces Stripe's documented rate limits on its routes.
	RateLimits RateLimits

	// PayPalPendingShare of new PayPal refunds are PENDING (reason
	// ECHECK), settling PayPalPendingFor later (0: never);
	// PayPalFailedShare of those end FAILED.
	PayPalPendingShare float64
	PayPalPendingFor   time.Duration
	PayPalFailedShare  float64
	// PayPalTokenTTL is the life of new access tokens (0: nine hours).
	PayPalTokenTTL time.Duration

	// AdyenRefundFailedShare of new Adyen refunds are refused (REFUND
	// success "false"); AdyenRefundFailedLaterShare of the others are
	// followed by REFUND_FAILED, AdyenReversedShare by REFUNDED_REVERSED.
	AdyenRefundFailedShare      float64
	AdyenRefundFailedLaterShare float64
	AdyenReversedShare          float64
	// AdyenNotifyDelay is how long after the one before a notification is
	// due; AdyenNotifyJitter adds up to this much more, drawn.
	AdyenNotifyDelay  time.Duration
	AdyenNotifyJitter time.Duration
	// AdyenNotifyDuplicateShare of notifications are delivered twice.
	AdyenNotifyDuplicateShare float64
	// AdyenNotifyReorder sends a refund's later notification first.
	AdyenNotifyReorder bool
	// AdyenNotifyFailShare of deliveries count as failed, and are resent.
	AdyenNotifyFailShare float64
	// AdyenConflictStatus is the status of errorCode 704 (key in flight):
	// 422 (0) or 409.
	AdyenConflictStatus int
	// AdyenOverRefund422 refuses a refund past the refundable amount at
	// once (422, 137) instead of in its REFUND notification.
	AdyenOverRefund422 bool

	// StripePendingShare of new Stripe refunds are pending, settling
	// StripePendingFor later (0: never) to succeeded, or to failed
	// (expired_or_canceled_card) for StripeFailedShare of them.
	StripePendingShare float64
	StripePendingFor   time.Duration
	StripeFailedShare  float64
	// StripeEventsDelay is how long after its change an event is due;
	// StripeEventsJitter adds up to this much more, drawn.
	StripeEventsDelay  time.Duration
	StripeEventsJitter time.Duration
	// StripeEventsDuplicateShare of events are delivered twice.
	StripeEventsDuplicateShare float64
	// StripeEventsReorderShare of events are held back
	// StripeEventsReorderDelay more (0: 100ms), so later ones overtake them.
	StripeEventsReorderShare float64
	StripeEventsReorderDelay time.Duration
	// StripeEventsForgedShare of events get an extra delivery, posted once,
	// with a wrong signature or a tampered body: a receiver must refuse it.
	StripeEventsForgedShare float64
}

// StripeEventsReorderDelayDefault holds a reordered event back when
// StripeEventsReorderDelay is 0.
const StripeEventsReorderDelayDefault = 100 * time.Millisecond

// PayPalTokenTTLDefault is PayPal's token life (expires_in 32400).
const PayPalTokenTTLDefault = 9 * time.Hour

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
	if f.StripePendingFor < 0 || f.StripeEventsDelay < 0 || f.StripeEventsJitter < 0 || f.StripeEventsReorderDelay < 0 {
		return fmt.Errorf("stripe_pending_for %v, stripe_events_delay %v, stripe_events_jitter %v, stripe_events_reorder_delay %v: want durations of zero or more",
			f.StripePendingFor, f.StripeEventsDelay, f.StripeEventsJitter, f.StripeEventsReorderDelay)
	}
	v, w := reflect.ValueOf(*f), reflect.TypeFor[faultsJSON]()
	for i := range w.NumField() { // the *_share knobs, in their order
		name := w.Field(i).Tag.Get("json")
		if !strings.HasSuffix(name, "_share") {
			continue
		}
		if share := v.Field(i).Float(); !(share >= 0 && share <= 1) { // also rejects NaN
			return fmt.Errorf("%s %v: want a share between 0 and 1", name, share)
		}
	}
	if f.GatewayStatus != 0 && (f.GatewayStatus < 500 || f.GatewayStatus > 599) {
		return fmt.Errorf("gateway_status %d: want 0 (504 for timeouts, 502 after commit) or a status from 500 to 599", f.GatewayStatus)
	}
	return f.RateLimits.Validate()
}

// faultsJSON is Faults on the wire: snake_case names, durations as "20ms".
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

	StripePendingShare         float64      `json:"stripe_pending_share"`
	StripePendingFor           jsonDuration `json:"stripe_pending_for"`
	StripeFailedShare          float64      `json:"stripe_failed_share"`
	StripeEventsDelay          jsonDuration `json:"stripe_events_delay"`
	StripeEventsJitter         jsonDuration `json:"stripe_events_jitter"`
	StripeEventsDuplicateShare float64      `json:"stripe_events_duplicate_share"`
	StripeEventsReorderShare   float64      `json:"stripe_events_reorder_share"`
	StripeEventsReorderDelay   jsonDuration `json:"stripe_events_reorder_delay"`
	StripeEventsForgedShare    float64      `json:"stripe_events_forged_share"`
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

// jsonDuration is written "1.5s", and read from that or nanoseconds.
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
