package adyen

// Adyen's errors: which answers may be repeated under the same key.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/provider/httpx"
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

var provider = httpx.Provider{Name: "adyen", Title: "Adyen", NotOwn: "no Adyen error body", RefName: "pspReference"}

// classify sorts an answer that is not a success by Adyen's idempotency
// rules: without Adyen's error body (but a 429) it is not Adyen's. Adyen's
// own 5xx is indeterminate: no look-up can tell whether the refund exists.
func classify(status int, h http.Header, body []byte) *refund.Failure {
	var e apiError
	_ = json.Unmarshal(body, &e) // a body that says nothing leaves e empty
	own := e.ErrorCode != "" || e.ErrorType != "" || status == http.StatusTooManyRequests
	return provider.Failure(status, own, e.ErrorCode, e.Message, e.PSPReference, func(f *refund.Failure) bool {
		switch {
		case strings.EqualFold(h.Get(transientHeader), "true"), e.ErrorCode == codeIdempotencyUnavailable, e.ErrorCode == codeInProgress:
			f.Class, f.Status = refund.ClassRetry, 0
		case status == http.StatusTooManyRequests:
			f.Status = 0 // not saved under the key; rate limited, as for any provider
			return false
		case status >= 500:
			f.Class = refund.ClassIndeterminate
		default:
			return false
		}
		return true
	})
}

// notesFailed is a notification store that could not be read: asked again.
func notesFailed(err error) *refund.Failure {
	return &refund.Failure{Class: refund.ClassRetry, Code: "notifications_unreadable", Message: err.Error(),
		Err: fmt.Errorf("adyen: read the notifications: %w", err)}
}

// Why a request is not sent.
var (
	errNoPayment = errors.New("adyen: the item names no psp_reference")
	errNoAmount  = errors.New("adyen: a refund needs the item's amount and currency (Adyen has no \"refund the rest\")")
	errNoCancel  = errors.New("adyen: a refund Adyen received cannot be canceled through its API")
)
