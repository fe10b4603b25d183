package stripe

// Stripe's errors, classified: the only place that knows which of Stripe's
// answers may be repeated under the same key.

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"

	stripego "github.com/stripe/stripe-go/v76"

	"github.com/refundkit/refundkit/refund"
)

// noteKey carries an *answerNote in a request's context.
type noteKey struct{}

// answerNote is what an answer says beyond what stripe-go keeps.
type answerNote struct {
	mu              sync.Mutex
	status          int // the HTTP status of the last answer
	rateLimitReason string
}

// noted returns ctx carrying a new note for one call.
func noted(ctx context.Context) (context.Context, *answerNote) {
	n := new(answerNote)
	return context.WithValue(ctx, noteKey{}, n), n
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

// failure classifies err, from stripe-go, with what the note saw.
func (n *answerNote) failure(err error) *refund.Failure {
	n.mu.Lock()
	defer n.mu.Unlock()
	return classify(err, n.status, n.rateLimitReason)
}

// classify sorts an error from stripe-go; answered is the HTTP status of
// the answer (0: none), reason its Stripe-Rate-Limited-Reason. Only
// Stripe's own 500 (api_error, with a Request-Id) is saved under the key;
// a 502 or 504, or an answer that is not Stripe's, is a gateway's: no
// answer, retried with the same key.
func classify(err error, answered int, reason string) *refund.Failure {
	f := &refund.Failure{Class: refund.ClassRetry, Err: err, Message: err.Error()}
	var se *stripego.Error
	if !errors.As(err, &se) {
		f.Code = "network_error"
		if answered != 0 {
			f.Code = "gateway_" + strconv.Itoa(answered)
		}
		return f
	}
	if se.Msg != "" {
		f.Message = se.Msg
	}
	if se.HTTPStatusCode == 0 {
		f.Code = "network_error"
		return f
	}
	status, code := se.HTTPStatusCode, string(se.Code)
	if code == "" {
		code = string(se.Type)
	}
	f.Status, f.Code = status, code
	switch {
	case status == http.StatusInternalServerError && se.Type == stripego.ErrorTypeAPI && se.RequestID != "":
		f.Class = refund.ClassIndeterminate
	case status >= 500 && (se.RequestID == "" || status != http.StatusServiceUnavailable):
		f.Status, f.Code = 0, "gateway_"+strconv.Itoa(status)
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		f.Class = refund.ClassFatal
	case se.Type == stripego.ErrorTypeIdempotency && status == http.StatusBadRequest:
		f.Class, f.Code = refund.ClassKeyReused, "idempotency_key_reused"
	case status == http.StatusTooManyRequests:
		f.RateLimited = true
		f.AccountLimit = reason == "global-rate" || reason == "global-concurrency"
	case status == http.StatusConflict, status == http.StatusServiceUnavailable:
	default:
		f.Class = refund.ClassFinal
	}
	return f
}
