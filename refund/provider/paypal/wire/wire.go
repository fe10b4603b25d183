// Package wire holds what PayPal's REST API says on the wire that both
// refundkit's PayPal client (refund/provider/paypal) and its simulator
// (refund/sim/paypalsim) must read alike: the headers of idempotency and
// support, how long a request id is kept, and how amounts are written.
package wire

import "time"

// RequestIDHeader carries the idempotency key of a POST.
const RequestIDHeader = "PayPal-Request-Id"

// RequestIDTTL is how long PayPal keeps a PayPal-Request-Id: "The server
// stores keys for 45 days" (Payments v2, captures.refund).
const RequestIDTTL = 45 * 24 * time.Hour

// DebugIDHeader is on every answer of PayPal's own (PayPal's support asks
// for it); an answer without it came from something in front of PayPal.
const DebugIDHeader = "Paypal-Debug-Id"
