package adyensim

import (
	"bytes"
	"cmp"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
	"github.com/refundkit/refundkit/refund/sim"
)

// maxBody bounds a refund request's body.
const maxBody = 64 << 10

// keyScope prefixes Adyen's keys, kept per company (one API key).
const keyScope = "adyen\x00"

// refundRequest is the part of a refund's body the simulator acts on.
type refundRequest struct {
	Amount          *wire.Amount `json:"amount"`
	MerchantAccount string       `json:"merchantAccount"`
	Reference       string       `json:"reference"`
}

// serveRefund is POST /v71/payments/{psp}/refunds, under Idempotency-Key.
func (s *Server) serveRefund(w http.ResponseWriter, c call) {
	invalid := func(status int, msg string) {
		s.core.Pause(c.f, c.seq)
		s.core.Count.InvalidRequests.Add(1)
		writeErr(w, apiErr(status, codeUnknown, msg, typeValidation, c.requestRef), false)
	}
	body, ok := sim.ReadBody(c.r, maxBody)
	if !ok {
		invalid(http.StatusBadRequest, msgUnparsable)
		return
	}
	key := strings.TrimSpace(c.r.Header.Get(headerIdempotent))
	if len(key) > wire.MaxKey {
		invalid(http.StatusUnprocessableEntity, msgKeyTooLong)
		return
	}
	p := sim.Post{Scope: sim.Scope(keyScope, key), Method: c.r.Method, Path: c.r.URL.Path, Params: string(body),
		TTL: s.keyTTL, Now: s.now(), Seq: c.seq, F: c.f, MayTimeOut: true}
	// createRefund may outlive the handler: it takes values, not c.r.
	psp, ref, f, seq := c.psp, c.requestRef, c.f, c.seq
	s.core.ServePost(w, p, adyenPost{s, key, ref, f}, func() sim.Answer { return s.createRefund(psp, body, key, ref, f, seq) })
}

// adyenPost writes Adyen's answers for the idempotency layer.
type adyenPost struct {
	s        *Server
	key, ref string
	f        *sim.Faults
}

// Known answers a key seen before: 704 (transient) while in flight, then
// the first answer, whatever this body or path says.
func (p adyenPost) Known(w http.ResponseWriter, v sim.Verdict, saved sim.KeyEntry) {
	if v == sim.KeyInUse || !saved.Done() {
		p.s.core.Count.KeyInUse.Add(1)
		p.s.stats.keyInUse.Add(1)
		writeErr(w, apiErr(cmp.Or(p.f.AdyenConflictStatus, http.StatusUnprocessableEntity), codeInProgress, msgInProgress, typeValidation, p.ref), true)
		return
	}
	p.s.core.Count.Replayed.Add(1)
	p.s.stats.replayed.Add(1)
	if v != sim.KeyReplay {
		p.s.stats.replayedOtherParams.Add(1)
	}
	writeAnswer(w, saved.Status, saved.Body, p.key, false)
}

// Write writes the answer: an unsaved 5xx is transient, the key free.
func (p adyenPost) Write(w http.ResponseWriter, a sim.Answer) {
	transient := !a.Save && a.Status >= 500
	key := p.key
	if transient {
		key = ""
	}
	writeAnswer(w, a.Status, a.Body, key, transient)
}

// GatewayBody has no pspReference: Adyen did not answer.
func (p adyenPost) GatewayBody(status int) []byte {
	return sim.MustJSON(sim.Error{Status: status, ErrorCode: codeUnknown, ErrorType: typeInternal, Message: sim.GatewayMessage(status)})
}

