package stripesim

import (
	"fmt"
	"net/http"

	"github.com/refundkit/refundkit/refund/sim"
)

// Stripe's error types, as stripe-go decodes them.
const (
	typeAPI         = "api_error"
	typeIdempotency = "idempotency_error"
	typeInvalid     = "invalid_request_error"
)

// errorBody is Stripe's error envelope around e.
func errorBody(e sim.Error) []byte {
	return sim.MustJSON(struct {
		Error sim.Error `json:"error"`
	}{e})
}

// found is a 200 with v.
func found(v any) sim.Answer { return sim.Answer{Status: http.StatusOK, Body: sim.MustJSON(v)} }

// invalid is a validation error: 400, not saved under the key.
func invalid(code, param, format string, args ...any) sim.Answer {
	return sim.Answer{Status: http.StatusBadRequest, Body: errorBody(sim.Error{Type: typeInvalid, Code: code, Param: param, Message: fmt.Sprintf(format, args...)})}
}

// refused is an error of the endpoint itself, saved under the key.
func refused(status int, e sim.Error) sim.Answer {
	return sim.Answer{Status: status, Body: errorBody(e), Save: true}
}

// missing is Stripe's 404 for an id it does not know.
func missing(kind, param, id string) sim.Answer {
	return refused(http.StatusNotFound, sim.Error{Type: typeInvalid, Code: "resource_missing", Param: param,
		Message: fmt.Sprintf("No such %s: '%s'", kind, id)})
}

// internalError is Stripe's 500, which the fault knobs inject (saved).
var internalError = refused(http.StatusInternalServerError, sim.Error{Type: typeAPI, Message: "An unknown error occurred"})

// Stripe's 401s: no key, or not a test-mode key.
var (
	noKeyBody = errorBody(sim.Error{Type: typeInvalid,
		Message: "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY')."})
	badKeyBody = errorBody(sim.Error{Type: typeInvalid,
		Message: "Invalid API Key provided: the simulator accepts only test-mode keys (sk_test_... or rk_test_...)"})
)

// rateLimitBody is the body of Stripe's 429s.
var rateLimitBody = errorBody(sim.Error{Type: typeInvalid, Code: "rate_limit",
	Message: "Request rate limit exceeded. Learn more about rate limits here https://stripe.com/docs/rate-limits."})

// writeAnswer writes a JSON answer with Stripe's response headers.
func writeAnswer(w http.ResponseWriter, status int, body []byte, reqID, key string, replayed bool) {
	rep := ""
	if replayed {
		rep = "true"
	}
	sim.Write(w, status, body, "Request-Id", reqID, "Idempotency-Key", key, "Idempotent-Replayed", rep)
}

// writeKeyVerdict answers a known key: its replay, a 409 or a 400.
func (s *Server) writeKeyVerdict(w http.ResponseWriter, v sim.Verdict, saved sim.KeyEntry, key, path, reqID string) {
	var msg string
	switch v {
	case sim.KeyReplay:
		s.core.Count.Replayed.Add(1)
		writeAnswer(w, saved.Status, saved.Body, saved.RequestID, key, true)
		return
	case sim.KeyInUse:
		s.core.Count.KeyInUse.Add(1)
		body := errorBody(sim.Error{Type: typeIdempotency, Code: "idempotency_key_in_use",
			Message: fmt.Sprintf("There is currently another in-progress request using this Idempotency Key (that probably means you submitted twice, and the other request is still going through): '%s'. Please try again later.", key)})
		writeAnswer(w, http.StatusConflict, body, reqID, key, false)
		return
	case sim.KeyEndpointMismatch:
		msg = fmt.Sprintf("Keys for idempotent requests can only be used for the same endpoint they were first used for ('%s' vs '%s'). Try using a key other than '%s' if you meant to execute a different request.", saved.Path, path, key)
	case sim.KeyParamsMismatch:
		msg = fmt.Sprintf("Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '%s' if you meant to execute a different request.", key)
	}
	s.stats.keyMismatch.Add(1)
	writeAnswer(w, http.StatusBadRequest, errorBody(sim.Error{Type: typeIdempotency, Message: msg}), reqID, key, false)
}
