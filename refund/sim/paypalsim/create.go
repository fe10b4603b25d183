package paypalsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/refundkit/refundkit/refund/provider/paypal/wire"
	"github.com/refundkit/refundkit/refund/sim"
)

// maxBody bounds a refund request's body.
const maxBody = 64 << 10

// refundRequest is the body of POST /v2/payments/captures/{id}/refund.
type refundRequest struct {
	Amount *struct {
		Value        *string `json:"value"`
		CurrencyCode *string `json:"currency_code"`
	} `json:"amount"`
	CustomID    *string `json:"custom_id"`
	InvoiceID   *string `json:"invoice_id"`
	NoteToPayer *string `json:"note_to_payer"`
	// PaymentInstruction (platform fees) is accepted and not acted on.
	PaymentInstruction json.RawMessage `json:"payment_instruction"`
}

// parsed is a refund request once its schema is checked.
type parsed struct {
	value, currency string // "" for a full refund
	fields          Refund // custom_id, invoice_id, note_to_payer
}

// parseRefund checks the body against the schema (a 400, unsaved).
func parseRefund(body []byte, debugID string) (parsed, sim.Answer, bool) {
	var p parsed
	if len(bytes.TrimSpace(body)) == 0 {
		return p, sim.Answer{}, true // an empty body refunds the rest
	}
	var req refundRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || dec.More() {
		return p, invalid(debugID, "MALFORMED_REQUEST_JSON", "", "The request JSON is not well formed."), false
	}
	if a := req.Amount; a != nil {
		switch {
		case a.Value == nil:
			return p, invalid(debugID, "MISSING_REQUIRED_PARAMETER", "/amount/value", "A required field / parameter is missing."), false
		case a.CurrencyCode == nil:
			return p, invalid(debugID, "MISSING_REQUIRED_PARAMETER", "/amount/currency_code", "A required field / parameter is missing."), false
		case !currencyRE.MatchString(*a.CurrencyCode) || strings.ToUpper(*a.CurrencyCode) != *a.CurrencyCode:
			return p, invalid(debugID, "INVALID_PARAMETER_SYNTAX", "/amount/currency_code", "The value of a field does not conform to the expected format."), false
		}
		p.value, p.currency = *a.Value, *a.CurrencyCode
		if _, problem := parseValue(p.value, p.currency); problem == valueSyntax {
			return p, invalid(debugID, "INVALID_PARAMETER_SYNTAX", "/amount/value", "The value of a field does not conform to the expected format."), false
		}
	}
	for _, f := range []struct {
		name string
		v    *string
		max  int
		to   *string
	}{
		{"custom_id", req.CustomID, 127, &p.fields.CustomID},
		{"invoice_id", req.InvoiceID, 127, &p.fields.InvoiceID},
		{"note_to_payer", req.NoteToPayer, 255, &p.fields.NoteToPayer},
	} {
		if f.v == nil {
			continue
		}
		switch {
		case *f.v == "" || utf8.RuneCountInString(*f.v) > f.max:
			return p, invalid(debugID, "INVALID_STRING_LENGTH", "/"+f.name, fmt.Sprintf("The value of a field is either too short or too long (1-%d).", f.max)), false
		case f.name == "custom_id" && !customIDRE.MatchString(*f.v):
			return p, invalid(debugID, "INVALID_PARAMETER_SYNTAX", "/custom_id", "The value of a field does not conform to the expected format."), false
		}
		*f.to = *f.v
	}
	return p, sim.Answer{}, true
}

// serveRefund is POST /v2/payments/captures/{id}/refund, under
// PayPal-Request-Id.
func (s *Server) serveRefund(w http.ResponseWriter, c call) {
	body, ok := sim.ReadBody(c.r, maxBody)
	if !ok {
		s.core.Pause(c.f, c.seq)
		s.core.Count.InvalidRequests.Add(1)
		writeErr(w, invalid(c.debugID, "MALFORMED_REQUEST_JSON", "", "The request body could not be read."))
		return
	}
	requestID := strings.TrimSpace(c.r.Header.Get(wire.RequestIDHeader))
	p := sim.Post{Scope: sim.Scope("paypal\x00"+c.clientID+"\x00", requestID), Method: c.r.Method, Path: c.r.URL.Path,
		Params: string(body), TTL: RequestIDTTL, Now: s.now(), Seq: c.seq, F: c.f, MayTimeOut: true}
	// createRefund may outlive the handler: it takes values, not c.r.
	captureID, debugID, base, f, seq := c.id, c.debugID, c.base, c.f, c.seq
	s.core.ServePost(w, p, paypalPost{s, base, debugID}, func() sim.Answer {
		return s.createRefund(captureID, body, requestID, debugID, base, f, seq)
	})
}

