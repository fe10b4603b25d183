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

// routeNames are the routes' patterns, their names in Stats and their
// rate-limit endpoints.
var routeNames = [numRoutes]string{
	routeCreateRefund: "POST /v1/refunds",
	routeListRefunds:  "GET /v1/refunds",
	routeGetRefund:    "GET /v1/refunds/{id}",
	routeCancelRefund: "POST /v1/refunds/{id}/cancel",
	routeGetCharge:    "GET /v1/charges/{id}",
	routeListCharges:  "GET /v1/charges",
	routeOther:        "other",
}

// routes is the route table: Stripe's endpoints, PayPal's and Adyen's (see
// their Register), then the control endpoints (docs/stripe-sim.md), which
// need no key, take no fault and count in no statistic:
//
//	GET, POST /_sim/faults        the knobs in force; replace them (JSON Faults)
//	POST /_sim/forget-keys        forget every API's completed keys
//	GET  /_sim/stats              the counters (JSON Stats)
//	POST /_sim/settle             wait for requests behind a gateway timeout, then the counters
//	GET  /_sim/refunds            Stripe's refunds, then PayPal's, as JSON lines
//	POST /_sim/charges, captures, adyen/payments   add seeds given as JSON lines
//	GET  /_sim/adyen/payments, adyen/refunds       Adyen's, as JSON lines
//	POST /_sim/adyen/flush        wait until every notification is accepted
//	POST /_sim/adyen/forget-keys  forget Adyen's completed keys
//	GET  /_sim/stripe/events      Stripe's events' counts (JSON EventStats)
//	POST /_sim/stripe/events/flush  wait until pending refunds settled and every event is delivered
//
// Every other request is serveUnknown's.
func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	for _, name := range routeNames {
		s.core.Route(name) // counted from 0 in Stats
	}
	handle := func(rt route, fn endpoint) { mux.Handle(routeNames[rt], s.api(rt, fn)) }
	handle(routeCreateRefund, s.createRefund)
	handle(routeListRefunds, s.listRefunds)
	handle(routeGetRefund, s.getRefund)
	handle(routeCancelRefund, s.cancelRefund)
	handle(routeGetCharge, s.getCharge)
	handle(routeListCharges, s.listCharges)
	s.paypal.Register(mux)
	s.adyen.Register(mux)

	mux.HandleFunc("GET /_sim/faults", show(func() any { return s.Faults() }))
	mux.HandleFunc("POST /_sim/faults", s.setFaults)
	mux.HandleFunc("POST /_sim/forget-keys", show(func() any { return map[string]int{"forgotten": s.ForgetKeys()} }))
	mux.HandleFunc("GET /_sim/stats", show(func() any { return s.Stats() }))
	mux.HandleFunc("POST /_sim/settle", reply(func(r *http.Request) (any, error) {
		err := s.Settle(r.Context()) // first: the counters once settled
		return s.Stats(), err
	}))
	mux.HandleFunc("GET /_sim/refunds", jsonLines(true, s.allRefunds))
	mux.HandleFunc("POST /_sim/charges", addSeeds(ReadCharges, s.AddCharges))
	mux.HandleFunc("POST /_sim/captures", addSeeds(paypalsim.ReadCaptures, s.paypal.AddCaptures))
	mux.HandleFunc("POST /_sim/adyen/payments", addSeeds(adyensim.ReadPayments, s.adyen.AddPayments))
	mux.HandleFunc("GET /_sim/adyen/payments", jsonLines(false, s.adyen.Payments))
	mux.HandleFunc("GET /_sim/adyen/refunds", jsonLines(false, s.adyen.Refunds))
	mux.HandleFunc("POST /_sim/adyen/flush", reply(func(r *http.Request) (any, error) { return s.adyen.Flush(r.Context()) }))
	mux.HandleFunc("GET /_sim/stripe/events", show(func() any { return s.EventStats() }))
	mux.HandleFunc("GET /_sim/paypal/events", show(func() any { return s.paypal.EventStats() }))
	mux.HandleFunc("POST /_sim/paypal/events/flush", reply(func(r *http.Request) (any, error) { return s.paypal.FlushEvents(r.Context()) }))
	mux.HandleFunc("POST /_sim/stripe/events/flush", reply(func(r *http.Request) (any, error) { return s.FlushEvents(r.Context()) }))
	mux.HandleFunc("POST /_sim/adyen/forget-keys", show(func() any { return map[string]int{"forgotten": s.adyen.ForgetKeys()} }))

	// Any method on any path: ServeMux never answers a plain 404 or 405
	// (and no "/_sim/", or it would redirect /_sim).
	mux.HandleFunc("/", s.serveUnknown)
	return mux
}

// serveHTTP routes a request by the table, but for what ServeMux routes
// unlike Stripe: a path it would clean (/v1//refunds) and a HEAD.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodHead || !routable(r.URL.EscapedPath()) {
		s.serveUnknown(w, r)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// routable reports whether ServeMux routes p as it is, not redirected.
func routable(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	c := path.Clean(p)
	return c == p || c != "/" && c+"/" == p
}

// serveUnknown answers a request no route takes: under /_sim/ with the
// control endpoints' error, elsewhere as Stripe does, as route "other".
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
