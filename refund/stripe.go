package refund

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	stripe "github.com/stripe/stripe-go/v76"
	stripecharge "github.com/stripe/stripe-go/v76/charge"
	striperefund "github.com/stripe/stripe-go/v76/refund"
)

// DefaultAPIBase is Stripe's API.
const DefaultAPIBase = "https://api.stripe.com"

// Stripe is the part of Stripe's API a refund run uses, through stripe-go.
// stripe-go's own retries are off: whether a call may be repeated, and with
// which key, is decided here, where the journal is.
type Stripe struct {
	refunds striperefund.Client
	charges stripecharge.Client
}

// NewStripe returns a client for the API at base (DefaultAPIBase when empty)
// that authenticates with key. conns bounds the connections kept open.
func NewStripe(base, key string, conns int) *Stripe {
	if base == "" {
		base = DefaultAPIBase
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = conns
	backend := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL:               stripe.String(base),
		HTTPClient:        &http.Client{Transport: noteTransport{transport}, Timeout: 80 * time.Second},
		MaxNetworkRetries: stripe.Int64(0),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	})
	return &Stripe{refunds: striperefund.Client{B: backend, Key: key}, charges: stripecharge.Client{B: backend, Key: key}}
}

// Create sends one refund request for it under the idempotency key of
// attempt. The refund's metadata names batch, item and attempt so the refund
// can be found and matched later. replayed reports a saved answer.
func (s *Stripe) Create(ctx context.Context, it *Item, attempt int) (r *stripe.Refund, replayed bool, err error) {
	params := &stripe.RefundParams{}
	note := new(answerNote)
	params.Context = context.WithValue(ctx, noteKey{}, note)
	params.SetIdempotencyKey(IdempotencyKey(it.Batch, it.Item, attempt))
	if it.Charge != "" {
		params.Charge = stripe.String(it.Charge)
	} else {
		params.PaymentIntent = stripe.String(it.PaymentIntent)
	}
	if it.Amount > 0 {
		params.Amount = stripe.Int64(it.Amount)
	}
	if it.Reason != "" {
		params.Reason = stripe.String(it.Reason)
	}
	for k, v := range it.Metadata {
		params.AddMetadata(k, v)
	}
	params.AddMetadata(MetaBatch, it.Batch)
	params.AddMetadata(MetaItem, it.Item)
	params.AddMetadata(MetaAttempt, strconv.Itoa(attempt))
	r, err = s.refunds.New(params)
	if err != nil {
		return nil, false, note.wrap(err)
	}
	replayed = r.LastResponse != nil && r.LastResponse.Header.Get("Idempotent-Replayed") == "true"
	return r, replayed, nil
}

// List returns every refund of the charge or payment intent of it, newest
// first, following pagination to the end.
func (s *Stripe) List(ctx context.Context, it *Item) ([]*stripe.Refund, error) {
	params := &stripe.RefundListParams{}
	note := new(answerNote)
	params.Context = context.WithValue(ctx, noteKey{}, note)
	params.Limit = stripe.Int64(100)
	if it.Charge != "" {
		params.Charge = stripe.String(it.Charge)
	} else {
		params.PaymentIntent = stripe.String(it.PaymentIntent)
	}
	var out []*stripe.Refund
	iter := s.refunds.List(params)
	for iter.Next() {
		out = append(out, iter.Refund())
	}
	if err := iter.Err(); err != nil {
		return nil, note.wrap(err)
	}
	return out, nil
}

// ChargesOf returns the ids of the charges of payment intent pi: a payment
// named by its intent in one plan line and by its charge in another is one
// payment, and its items must not run side by side.
func (s *Stripe) ChargesOf(ctx context.Context, pi string) ([]string, error) {
	params := &stripe.ChargeListParams{PaymentIntent: stripe.String(pi)}
	note := new(answerNote)
	params.Context = context.WithValue(ctx, noteKey{}, note)
	params.Limit = stripe.Int64(100)
	var ids []string
	iter := s.charges.List(params)
	for iter.Next() {
		ids = append(ids, iter.Charge().ID)
	}
	if err := iter.Err(); err != nil {
		return nil, note.wrap(err)
	}
	return ids, nil
}

// noteKey carries an *answerNote in a request's context.
type noteKey struct{}

// answerNote is what the headers of a call's answer say beyond what
// stripe-go keeps: why Stripe refused it for its rate.
type answerNote struct {
	mu              sync.Mutex
	status          int // the HTTP status of the last answer
	rateLimitReason string
}

// noteTransport fills the request's answerNote from the answer's headers.
type noteTransport struct{ next http.RoundTripper }

func (t noteTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	res, err := t.next.RoundTrip(req)
	if n, ok := req.Context().Value(noteKey{}).(*answerNote); ok && res != nil {
		n.mu.Lock()
		n.status = res.StatusCode
		n.rateLimitReason = res.Header.Get("Stripe-Rate-Limited-Reason")
		n.mu.Unlock()
	}
	return res, err
}

