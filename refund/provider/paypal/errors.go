package paypal

// PayPal's errors, classified: the only place that knows which of PayPal's
// answers may be repeated under the same PayPal-Request-Id.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/provider/paypal/wire"
)

// apiError is PayPal's error body: the REST shape (name, message, details
// with an issue each) and the OAuth2 shape (error, error_description).
type apiError struct {
	Name             string `json:"name"`
	Message          string `json:"message"`
	DebugID          string `json:"debug_id"`
	Details          []struct{ Issue, Description string }
	Error            string `json:"error"`
	ErrorDescription string `json:"error_description"`
}

// classify sorts an answer that is not a success. status is its HTTP
// status, debugID its Paypal-Debug-Id header, body what it said; token is
// true for an answer of the token endpoint.
//
//   - Without a debug id the answer is a gateway's or a proxy's, even in
//     PayPal's shape: no answer from PayPal; the refund may be under way, so
//     the call is repeated under the same request id.
//   - PayPal's own 5xx is repeated too: PayPal asks callers to retry
//     idempotent calls that fail with 5xx for as long as it keeps the id,
//     and answers a retry with the latest status of the first request, so
//     nothing that a retry could duplicate is decided by the 500. Its Status
//     is 0 (no answer): a journaled 500 would burn a key that is still good,
//     and a PayPal that answers 5xx call after call halts the run as an
//     unreachable one does.
//   - 429 RATE_LIMIT_REACHED and 409 (the first request with this id is
//     still in progress) are repeated under the same id.
//   - 401 and 403 refuse the credentials (the client renews its token once
//     before it gives up), as does any refusal of the token endpoint.
//   - 422 is PayPal's business refusal, its code the issue it names
//     (CAPTURE_FULLY_REFUNDED...); 400 and 404 refuse the request itself:
//     final.
func classify(status int, debugID string, body []byte, token bool) *refund.Failure {
	var e apiError
	_ = json.Unmarshal(body, &e) // a body that says nothing leaves e empty
	code, msg := e.code(status), e.message()
	f := &refund.Failure{Class: refund.ClassFinal, Status: status, Code: code, Message: msg}
	switch {
	case debugID == "":
		f.Class, f.Status, f.Code = refund.ClassRetry, 0, "gateway_"+strconv.Itoa(status)
		f.Message = fmt.Sprintf("%d from something in front of PayPal (no %s)", status, wire.DebugIDHeader)
	case status >= 500:
		f.Class, f.Status = refund.ClassRetry, 0
	case status == http.StatusTooManyRequests:
		f.Class, f.RateLimited, f.AccountLimit = refund.ClassRetry, true, true
	case status == http.StatusConflict:
		f.Class = refund.ClassRetry
	case status == http.StatusUnauthorized, status == http.StatusForbidden, token:
		f.Class = refund.ClassFatal
	}
	if debugID != "" {
		f.Message += " (debug id " + debugID + ")"
	}
	f.Err = fmt.Errorf("paypal: %d %s: %s", status, f.Code, f.Message)
	return f
}

// code is the error's most precise name: the first issue of a 422 (or of
// any answer that names one), else its name, else the OAuth2 error.
func (e *apiError) code(status int) string {
	for _, d := range e.Details {
		if d.Issue != "" {
			return d.Issue
		}
	}
	switch {
	case e.Name != "":
		return e.Name
	case e.Error != "":
		return e.Error
	}
	return "http_" + strconv.Itoa(status)
}

func (e *apiError) message() string {
	parts := make([]string, 0, 3)
	for _, s := range []string{e.Message, e.ErrorDescription} {
		if s != "" {
			parts = append(parts, s)
		}
	}
	for _, d := range e.Details {
		if d.Description != "" {
			parts = append(parts, d.Description)
			break
		}
	}
	if len(parts) == 0 {
		return "no error message"
	}
	return strings.Join(parts, ": ")
}