// createRefund refunds the payment, with the key held.
func (s *Server) createRefund(psp string, body []byte, key, ref string, f *sim.Faults, seq uint64) sim.Answer {
	s.hook.Call(key)
	var req refundRequest
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&req); err != nil {
		return apiErr(http.StatusBadRequest, codeUnknown, msgUnparsable, typeValidation, ref) // not saved
	}
	switch {
	case req.MerchantAccount == "" || !s.knownMerchant(req.MerchantAccount):
		return refused(http.StatusForbidden, codeBadMerchant, msgBadMerchant, typeSecurity, ref)
	case req.Amount == nil:
		return refused(http.StatusUnprocessableEntity, codeNoAmount, msgNoAmount, typeValidation, ref)
	case req.Amount.Value <= 0 || !currencyRE.MatchString(req.Amount.Currency):
		return s.core.Refused(badAmount(ref))
	}
	pm := s.payments.Get(psp)
	if pm == nil || pm.merchant != req.MerchantAccount {
		return s.core.Refused(refused(http.StatusUnprocessableEntity, codeNoOriginal, msgNoOriginal, typeValidation, ref))
	}
	if s.core.FailBeforeCommit(f, seq) {
		return internal(ref) // not saved, transient: a retry with the key runs as the first
	}
	pm.mu.Lock()
	if strings.ToUpper(req.Amount.Currency) != pm.currency {
		pm.mu.Unlock()
		return s.core.Refused(badAmount(ref))
	}
	r := &refund{p: pm, Refund: Refund{Amount: req.Amount.Value, Reference: req.Reference, MerchantAccount: req.MerchantAccount,
		IdempotencyKey: key, Created: s.now().Unix(), Outcome: OutcomeRefunded}}
	switch {
	case r.Amount > pm.amount-pm.held():
		if f.AdyenOverRefund422 {
			pm.mu.Unlock()
			return s.core.Refused(badAmount(ref))
		}
		// Adyen's way: received, and refused by its notification.
		r.Outcome, r.Reason = OutcomeRefused, reasonNoBalance
	case s.core.Hit(f.AdyenRefundFailedShare, seq, sim.KnobAdyenRefundFailed):
		r.Outcome, r.Reason = OutcomeRefused, reasonRefused
	case s.core.Hit(f.AdyenRefundFailedLaterShare, seq, sim.KnobAdyenRefundFailedLater):
		r.Outcome = OutcomeFailed
	case s.core.Hit(f.AdyenReversedShare, seq, sim.KnobAdyenReversed):
		r.Outcome = OutcomeReversed
	}
	s.addRefund(r)
	pm.mu.Unlock()
	s.stats.created.Add(1)
	if s.notes != nil {
		s.notes.enqueue(r.n, r.events(), f)
	}
	a := sim.Answer{Status: http.StatusCreated, Save: true, Ref: r.ID, Body: sim.MustJSON(wire.RefundAnswer{
		MerchantAccount: r.MerchantAccount, PaymentPSPReference: pm.psp, PSPReference: r.ID, Reference: r.Reference,
		Status: "received", Amount: wire.Amount{Currency: pm.currency, Value: r.Amount}})}
	return s.core.AfterCommit(f, seq, a, internal(ref)) // a 500 is saved: every retry with the key gets it
}

// Adyen's errorType values.
const (
	typeValidation = "validation"
	typeSecurity   = "security"
	typeInternal   = "internal"
)

// The error codes the simulator answers, and Adyen's messages.
const (
	codeUnknown      = "000" // generic: unauthorised, unable to parse message
	codeNoAmount     = "100" // Required object 'amount' is not provided.
	codeBadAmount    = "137" // Invalid amount specified
	codeNoOriginal   = "167" // Original pspReference required for this operation
	codeInternal     = "701" // server could not process request
	codeInProgress   = "704" // request already processed or in progress
	codeBadMerchant  = "901" // Invalid Merchant Account
	msgNoAmount      = "Required object 'amount' is not provided."
	msgBadAmount     = "Invalid amount specified"
	msgNoOriginal    = "Original pspReference required for this operation"
	msgInternal      = "server could not process request"
	msgInProgress    = "request already processed or in progress"
	msgBadMerchant   = "Invalid Merchant Account"
	msgUnparsable    = "Unable to parse message"
	msgKeyTooLong    = "Idempotency-Key is longer than 64 characters"
	reasonNoBalance  = "Insufficient balance on payment"
	reasonRefused    = "Refused"
	reasonFailed     = "Refund failed: returned by the shopper's bank"
	reasonReversed   = "Refund reversed: the money came back to the merchant"
	headerTransient  = "Transient-Error"
	headerIdempotent = "Idempotency-Key"
)

// apiErr is an error answer; ref is the request's pspReference, if any.
func apiErr(status int, code, msg, errType, ref string) sim.Answer {
	return sim.Fail(status, sim.Error{Status: status, ErrorCode: code, Message: msg, ErrorType: errType, PSPReference: ref}, false)
}

// refused is a business refusal, saved under the key.
func refused(status int, code, msg, errType, ref string) sim.Answer {
	return sim.Fail(status, sim.Error{Status: status, ErrorCode: code, Message: msg, ErrorType: errType, PSPReference: ref}, true)
}

// badAmount is the refusal of an amount (137), saved under the key.
func badAmount(ref string) sim.Answer {
	return refused(http.StatusUnprocessableEntity, codeBadAmount, msgBadAmount, typeValidation, ref)
}

// internal is Adyen's 500, which the fault knobs inject.
func internal(ref string) sim.Answer {
	return apiErr(http.StatusInternalServerError, codeInternal, msgInternal, typeInternal, ref)
}

// writeAnswer writes Adyen's answer, echoing the key if any, with
// Transient-Error: true if it may be sent again with the key.
func writeAnswer(w http.ResponseWriter, status int, body []byte, key string, transient bool) {
	t := ""
	if transient {
		t = "true"
	}
	sim.Write(w, status, body, headerIdempotent, key, headerTransient, t)
}

// writeErr writes an error answer, echoing no key.
func writeErr(w http.ResponseWriter, a sim.Answer, transient bool) {
	writeAnswer(w, a.Status, a.Body, "", transient)
}
