package stripesim

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/refundkit/refundkit/refund/sim"
)

// endpoint is what a route does once past key, limits, form and key.
type endpoint func(c apiCall) sim.Answer

// apiCall is a request as its endpoint sees it: values only, as it may
// outlive its handler.
type apiCall struct {
	method, path string // as the request named them, for error messages
	id           string // the path's {id}, for the routes that take one
	form         url.Values
	key          string  // the idempotency key; empty without one (or a GET)
	f            *Faults // the knobs in force when the request arrived
	seq          uint64  // arrival number, for fault draws
}

// api is the handler of route rt, through serveAPI into fn.
func (s *Server) api(rt route, fn endpoint) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if strings.Contains(id, "/") {
			// An escaped slash (re%2Fx) is no id of Stripe's.
			s.serveUnknown(w, r)
			return
		}
		s.serveAPI(w, r, rt, fn, id)
	})
}

// serveAPI runs a request through what stands in front of every endpoint,
// in Stripe's order: key, rate limits, form; a POST through the keys.
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request, rt route, fn endpoint, id string) {
	s.core.Route(routeNames[rt]).Add(1)
	s.settleDue() // what is due shows settled, whether or not the settler ran
	seq, f := s.core.Arrive()
	reqID := sim.Padded("req_sim", 10, int(seq))
	write := func(answer func() sim.Answer) { // after the latency
		s.core.Pause(f, seq)
		a := answer()
		s.core.CountInvalid(a)
		writeAnswer(w, a.Status, a.Body, reqID, "", false)
	}
	apiKey, ok := bearerKey(r)
	if !ok {
		s.core.Count.Unauthorized.Add(1)
		body := badKeyBody
		if r.Header.Get("Authorization") == "" {
			body = noKeyBody
		}
		write(func() sim.Answer { return sim.Answer{Status: http.StatusUnauthorized, Body: body} })
		return
	}
	if s.rateLimited(w, rt, f, seq, reqID) {
		return
	}
	if err := r.ParseForm(); err != nil {
		write(func() sim.Answer { return invalid("", "", "Invalid request: the form body could not be parsed") })
		return
	}
	c := apiCall{method: r.Method, path: r.URL.Path, id: id, form: r.Form, f: f, seq: seq}
	if r.Method != http.MethodPost {
		write(func() sim.Answer { return fn(c) })
		return
	}
	key := strings.TrimSpace(r.Header.Get("Idempotency-Key"))
	if len(key) > 255 {
		write(func() sim.Answer { return invalid("", "", "Idempotency keys can be at most 255 characters long.") })
		return
	}
	c.key = key
	p := sim.Post{Scope: sim.Scope(apiKey+"\x00", key), Method: r.Method, Path: r.URL.Path, Params: r.Form.Encode(),
		TTL: s.keyTTL, Now: s.now(), Seq: seq, F: f, MayTimeOut: rt == routeCreateRefund}
	s.core.ServePost(w, p, stripePost{s, key, r.URL.Path, reqID}, func() sim.Answer {
		a := fn(c)
		a.RequestID = reqID
		return a
	})
}

// stripePost writes Stripe's answers for the idempotency layer.
type stripePost struct {
	s                *Server
	key, path, reqID string
}

// Known answers a known key: its replay, a 409 or a 400.
func (p stripePost) Known(w http.ResponseWriter, v sim.Verdict, saved sim.KeyEntry) {
	s, key, path, reqID := p.s, p.key, p.path, p.reqID
	var msg string
	switch v {
	case sim.KeyReplay:
		s.core.Count.Replayed.Add(1)
		writeAnswer(w, saved.Status, saved.Body, saved.RequestID, key, true)
		return
	case sim.KeyInUse:
		s.core.Count.KeyInUse.Add(1)
		body := errorBody(sim.Error{Type: typeIdempotency, Code: "idempotency_key_in_use",
			Message: fmt.Sprintf("There is currently another in-progress request using this Idempotency Key (that probably means you submitted twice, and the other request is still going through): '%s'. Please try again later.", key)})
		writeAnswer(w, http.StatusConflict, body, reqID, key, false)
		return
	case sim.KeyEndpointMismatch:
		msg = fmt.Sprintf("Keys for idempotent requests can only be used for the same endpoint they were first used for ('%s' vs '%s'). Try using a key other than '%s' if you meant to execute a different request.", saved.Path, path, key)
	case sim.KeyParamsMismatch:
		msg = fmt.Sprintf("Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '%s' if you meant to execute a different request.", key)
	}
	s.stats.keyMismatch.Add(1)
	writeAnswer(w, http.StatusBadRequest, errorBody(sim.Error{Type: typeIdempotency, Message: msg}), reqID, key, false)
}

