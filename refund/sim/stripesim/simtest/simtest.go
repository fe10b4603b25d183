// Package simtest serves the simulator (stripesim, every API on one URL) to
// a test, as httptest serves a handler, and counts calls from its Stats.
package simtest

import (
	"bufio"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/refundkit/refundkit/refund/sim/stripesim"
)

// Routes, as the simulator's Stats name them.
const (
	Create      = "POST /v1/refunds"
	List        = "GET /v1/refunds"
	Cancel      = "POST /v1/refunds/{id}/cancel"
	GetCharge   = "GET /v1/charges/{id}"
	ListCharges = "GET /v1/charges"

	// PayPal's routes (paypalsim.RouteNames).
	PayPalToken      = "POST /v1/oauth2/token"
	PayPalRefund     = "POST /v2/payments/captures/{id}/refund"
	PayPalGetRefund  = "GET /v2/payments/refunds/{id}"
	PayPalGetCapture = "GET /v2/payments/captures/{id}"
	PayPalGetOrder   = "GET /v2/checkout/orders/{id}"
)

// Sim is a simulator served on loopback for one test.
type Sim struct {
	*stripesim.Server
	URL  string // its base URL
	http *httptest.Server

	mu   sync.Mutex
	base map[string]int64 // Stats().Requests at the last Reset
	// onAnswer, when set, sees the status of every answer it gives.
	onAnswer atomic.Pointer[func(status int)]
}

// Start serves a simulator made with cfg until the test ends.
func Start(t testing.TB, cfg stripesim.Config) *Sim {
	t.Helper()
	s := Serve(cfg)
	t.Cleanup(s.Close)
	return s
}

// Serve serves a simulator made with cfg until Close, outside a test.
func Serve(cfg stripesim.Config) *Sim {
	s := &Sim{Server: stripesim.New(cfg)}
	s.http = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		s.Handler().ServeHTTP(rec, r)
		if fn := s.onAnswer.Load(); fn != nil {
			(*fn)(rec.status)
		}
	}))
	s.URL = s.http.URL
	return s
}

// Close stops serving, then the simulator.
func (s *Sim) Close() {
	s.http.Close()
	s.Server.Close()
}

// Calls counts the requests to routes since the last Reset.
func (s *Sim) Calls(routes ...string) int64 {
	req := s.Stats().Requests
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, r := range routes {
		n += req[r] - s.base[r]
	}
	return n
}

// Creates counts refund creations (POST /v1/refunds) since the last Reset.
func (s *Sim) Creates() int64 { return s.Calls(Create) }

// Lists counts the look-ups of a payment's refunds since the last Reset:
// refund lists (GET /v1/refunds) and reads of a charge (GET
// /v1/charges/{id}, its refunds expanded or not).
func (s *Sim) Lists() int64 { return s.Calls(List, GetCharge) }

// PayPalCreates counts PayPal refund requests since the last Reset.
func (s *Sim) PayPalCreates() int64 { return s.Calls(PayPalRefund) }

// PayPalLookups counts PayPal look-ups since the last Reset.
func (s *Sim) PayPalLookups() int64 {
	return s.Calls(PayPalGetRefund, PayPalGetCapture, PayPalGetOrder)
}

// Reset starts the counts of Calls again from zero.
func (s *Sim) Reset() {
	req := s.Stats().Requests
	s.mu.Lock()
	s.base = req
	s.mu.Unlock()
}

// OnAnswer makes fn see the status of every answer from now on.
func (s *Sim) OnAnswer(fn func(status int)) { s.onAnswer.Store(&fn) }

// statusRecorder passes an answer through, noting its status.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

// Hijack lets the simulator drop connections through the recorder.
func (r *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return r.ResponseWriter.(http.Hijacker).Hijack()
}
