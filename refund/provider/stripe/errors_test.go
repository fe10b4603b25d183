package stripe

import (
	"context"
	"errors"
	"fmt"
	"testing"

	stripego "github.com/stripe/stripe-go/v76"

	"github.com/refundkit/refundkit/refund"
)

// TestClassify is Stripe's error classification, the one copy of it, as
// the engine and audit read it through refund.Classify.
func TestClassify(t *testing.T) {
	se := func(status int, typ stripego.ErrorType, code, reqID string) error {
		return &stripego.Error{HTTPStatusCode: status, Type: typ, Code: stripego.ErrorCode(code), RequestID: reqID, Msg: "said"}
	}
	for _, tc := range []struct {
		name     string
		err      error
		answered int
		reason   string
		want     refund.Failure
	}{
		{"no answer", errors.New("dial tcp: refused"), 0, "", refund.Failure{Class: refund.ClassRetry, Code: "network_error", Message: "dial tcp: refused"}},
		{"a gateway's page", errors.New("invalid character '<'"), 502, "", refund.Failure{Class: refund.ClassRetry, Code: "gateway_502", Message: "invalid character '<'"}},
		{"stripe's own 500", se(500, stripego.ErrorTypeAPI, "", "req_1"), 500, "", refund.Failure{Class: refund.ClassIndeterminate, Status: 500, Code: "api_error", Message: "said"}},
		{"a 500 without Request-Id", se(500, stripego.ErrorTypeAPI, "", ""), 500, "", refund.Failure{Class: refund.ClassRetry, Code: "gateway_500", Message: "said"}},
		{"a gateway's 504 in Stripe's shape", se(504, stripego.ErrorTypeAPI, "", "req_1"), 504, "", refund.Failure{Class: refund.ClassRetry, Code: "gateway_504", Message: "said"}},
		{"stripe's 503", se(503, stripego.ErrorTypeAPI, "", "req_1"), 503, "", refund.Failure{Class: refund.ClassRetry, Status: 503, Code: "api_error", Message: "said"}},
		{"key refused", se(401, stripego.ErrorTypeInvalidRequest, "", "req_1"), 401, "", refund.Failure{Class: refund.ClassFatal, Status: 401, Code: "invalid_request_error", Message: "said"}},
		{"key used with other parameters", se(400, stripego.ErrorTypeIdempotency, "", "req_1"), 400, "", refund.Failure{Class: refund.ClassKeyReused, Status: 400, Code: "idempotency_key_reused", Message: "said"}},
		{"endpoint rate", se(429, stripego.ErrorTypeInvalidRequest, "rate_limit", "req_1"), 429, "endpoint-rate", refund.Failure{Class: refund.ClassRetry, Status: 429, Code: "rate_limit", Message: "said", RateLimited: true}},
		{"account rate", se(429, stripego.ErrorTypeInvalidRequest, "rate_limit", "req_1"), 429, "global-rate", refund.Failure{Class: refund.ClassRetry, Status: 429, Code: "rate_limit", Message: "said", RateLimited: true, AccountLimit: true}},
		{"key in flight", se(409, stripego.ErrorTypeIdempotency, "idempotency_key_in_use", "req_1"), 409, "", refund.Failure{Class: refund.ClassRetry, Status: 409, Code: "idempotency_key_in_use", Message: "said"}},
		{"refused", se(400, stripego.ErrorTypeInvalidRequest, "charge_already_refunded", "req_1"), 400, "", refund.Failure{Class: refund.ClassFinal, Status: 400, Code: "charge_already_refunded", Message: "said"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := fmt.Errorf("wrapped: %w", classify(tc.err, tc.answered, tc.reason))
			got := refund.Classify(err)
			got.Err, tc.want.Err = nil, nil
			if got != tc.want {
				t.Errorf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
	// A stop is a stop whatever stripe-go made of it.
	if got := refund.Classify(classify(fmt.Errorf("request: %w", context.Canceled), 0, "")); got.Class != refund.ClassStopped {
		t.Errorf("a canceled call: %+v, want ClassStopped", got)
	}
}
