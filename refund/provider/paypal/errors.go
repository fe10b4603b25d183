package paypal

// PayPal's errors, classified: the only place that knows which of PayPal's
// answers may be repeated under the same PayPal-Request-Id.

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/provider/httpx"
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

var provider = httpx.Provider{Name: "paypal", Title: "PayPal", NotOwn: "no " + wire.DebugIDHeader, RefName: "debug id"}

// classify sorts an answer that is not a success (httpx.Provider.Failure
// for the shared rules); token is true for the token endpoint's. An answer
// without a debug id is not PayPal's, even in PayPal's shape. PayPal's own
// 5xx is repeated too, as no answer (Status 0: a journaled 500 would burn
// a key that is still good): PayPal answers a retry with the latest status
// of the first request. 409, the first request with this id still in
// progress, is repeated; any refusal of the token endpoint halts. 422 is
// PayPal's business refusal, its code the issue it names.
func classify(status int, debugID string, body []byte, token bool) *refund.Failure {
	var e apiError
	_ = json.Unmarshal(body, &e) // a body that says nothing leaves e empty
	return provider.Failure(status, debugID != "", e.code(), e.message(), debugID, func(f *refund.Failure) bool {
		switch {
		case status >= 500:
			f.Class, f.Status = refund.ClassRetry, 0
		case status == http.StatusConflict:
			f.Class = refund.ClassRetry
		case token && status != http.StatusTooManyRequests:
			f.Class = refund.ClassFatal
		default:
			return false
		}
		return true
	})
}

// code is the error's most precise name: the first issue it names (a
// 422's), else its name, else the OAuth2 error.
func (e *apiError) code() string {
	for _, d := range e.Details {
		if d.Issue != "" {
			return d.Issue
		}
	}
	if e.Name != "" {
		return e.Name
	}
	return e.Error
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
	return strings.Join(parts, ": ")
}

// Why a request is not sent.
var (
	errNoCapture  = errors.New("paypal: the item names no capture")
	errNoCurrency = errors.New("paypal: a partial refund needs the item's currency")
	errNoCancel   = errors.New("paypal: a refund cannot be canceled through PayPal's API")
)
