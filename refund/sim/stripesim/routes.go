package stripesim

import (
	"fmt"
	"net/http"
	"path"
	"strings"

	"github.com/refundkit/refundkit/refund/sim"
	"github.com/refundkit/refundkit/refund/sim/adyensim"
	"github.com/refundkit/refundkit/refund/sim/paypalsim"
)

// route is an endpoint of the API, for dispatch, rate limits and stats.
type route int

const (
	routeCreateRefund route = iota
	routeListRefunds
	routeGetRefund
	routeCancelRefund
	routeGetCharge
	routeListCharges
	routeOther // any other request: Stripe's 404 for an unknown URL
	numRoutes
)

// routeNames are the routes' ServeMux patterns, which are also their names
// in Stats (Requests["GET /v1/charges/{id}"]) and their rate-limit
// endpoints: a method and a path, an id counting as one path.
var routeNames = [numRoutes]string{
	routeCreateRefund: "POST /v1/refunds",
	routeListRefunds:  "GET /v1/refunds",
	routeGetRefund:    "GET /v1/refunds/{id}",
	routeCancelRefund: "POST /v1/refunds/{id}/cancel",
	routeGetCharge:    "GET /v1/charges/{id}",
	routeListCharges:  "GET /v1/charges",
	routeOther:        "other",
}

// routes is the simulator's route table: Stripe's endpoints, PayPal's and
// Adyen's (paypalsim's and adyensim's Server.Register document them and
// their knobs), then the
// control endpoints that scripts use to steer and check the simulator. The
// control endpoints need no key (the server is on loopback only), take no
// fault and count in no statistic.
//
//	GET  /_sim/faults       the fault knobs in force
//	POST /_sim/faults       replace the fault knobs (JSON Faults; absent = 0),
//	                        rate limits included: {"rate_limits":{"mode":"test"}}
//	POST /_sim/forget-keys  forget completed idempotency keys and
//	                        PayPal-Request-Ids
//	GET  /_sim/stats        counters (JSON Stats; PayPal's routes among the
//	                        requests, PayPal's own counts under "paypal")
//	POST /_sim/settle       wait for requests still running behind a gateway
//	                        timeout, then answer the counters (JSON Stats)
//	GET  /_sim/refunds      every refund, oldest first, as JSON lines:
//	                        Stripe's, then PayPal's (paypalsim.Refund, with
//	                        "capture" where Stripe's have "charge")
//	POST /_sim/charges      add charges given as JSON lines
//	POST /_sim/captures     add PayPal captures given as JSON lines
//	POST /_sim/adyen/payments     add Adyen payments given as JSON lines
//	GET  /_sim/adyen/payments     every Adyen payment (JSON lines,
//	                              adyensim.PaymentState)
//	GET  /_sim/adyen/refunds      every Adyen refund, oldest first (JSON
//	                              lines, adyensim.Refund)
//	POST /_sim/adyen/flush        wait until every queued notification is
//	                              accepted (bounded by the request), then
//	                              answer the counts (adyensim.NotifyStats)
//	POST /_sim/adyen/forget-keys  forget Adyen's completed Idempotency-Keys
//
// Every other request is serveUnknown's.
func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	handle := func(rt route, fn endpoint) { mux.Handle(routeNames[rt], s.api(rt, fn)) }
	handle(routeCreateRefund, s.createRefund)
	handle(routeListRefunds, s.listRefunds)
	handle(routeGetRefund, s.getRefund)
	handle(routeCancelRefund, s.cancelRefund)
	handle(routeGetCharge, s.getCharge)
	handle(routeListCharges, s.listCharges)
	s.paypal.Register(mux)
	s.adyen.Register(mux)

	mux.HandleFunc("GET /_sim/faults", s.getFaults)
	mux.HandleFunc("POST /_sim/faults", s.setFaults)
	mux.HandleFunc("POST /_sim/forget-keys", s.forgetKeys)
	mux.HandleFunc("GET /_sim/stats", s.getStats)
	mux.HandleFunc("POST /_sim/settle", s.settle)
	mux.HandleFunc("GET /_sim/refunds", s.listAllRefunds)
	mux.HandleFunc("POST /_sim/charges", addSeeds(ReadCharges, s.AddCharges))
	mux.HandleFunc("POST /_sim/captures", addSeeds(paypalsim.ReadCaptures, s.paypal.AddCaptures))
	mux.HandleFunc("POST /_sim/adyen/payments", addSeeds(adyensim.ReadPayments, s.adyen.AddPayments))
	mux.HandleFunc("GET /_sim/adyen/payments", s.listAdyenPayments)
	mux.HandleFunc("GET /_sim/adyen/refunds", s.listAdyenRefunds)
	mux.HandleFunc("POST /_sim/adyen/flush", s.flushAdyen)
	mux.HandleFunc("POST /_sim/adyen/forget-keys", s.forgetAdyenKeys)

	// Any method on any path, so ServeMux never answers a plain-text 404
	// or 405; no "/_sim/" beside it, or ServeMux would redirect /_sim.
	mux.HandleFunc("/", s.serveUnknown)
	return mux
}

// serveHTTP routes a request by the table, except two kinds that ServeMux
// does not route as Stripe does: a path it would clean (/v1//refunds), which
// it answers with a redirect, and a HEAD, which it gives to the GET pattern.
// Neither is a route of Stripe's: both are unknown requests.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodHead || !routable(r.URL.EscapedPath()) {
		s.serveUnknown(w, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// routable reports whether ServeMux routes p as it is rather than
// redirecting to its cleaned form; a trailing slash is kept by both.
func routable(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	c := path.Clean(p)
	return c == p || c != "/" && c+"/" == p
}

// serveUnknown answers a request no route takes: under /_sim/ with the
// control endpoints' JSON error, anywhere else as Stripe answers a URL it
// does not know, after the key check and the rate limits as every API
// request (it counts as "other").
func (s *Server) serveUnknown(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/_sim/") {
		controlError(w, http.StatusNotFound, "no control endpoint "+r.Method+" "+r.URL.Path)
		return
	}
	s.serveAPI(w, r, routeOther, unrecognized, "")
}

// unrecognized is Stripe's answer to a URL it has no endpoint for.
func unrecognized(c apiCall) sim.Answer {
	return sim.Answer{Status: http.StatusNotFound, Body: errorBody(sim.Error{Type: typeInvalid,
		Message: fmt.Sprintf("Unrecognized request URL (%s: %s).", c.method, c.path)})}
}
