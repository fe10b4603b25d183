package paypalsim

import (
	"net/http"

	"github.com/refundkit/refundkit/refund/provider/paypal/wire"
	"github.com/refundkit/refundkit/refund/sim"
)

// The error names and messages PayPal documents for its status codes.
const (
	nameInvalidRequest = "INVALID_REQUEST"
	msgInvalidRequest  = "Request is not well-formed, syntactically incorrect, or violates schema."
	nameUnprocessable  = "UNPROCESSABLE_ENTITY"
	msgUnprocessable   = "The requested action could not be performed, semantically incorrect, or failed business validation."
	nameNotFound       = "RESOURCE_NOT_FOUND"
	msgNotFound        = "The specified resource does not exist."
	nameConflict       = "RESOURCE_CONFLICT"
	msgConflict        = "The server has detected a conflict while processing this request."
	nameAuthFailure    = "AUTHENTICATION_FAILURE"
	msgAuthFailure     = "Authentication failed due to missing authorization header, or invalid authentication credentials."
	nameRateLimit      = "RATE_LIMIT_REACHED"
	msgRateLimit       = "Too many requests. Blocked due to rate limiting."
	nameInternal       = "INTERNAL_SERVER_ERROR"
	msgInternal        = "An internal server error occurred."
)

// apiErr is an error answer with one issue (none when issue is "").
func apiErr(status int, name, msg, debugID, issue, field, description string) sim.Answer {
	e := sim.Error{Name: name, Message: msg, DebugID: &debugID}
	if issue != "" {
		d := sim.Detail{Issue: issue, Description: description, Field: field}
		if field != "" {
			d.Location = "body"
		}
		e.Details = []sim.Detail{d}
	}
	a := sim.Fail(status, e, false)
	a.RequestID = debugID
	return a
}

// invalid is a 400 (the schema), not saved under the request id.
func invalid(debugID, issue, field, description string) sim.Answer {
	return apiErr(http.StatusBadRequest, nameInvalidRequest, msgInvalidRequest, debugID, issue, field, description)
}

// unprocessable is a 422 business refusal, saved under the request id.
func unprocessable(debugID, issue, description string) sim.Answer {
	a := apiErr(http.StatusUnprocessableEntity, nameUnprocessable, msgUnprocessable, debugID, issue, "", description)
	a.Save = true
	return a
}

// noSuchID describes the issue INVALID_RESOURCE_ID.
const noSuchID = "Specified resource ID does not exist. Please check the resource ID and try again."

// notFound is the 404 for an id PayPal does not know.
func notFound(debugID, description string) sim.Answer {
	a := apiErr(http.StatusNotFound, nameNotFound, msgNotFound, debugID, "INVALID_RESOURCE_ID", "", description)
	a.Save = true
	return a
}

// internal is PayPal's 500, which the fault knobs inject.
func internal(debugID string) sim.Answer {
	return apiErr(http.StatusInternalServerError, nameInternal, msgInternal, debugID, "", "", "")
}

// DebugIDHeader names every answer of PayPal's own (never a gateway's).
const DebugIDHeader = wire.DebugIDHeader

// writeAnswer writes an answer with PayPal's headers.
func writeAnswer(w http.ResponseWriter, status int, body []byte, debugID string) {
	sim.Write(w, status, body, DebugIDHeader, debugID)
}

// writeErr writes an error answer of apiErr's.
func writeErr(w http.ResponseWriter, a sim.Answer) { writeAnswer(w, a.Status, a.Body, a.RequestID) }
