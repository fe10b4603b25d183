package adyen

// Adyen's errors, classified: the only place that knows which of Adyen's
// answers may be repeated under the same Idempotency-Key.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/refundkit/refundkit/refund"
)

// apiError is Adyen's error body.
type apiError struct {
	Status       int    `json:"status"`
	ErrorCode    string `json:"errorCode"`
	Message      string `json:"message"`
	ErrorType    string `json:"errorType"`
	PSPReference string `json:"pspReference"`
}

// Adyen's error codes that refundkit decides by.
const (
	codeIdempotencyUnavailable = "703" // the idempotency store is unavailable: retry with the same key
	codeInProgress             = "704" // a request with this key is already processed or in progress
)

// transientHeader marks an error that may be retried with the same key.
const transientHeader = "Transient-Error"

// classify sorts an answer that is not a success, by Adyen's idempotency
// rules: retry with the same key only when the answer says
// transient-error: true, or on 703 (idempotency store unavailable); other
// errors are final for that key.
//
//   - An answer without Adyen's error body is a gateway's or a proxy's: no
//     answer from Adyen, the refund may be under way, so the call is
//     repeated under the same key (a request still in flight gets 704).
//   - 704, the first request with this key still in progress (422 or 409):
//     repeated under the same key until it is answered.
//   - 429: rate limited, never saved; repeated.
//   - 401 and 403 refuse the API key, or its rights on the merchant
//     account: the run halts.
//   - Adyen's own 5xx, not transient: the refund may or may not exist:
//     indeterminate. No look-up can tell, so a later run sends it again
//     under the same key while Adyen surely keeps it (Adyen replays the
//     first answer if it kept one, or makes the refund once); otherwise
//     the item waits for a notification naming it, or for a person.
//   - Any other 4xx refuses the refund: final.
func classify(status int, h http.Header, body []byte) *refund.Failure {
	var e apiError
	_ = json.Unmarshal(body, &e) // a body that says nothing leaves e empty
	code := e.ErrorCode
	if code == "" {
		code = "http_" + strconv.Itoa(status)
	}
	msg := e.Message
	if msg == "" {
		msg = "no error message"
	}
	f := &refund.Failure{Class: refund.ClassFinal, Status: status, Code: code, Message: msg}
	switch {
	case e.ErrorCode == "" && e.ErrorType == "" && status != http.StatusTooManyRequests:
		f.Class, f.Status, f.Code = refund.ClassRetry, 0, "gateway_"+strconv.Itoa(status)
		f.Message = fmt.Sprintf("%d from something in front of Adyen (no Adyen error body)", status)
	case strings.EqualFold(h.Get(transientHeader), "true"), e.ErrorCode == codeIdempotencyUnavailable, e.ErrorCode == codeInProgress:
		f.Class, f.Status = refund.ClassRetry, 0
	case status == http.StatusTooManyRequests:
		f.Class, f.Status, f.RateLimited, f.AccountLimit = refund.ClassRetry, 0, true, true
	case status == http.StatusUnauthorized, status == http.StatusForbidden:
		f.Class = refund.ClassFatal
	case status >= 500:
		f.Class = refund.ClassIndeterminate
	}
	if e.PSPReference != "" {
		f.Message += " (pspReference " + e.PSPReference + ")"
	}
	f.Err = fmt.Errorf("adyen: %d %s: %s", status, f.Code, f.Message)
	return f
}

// notesFailed is a notification store that could not be read: no answer,
// asked again (a file being rotated, a database restarting). A store that
// holds a line that does not verify keeps failing, and the run says so.
func notesFailed(err error) *refund.Failure {
	return &refund.Failure{Class: refund.ClassRetry, Code: "notifications_unreadable", Message: err.Error(),
		Err: fmt.Errorf("adyen: read the notifications: %w", err)}
}
