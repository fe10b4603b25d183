package adyensim

import (
	"net/http"

	"github.com/refundkit/refundkit/refund/sim"
)

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
