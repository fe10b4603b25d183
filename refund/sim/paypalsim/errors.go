package paypalsim

import (
	"net/http"
	"strconv"

	"github.com/refundkit/refundkit/refund/provider/paypal/wire"
	"github.com/refundkit/refundkit/refund/sim"
)

// errorJSON is PayPal's REST error body: a name, a message, the issues in
// details, a debug id and links (developer.paypal.com, error definitions).
type errorJSON struct {
	Name    string       `json:"name"`
	Message string       `json:"message"`
	DebugID string       `json:"debug_id"`
	Details []detailJSON `json:"details,omitempty"`
	Links   []linkJSON   `json:"links,omitempty"`
}

type detailJSON struct {
	Field       string `json:"field,omitempty"`
	Value       string `json:"value,omitempty"`
	Location    string `json:"location,omitempty"`
	Issue       string `json:"issue"`
	Description string `json:"description,omitempty"`
}

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
	e := errorJSON{Name: name, Message: msg, DebugID: debugID}
	if issue != "" {
		d := detailJSON{Issue: issue, Description: description, Field: field}
		if field != "" {
			d.Location = "body"
		}
		e.Details = []detailJSON{d}
	}
	return sim.Answer{Status: status, Body: sim.MustJSON(e), RequestID: debugID}
}

// invalid is a 400: the request violates the schema. Not saved under the
// request id: nothing was done.
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
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	h[DebugIDHeader] = []string{debugID}
	w.WriteHeader(status)
	w.Write(body)
}

// gatewayBody is the gateway's answer in PayPal's shape (GatewayStripeBody
// asks for the API's own shape); it has no debug id, as PayPal did not
// answer.
func gatewayBody(status int) []byte {
	return sim.MustJSON(errorJSON{Name: nameInternal, Message: "An error occurred at the gateway in front of the API (" + strconv.Itoa(status) + " " + sim.GatewayText(status) + ")."})
}