func (p stripePost) Write(w http.ResponseWriter, a sim.Answer) {
	writeAnswer(w, a.Status, a.Body, p.reqID, p.key, false)
}

func (p stripePost) GatewayBody(status int) []byte {
	return errorBody(sim.Error{Type: typeAPI, Message: sim.GatewayMessage(status)})
}

// bearerKey returns the request's API key if it is a test-mode key.
func bearerKey(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	key, ok := strings.CutPrefix(h, "Bearer ")
	if !ok {
		// curl -u sk_test_...: sends the key as the basic-auth user name.
		enc, isBasic := strings.CutPrefix(h, "Basic ")
		if !isBasic {
			return "", false
		}
		raw, err := base64.StdEncoding.DecodeString(enc)
		if err != nil {
			return "", false
		}
		key, _, _ = strings.Cut(string(raw), ":")
	}
	key = strings.TrimSpace(key)
	for _, prefix := range []string{"sk_test_", "rk_test_"} {
		if rest, ok := strings.CutPrefix(key, prefix); ok && rest != "" && !strings.ContainsAny(rest, " \t") {
			return key, true
		}
	}
	return "", false
}

// parseExpandOnly accepts only expand[] with the one expandable field.
func parseExpandOnly(form url.Values, field string) (expand bool, a sim.Answer, ok bool) {
	for name, vals := range form {
		if !isArrayParam(name, "expand") {
			return false, invalid("parameter_unknown", name, "Received unknown parameter: %s", name), false
		}
		for _, v := range vals {
			if v != field {
				return false, invalid("", "expand", "This property cannot be expanded (%s).", v), false
			}
			expand = true
		}
	}
	return expand, sim.Answer{}, true
}

// isArrayParam reports whether name is base[] or base[N].
func isArrayParam(name, base string) bool {
	rest, ok := strings.CutPrefix(name, base+"[")
	if !ok || !strings.HasSuffix(rest, "]") {
		return false
	}
	return strings.TrimLeft(rest[:len(rest)-1], "0123456789") == ""
}

// emptyMetadata is {}, as Stripe writes no metadata.
var emptyMetadata = map[string]string{}

// optional is a nullable string field: nil for "".
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Stripe's error types, as stripe-go decodes them.
const (
	typeAPI         = "api_error"
	typeIdempotency = "idempotency_error"
	typeInvalid     = "invalid_request_error"
)

// errorBody is Stripe's error envelope around e.
func errorBody(e sim.Error) []byte {
	return sim.MustJSON(struct {
		Error sim.Error `json:"error"`
	}{e})
}

// found is a 200 with v.
func found(v any) sim.Answer { return sim.Answer{Status: http.StatusOK, Body: sim.MustJSON(v)} }

// invalid is a validation error: 400, not saved under the key.
func invalid(code, param, format string, args ...any) sim.Answer {
	return sim.Answer{Status: http.StatusBadRequest, Body: errorBody(sim.Error{Type: typeInvalid, Code: code, Param: param, Message: fmt.Sprintf(format, args...)})}
}

// refused is an error of the endpoint itself, saved under the key.
func refused(status int, e sim.Error) sim.Answer {
	return sim.Answer{Status: status, Body: errorBody(e), Save: true}
}

// missing is Stripe's 404 for an id it does not know.
func missing(kind, param, id string) sim.Answer {
	return refused(http.StatusNotFound, sim.Error{Type: typeInvalid, Code: "resource_missing", Param: param,
		Message: fmt.Sprintf("No such %s: '%s'", kind, id)})
}

// internalError is Stripe's 500, which the fault knobs inject (saved).
var internalError = refused(http.StatusInternalServerError, sim.Error{Type: typeAPI, Message: "An unknown error occurred"})

// Stripe's 401s: no key, or not a test-mode key.
var (
	noKeyBody = errorBody(sim.Error{Type: typeInvalid,
		Message: "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY')."})
	badKeyBody = errorBody(sim.Error{Type: typeInvalid,
		Message: "Invalid API Key provided: the simulator accepts only test-mode keys (sk_test_... or rk_test_...)"})
)

// rateLimitBody is the body of Stripe's 429s.
var rateLimitBody = errorBody(sim.Error{Type: typeInvalid, Code: "rate_limit",
	Message: "Request rate limit exceeded. Learn more about rate limits here https://stripe.com/docs/rate-limits."})

// writeAnswer writes a JSON answer with Stripe's response headers.
func writeAnswer(w http.ResponseWriter, status int, body []byte, reqID, key string, replayed bool) {
	rep := ""
	if replayed {
		rep = "true"
	}
	sim.Write(w, status, body, "Request-Id", reqID, "Idempotency-Key", key, "Idempotent-Replayed", rep)
}
