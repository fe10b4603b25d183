package stripesim

import (
	"fmt"
	"net/http"

	"github.com/refundkit/refundkit/refund/sim"
)

// apiError is the object inside Stripe's error envelope.
type apiError struct {
	Type    string `json:"type"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
	Param   string `json:"param,omitempty"`
	Charge  string `json:"charge,omitempty"`
}

// Stripe's error types, as stripe-go decodes them.
const (
	typeAPI         = "api_error"
	typeIdempotency = "idempotency_error"
	typeInvalid     = "invalid_request_error"
)

// errorBody is Stripe's error envelope around e.
func errorBody(e apiError) []byte {
	return sim.MustJSON(struct {
		Error apiError `json:"error"`
	}{e})
}

// invalid is a validation error: 400, not saved under the key.
func invalid(code, param, format string, args ...any) answer {
	return answer{status: http.StatusBadRequest, body: errorBody(apiError{Type: typeInvalid, Code: code, Param: param, Message: fmt.Sprintf(format, args...)})}
}

// refused is an error of the endpoint itself, saved under the key.
func refused(status int, e apiError) answer {
	return answer{status: status, body: errorBody(e), save: true}
}

// missing is Stripe's 404 for an id it does not know.
func missing(kind, param, id string) answer {
	return refused(http.StatusNotFound, apiError{Type: typeInvalid, Code: "resource_missing", Param: param,
		Message: fmt.Sprintf("No such %s: '%s'", kind, id)})
}

// internalErrorBody is Stripe's 500, which the fault knobs inject.
var internalErrorBody = errorBody(apiError{Type: typeAPI, Message: "An unknown error occurred"})