// paypalPost writes PayPal's answers for the idempotency layer.
type paypalPost struct {
	s             *Server
	base, debugID string
}

// Known answers a request id seen before with "the latest status of the
// previous request": its refund now, or its error; 409 while in flight.
func (p paypalPost) Known(w http.ResponseWriter, v sim.Verdict, saved sim.KeyEntry) {
	if v == sim.KeyInUse || !saved.Done() {
		p.s.core.Count.KeyInUse.Add(1)
		writeErr(w, apiErr(http.StatusConflict, nameConflict, msgConflict, p.debugID, "PREVIOUS_REQUEST_IN_PROGRESS", "",
			"A previous request with this PayPal-Request-Id is still in progress. Retry the request later with the same PayPal-Request-Id."))
		return
	}
	p.s.core.Count.Replayed.Add(1)
	if r := p.s.refundByID(saved.Ref); r != nil {
		writeAnswer(w, http.StatusCreated, r.render(p.base, p.s.now()), p.debugID)
		return
	}
	writeAnswer(w, saved.Status, saved.Body, saved.RequestID)
}

func (p paypalPost) Write(w http.ResponseWriter, a sim.Answer) {
	writeAnswer(w, a.Status, a.Body, p.debugID)
}

// GatewayBody has no debug id: PayPal did not answer.
func (p paypalPost) GatewayBody(status int) []byte {
	return sim.MustJSON(sim.Error{Name: nameInternal, Message: sim.GatewayMessage(status), DebugID: new(string)})
}

// refuseAmount is the 422 for an amount the refund endpoint refuses.
func (s *Server) refuseAmount(problem valueProblem, currency, captureCurrency, debugID string) (sim.Answer, bool) {
	var issue, description string
	switch {
	case problem == valueNotPositive:
		issue, description = "CANNOT_BE_ZERO_OR_NEGATIVE", "Must be greater than zero."
	case problem == valueDecimals:
		issue, description = "DECIMALS_NOT_SUPPORTED", "Currency does not support decimals."
	case problem == valuePrecision:
		issue, description = "DECIMAL_PRECISION", fmt.Sprintf("%s takes at most %d decimal places.", currency, wire.Decimals(currency))
	case currency != captureCurrency:
		issue, description = "REFUND_CAPTURE_CURRENCY_MISMATCH", "Refund must be in the same currency as the capture."
	default:
		return sim.Answer{}, false
	}
	return s.core.Refused(unprocessable(debugID, issue, description)), true
}

// createRefund refunds the capture, with the request id held.
func (s *Server) createRefund(captureID string, body []byte, requestID, debugID, base string, f *sim.Faults, seq uint64) sim.Answer {
	s.hook.Call(requestID)
	p, a, ok := parseRefund(body, debugID)
	if !ok {
		return a
	}
	cp := s.captures.Get(captureID)
	if cp == nil {
		return s.core.Refused(notFound(debugID, noSuchID))
	}
	if s.core.FailBeforeCommit(f, seq) {
		return internal(debugID) // not saved: PayPal lets a 5xx be retried with its request id
	}
	now := s.now()
	cp.mu.Lock()
	defer cp.mu.Unlock()
	remaining := cp.amount - cp.held(now)
	amount := remaining
	if p.value != "" {
		n, problem := parseValue(p.value, p.currency)
		if a, refused := s.refuseAmount(problem, p.currency, cp.currency, debugID); refused {
			return a
		}
		amount = n
	}
	switch {
	case remaining == 0:
		return s.core.Refused(unprocessable(debugID, "CAPTURE_FULLY_REFUNDED", "The capture has already been fully refunded."))
	case amount > remaining:
		return s.core.Refused(unprocessable(debugID, "REFUND_AMOUNT_EXCEEDED", "The refund amount must be less than or equal to the capture amount that has not yet been refunded."))
	}
	p.fields.Amount, p.fields.RequestID = amount, requestID
	r := &refund{Refund: p.fields, cp: cp, created: now, initial: StatusCompleted}
	if s.core.Hit(f.PayPalPendingShare, seq, sim.KnobPayPalPending) {
		r.initial, r.final = StatusPending, StatusCompleted
		if f.PayPalPendingFor > 0 {
			r.settleAt = now.Add(f.PayPalPendingFor)
		}
		if s.core.Hit(f.PayPalFailedShare, seq, sim.KnobPayPalFailed) {
			r.final = StatusFailed
		}
	}
	s.addRefund(r)
	s.madeRefund(r, base, now)
	// After a 500 too, a retry gets the refund's latest status.
	a = sim.Answer{Status: http.StatusCreated, Body: sim.MustJSON(r.object(base, now)), Save: true, RequestID: debugID, Ref: r.ID}
	return s.core.AfterCommit(f, seq, a, internal(debugID))
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
