package stripesim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/refundkit/refundkit/refund/sim"
	"github.com/refundkit/refundkit/refund/sim/adyensim"
	"github.com/refundkit/refundkit/refund/sim/paypalsim"
)

// maxControlBody bounds a control request's upload.
const maxControlBody = 256 << 20

// The control endpoints, routed under /_sim/ (routes.go lists them).

func (s *Server) setFaults(w http.ResponseWriter, r *http.Request) {
	var f Faults
	err := json.NewDecoder(io.LimitReader(r.Body, maxControlBody)).Decode(&f)
	if err == nil {
		err = s.SetFaults(f)
	}
	if err != nil {
		controlError(w, http.StatusBadRequest, "faults: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, f)
}

// reply is a control endpoint that answers what fn returns, or nothing
// when fn fails: the client went away, or gave up waiting.
func reply(fn func(r *http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if v, err := fn(r); err == nil {
			writeJSON(w, http.StatusOK, v)
		}
	}
}

// show is a control endpoint that answers what fn returns.
func show(fn func() any) http.HandlerFunc {
	return reply(func(*http.Request) (any, error) { return fn(), nil })
}

// addSeeds is a control endpoint that adds what read reads from the body.
func addSeeds[T any](read func(io.Reader, string) ([]T, error), add func(...T) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		seeds, err := read(io.LimitReader(r.Body, maxControlBody), "<body>")
		if err != nil {
			controlError(w, http.StatusBadRequest, err.Error())
			return
		}
		if err := add(seeds...); err != nil {
			controlError(w, http.StatusConflict, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, map[string]int{"added": len(seeds)})
	}
}

// jsonLines is a control endpoint that answers what list returns as JSON
// lines, escaping HTML in them only if escapeHTML.
func jsonLines[T any](escapeHTML bool, list func() []T) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		bw := bufio.NewWriter(w)
		enc := json.NewEncoder(bw)
		enc.SetEscapeHTML(escapeHTML)
		for _, v := range list() {
			if err := enc.Encode(v); err != nil {
				return // the client went away
			}
		}
		bw.Flush()
	}
}

// allRefunds is Stripe's refunds, then PayPal's.
func (s *Server) allRefunds() []any {
	return append(sim.Map(s.Refunds(), func(r Refund) any { return r }),
		sim.Map(s.paypal.Refunds(), func(r paypalsim.Refund) any { return r })...)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // messages quote "<body>" and ids as they are
	if err := enc.Encode(v); err != nil {
		controlError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// controlError answers a control request with {"error": "..."}.
func controlError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// counters are the Stripe routes' own statistics.
type counters struct {
	refundsCanceled atomic.Int64
	keyMismatch     atomic.Int64

	rateLimitedReasons [numLimitReasons]atomic.Int64
	rateLimitedRoutes  [numRoutes]atomic.Int64
}

// Stats counts what the simulator did since it started: API requests by
// route (every API's), then counters of all APIs (sim.Counters), Stripe's
// own, and PayPal's and Adyen's own.
type Stats struct {
	Requests                 map[string]int64 `json:"requests"`
	RefundsCreated           int64            `json:"refunds_created"`
	RefundsCanceled          int64            `json:"refunds_canceled"`
	RateLimited              int64            `json:"rate_limited"`
	ErrorsBeforeCommit       int64            `json:"errors_before_commit"`
	ErrorsAfterCommit        int64            `json:"errors_after_commit"`
	Dropped                  int64            `json:"dropped"`
	Replayed                 int64            `json:"replayed"`
	KeyInUse                 int64            `json:"key_in_use"`
	KeyMismatch              int64            `json:"key_mismatch"` // 400 idempotency_error
	Unauthorized             int64            `json:"unauthorized"`
	InvalidRequests          int64            `json:"invalid_requests"`
	RefundsRefused           int64            `json:"refunds_refused"`
	GatewayTimeouts          int64            `json:"gateway_timeouts"`
	GatewayErrorsAfterCommit int64            `json:"gateway_errors_after_commit"`
	// GatewayInFlight is a gauge: requests behind a gateway timeout now.
	GatewayInFlight int64 `json:"gateway_in_flight"`
	// RateLimitedReasons counts the rate limits' 429s by their
	// Stripe-Rate-Limited-Reason; RateLimitedRoutes, every 429 by route.
	RateLimitedReasons map[string]int64 `json:"rate_limited_reasons"`
	RateLimitedRoutes  map[string]int64 `json:"rate_limited_routes"`
	// Events are Stripe's webhook events' counts.
	Events EventStats      `json:"events"`
	PayPal paypalsim.Stats `json:"paypal"`
	Adyen  adyensim.Stats  `json:"adyen"`
}

// Stats returns the counters so far.
func (s *Server) Stats() Stats {
	c, k := &s.stats, &s.core.Count
	st := Stats{
		Requests:           s.core.Requests(),
		RefundsCreated:     k.RefundsCreated.Load(),
		RefundsCanceled:    c.refundsCanceled.Load(),
		RateLimited:        k.RateLimited.Load(),
		ErrorsBeforeCommit: k.ErrorsBefore.Load(),
		ErrorsAfterCommit:  k.ErrorsAfter.Load(),
		Dropped:            k.Dropped.Load(),
		Replayed:           k.Replayed.Load(),
		KeyInUse:           k.KeyInUse.Load(),
		KeyMismatch:        c.keyMismatch.Load(),
		Unauthorized:       k.Unauthorized.Load(),
		InvalidRequests:    k.InvalidRequests.Load(),
		RefundsRefused:     k.RefundsRefused.Load(),

		GatewayTimeouts:          k.GatewayTimeouts.Load(),
		GatewayErrorsAfterCommit: k.GatewayErrorsAfter.Load(),
		GatewayInFlight:          s.core.BackgroundRunning(),
		Events:                   s.EventStats(),
		PayPal:                   s.paypal.Stats(),
		Adyen:                    s.adyen.Stats(),
	}
	st.RateLimitedReasons = make(map[string]int64, numLimitReasons)
	for i, reason := range rateLimitedReasons {
		st.RateLimitedReasons[reason] = c.rateLimitedReasons[i].Load()
	}
	st.RateLimitedRoutes = make(map[string]int64, numRoutes)
	for r := range numRoutes {
		st.RateLimitedRoutes[routeNames[r]] = c.rateLimitedRoutes[r].Load()
	}
	return st
}