// wrap adds what the note knows to err: the budget a 429 named, or the
// status of an answer stripe-go could not read as Stripe's (a gateway's
// HTML page).
func (n *answerNote) wrap(err error) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var se *stripe.Error
	if !errors.As(err, &se) && n.status != 0 {
		return &UnreadableAnswerError{Status: n.status, Err: err}
	}
	if n.rateLimitReason == "" {
		return err
	}
	return &RateLimitedError{Reason: n.rateLimitReason, Err: err}
}

// UnreadableAnswerError is an answer that is not Stripe's JSON: a gateway or
// proxy in front of Stripe answered, so Stripe's own answer is unknown.
type UnreadableAnswerError struct {
	Status int
	Err    error
}

func (e *UnreadableAnswerError) Error() string { return e.Err.Error() }
func (e *UnreadableAnswerError) Unwrap() error { return e.Err }

// RateLimitedError is a 429 with the budget Stripe named in its
// Stripe-Rate-Limited-Reason header (global-rate, endpoint-rate...).
type RateLimitedError struct {
	Reason string
	Err    error
}

func (e *RateLimitedError) Error() string { return e.Err.Error() }
func (e *RateLimitedError) Unwrap() error { return e.Err }

// rateLimitReason is the budget a 429 named, "" when it named none.
func rateLimitReason(err error) string {
	var rl *RateLimitedError
	if errors.As(err, &rl) {
		return rl.Reason
	}
	return ""
}

// Matches reports whether r was made by refundkit for item of batch.
func Matches(r *stripe.Refund, batch, item string) bool {
	return r.Metadata[MetaBatch] == batch && r.Metadata[MetaItem] == item
}

// errorClass is what a failed call means for the item and the run.
type errorClass int

const (
	// classRetry: nothing was saved under the key (429, 409 in flight, 503,
	// lock timeout) or no answer came back: retry with the same key.
	classRetry errorClass = iota
	// classIndeterminate: Stripe saved an error answer (500) under the key;
	// a refund may or may not exist. Reconcile, then use a new key.
	classIndeterminate
	// classFinal: Stripe refused the refund; retrying cannot change that.
	classFinal
	// classFatal: the key is refused; no call of this run can succeed.
	classFatal
	// classKeyReused: Stripe holds another request (other parameters)
	// under the key: the plan changed after the key was first used.
	classKeyReused
	// classStopped: the run was stopped (signal) before an answer.
	classStopped
)

// classify sorts an error from stripe-go. It also returns the HTTP status
// of Stripe's own answer (0 when Stripe did not answer) and Stripe's error
// code or a short cause.
//
// Only Stripe's own 500 (an api_error body, with the Request-Id header
// Stripe puts on every answer) is saved under the key. A 502 or 504 comes
// from a gateway in front of Stripe, even with a Stripe-shaped body: the
// refund may still be under way, so it counts as no answer and is retried
// with the same key.
func classify(err error) (class errorClass, status int, code string) {
	if errors.Is(err, context.Canceled) {
		return classStopped, 0, "interrupted"
	}
	var ua *UnreadableAnswerError
	if errors.As(err, &ua) {
		// Not Stripe's answer: no answer from Stripe, whatever the status.
		return classRetry, 0, "gateway_" + strconv.Itoa(ua.Status)
	}
	var se *stripe.Error
	if !errors.As(err, &se) || se.HTTPStatusCode == 0 {
		return classRetry, 0, "network_error"
	}
	status, code = se.HTTPStatusCode, string(se.Code)
	if code == "" {
		code = string(se.Type)
	}
	switch {
	case status == http.StatusInternalServerError && se.Type == stripe.ErrorTypeAPI && se.RequestID != "":
		return classIndeterminate, status, code
	case status >= 500 && (se.RequestID == "" || status != http.StatusServiceUnavailable):
		return classRetry, 0, "gateway_" + strconv.Itoa(status)
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return classFatal, status, code
	case se.Type == stripe.ErrorTypeIdempotency && status == http.StatusBadRequest:
		return classKeyReused, status, "idempotency_key_reused"
	case status == http.StatusTooManyRequests, status == http.StatusConflict,
		status == http.StatusServiceUnavailable:
		return classRetry, status, code
	}
	return classFinal, status, code
}

// errorMessage is the text of a Stripe error without its JSON envelope.
func errorMessage(err error) string {
	var se *stripe.Error
	if errors.As(err, &se) && se.Msg != "" {
		return se.Msg
	}
	return err.Error()
}

// Cancel cancels a refund. Stripe cancels only refunds that still require
// action; it refuses the others (succeeded and pending refunds cannot be
// reversed through the API). The key, derived from the refund id, makes a
// repeated cancel harmless.
func (s *Stripe) Cancel(ctx context.Context, refundID string) (*stripe.Refund, error) {
	params := &stripe.RefundCancelParams{}
	params.Context = ctx
	params.SetIdempotencyKey("refundkit:cancel:" + refundID)
	return s.refunds.Cancel(refundID, params)
}
