package stripesim

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/refundkit/refundkit/refund/sim"
)

// servePost runs a POST through Stripe's idempotency layer into fn: a
// request with a key holds it while it runs, and an answer of the endpoint
// is saved under it for every later request with the key.
func (s *Server) servePost(w http.ResponseWriter, r *http.Request, rt route, fn endpoint, c apiCall, apiKey, reqID string) {
	f, seq := c.f, c.seq
	key := strings.TrimSpace(r.Header.Get("Idempotency-Key"))
	if len(key) > 255 {
		s.core.Pause(f, seq)
		a := invalid("", "", "Idempotency keys can be at most 255 characters long.")
		s.countInvalid(a)
		writeAnswer(w, a.status, a.body, reqID, "", false)
		return
	}
	c.key = key
	p := sim.Post{Method: r.Method, Path: r.URL.Path, Params: r.Form.Encode(), TTL: s.keyTTL, Now: s.now(),
		Seq: seq, F: f, MayTimeOut: rt == routeCreateRefund}
	if key != "" {
		p.Scope = apiKey + "\x00" + key
	}
	// The create hook and the endpoint run with the key held; they may
	// outlive the handler, so they take nothing from r.
	s.core.ServePost(w, p, stripePost{s, key, r.URL.Path, reqID, f.GatewayStripeBody}, func() sim.Answer {
		a := fn(c)
		s.countInvalid(a)
		return sim.Answer{Status: a.status, Body: a.body, Save: a.save, Drop: a.drop, Gateway: a.gateway, RequestID: reqID}
	})
}

// stripePost writes Stripe's answers for the idempotency layer.
type stripePost struct {
	s                *Server
	key, path, reqID string
	stripeBody       bool // the gateway's answers in Stripe's shape
}

func (p stripePost) Known(w http.ResponseWriter, v sim.Verdict, saved sim.KeyEntry) {
	p.s.writeKeyVerdict(w, v, saved, p.key, p.path, p.reqID)
}

func (p stripePost) Write(w http.ResponseWriter, a sim.Answer) {
	writeAnswer(w, a.Status, a.Body, p.reqID, p.key, false)
}

func (p stripePost) Gateway(w http.ResponseWriter, status int) {
	writeGatewayAnswer(w, status, p.stripeBody)
}

// writeKeyVerdict answers a request whose key is not new: the saved answer
// replayed, or Stripe's 409 or 400.
func (s *Server) writeKeyVerdict(w http.ResponseWriter, v sim.Verdict, saved sim.KeyEntry, key, path, reqID string) {
	switch v {
	case sim.KeyReplay:
		s.core.Count.Replayed.Add(1)
		writeAnswer(w, saved.Status, saved.Body, saved.RequestID, key, true)
	case sim.KeyInUse:
		s.core.Count.KeyInUse.Add(1)
		body := errorBody(apiError{Type: typeIdempotency, Code: "idempotency_key_in_use",
			Message: fmt.Sprintf("There is currently another in-progress request using this Idempotency Key (that probably means you submitted twice, and the other request is still going through): '%s'. Please try again later.", key)})
		writeAnswer(w, http.StatusConflict, body, reqID, key, false)
	case sim.KeyEndpointMismatch:
		s.stats.keyMismatch.Add(1)
		body := errorBody(apiError{Type: typeIdempotency,
			Message: fmt.Sprintf("Keys for idempotent requests can only be used for the same endpoint they were first used for ('%s' vs '%s'). Try using a key other than '%s' if you meant to execute a different request.", saved.Path, path, key)})
		writeAnswer(w, http.StatusBadRequest, body, reqID, key, false)
	case sim.KeyParamsMismatch:
		s.stats.keyMismatch.Add(1)
		body := errorBody(apiError{Type: typeIdempotency,
			Message: fmt.Sprintf("Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '%s' if you meant to execute a different request.", key)})
		writeAnswer(w, http.StatusBadRequest, body, reqID, key, false)
	}
}
