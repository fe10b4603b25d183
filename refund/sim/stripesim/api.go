package stripesim

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/refundkit/refundkit/refund/sim"
)

// endpoint is what one route does once a request got through the layers in
// front of it (key, rate limits, form, idempotency).
type endpoint func(c apiCall) answer

// apiCall is an API request as its endpoint sees it. It holds values only: a
// request behind a gateway timeout runs on after its handler returned.
type apiCall struct {
	method, path string // as the request named them, for error messages
	id           string // the path's {id}, for the routes that take one
	form         url.Values
	key          string  // the idempotency key; empty without one (or a GET)
	f            *Faults // the knobs in force when the request arrived
	seq          uint64  // arrival number, for fault draws
}

// answer is the outcome of an API request before it is written.
type answer struct {
	status int
	body   []byte
	// save: the endpoint ran, so Stripe saves this answer under the
	// idempotency key. Validation errors are not saved: the key stays free.
	save bool
	// drop: close the connection instead of writing the answer.
	drop bool
	// gateway: a gateway's error reaches the client instead of the answer.
	gateway bool
}

// api is the handler of route rt: the request runs through serveAPI's
// layers into fn.
func (s *Server) api(rt route, fn endpoint) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if strings.Contains(id, "/") {
			// An escaped slash (re%2Fx): no id of Stripe's, and the
			// decoded path has one segment more than the pattern.
			s.serveUnknown(w, r)
			return
		}
		s.serveAPI(w, r, rt, fn, id)
	})
}

// Stripe's 401s: no key, or not a test-mode key.
var (
	noKeyBody = errorBody(apiError{Type: typeInvalid,
		Message: "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY')."})
	badKeyBody = errorBody(apiError{Type: typeInvalid,
		Message: "Invalid API Key provided: the simulator accepts only test-mode keys (sk_test_... or rk_test_...)"})
)

// serveAPI runs an API request through what stands in front of every
// endpoint, in Stripe's order: count it, check the key, the rate limits,
// parse the form; then a POST goes through the idempotency layer, and a
// GET (or an unknown request) to its endpoint after its latency.
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request, rt route, fn endpoint, id string) {
	s.stats.requests[rt].Add(1)
	seq, f := s.core.Arrive()
	reqID := sim.Padded("req_sim", 10, int(seq))

	apiKey, ok := bearerKey(r)
	if !ok {
		s.core.Count.Unauthorized.Add(1)
		s.core.Pause(f, seq)
		body := badKeyBody
		if r.Header.Get("Authorization") == "" {
			body = noKeyBody
		}
		writeAnswer(w, http.StatusUnauthorized, body, reqID, "", false)
		return
	}
	// Limits come before the idempotency layer: a 429 neither holds nor
	// saves the key, as Stripe saves answers only once an endpoint runs.
	if s.rateLimited(w, rt, f, seq, reqID) {
		return
	}
	if err := r.ParseForm(); err != nil {
		s.core.Pause(f, seq)
		a := invalid("", "", "Invalid request: the form body could not be parsed")
		s.countInvalid(a)
		writeAnswer(w, a.status, a.body, reqID, "", false)
		return
	}
	c := apiCall{method: r.Method, path: r.URL.Path, id: id, form: r.Form, f: f, seq: seq}
	if r.Method == http.MethodPost {
		s.servePost(w, r, rt, fn, c, apiKey, reqID)
		return
	}
	s.core.Pause(f, seq)
	a := fn(c)
	s.countInvalid(a)
	writeAnswer(w, a.status, a.body, reqID, "", false)
}

// bearerKey returns the API key of the request if it is a test-mode key.
// The key is compared and used as a scope, never logged or echoed.
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

// writeAnswer writes a JSON answer with Stripe's response headers.
func writeAnswer(w http.ResponseWriter, status int, body []byte, reqID, key string, replayed bool) {
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	h["Request-Id"] = []string{reqID}
	if key != "" {
		h["Idempotency-Key"] = []string{key}
	}
	if replayed {
		h["Idempotent-Replayed"] = []string{"true"}
	}
	w.WriteHeader(status)
	w.Write(body)
}

// parseExpandOnly accepts only expand[] with the one expandable field.
func parseExpandOnly(form url.Values, field string) (expand bool, a answer, ok bool) {
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
	return expand, answer{}, true
}

// isArrayParam reports whether name is base[] or base[N].
func isArrayParam(name, base string) bool {
	rest, ok := strings.CutPrefix(name, base+"[")
	if !ok || !strings.HasSuffix(rest, "]") {
		return false
	}
	idx := rest[:len(rest)-1]
	for i := 0; i < len(idx); i++ {
		if idx[i] < '0' || idx[i] > '9' {
			return false
		}
	}
	return true
}

// emptyMetadata is the metadata of an object that has none: {} on the
// wire, as Stripe writes it.
var emptyMetadata = map[string]string{}

// optional is a nullable string field: nil for "".
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
