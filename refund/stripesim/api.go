package stripesim

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

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

// apiError is the object inside Stripe's error envelope.
type apiError struct {
	Type    string `json:"type"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
	Param   string `json:"param,omitempty"`
	Charge  string `json:"charge,omitempty"`
}

// Stripe's error types, as stripe-go decodes them.
const (
	typeAPI         = "api_error"
	typeIdempotency = "idempotency_error"
	typeInvalid     = "invalid_request_error"
)

func errorBody(e apiError) []byte {
	b, err := json.Marshal(struct {
		Error apiError `json:"error"`
	}{e})
	if err != nil {
		panic(err) // only strings: cannot fail
	}
	return b
}

// invalid is a validation error: 400, not saved under the key.
func invalid(code, param, format string, args ...any) answer {
	return answer{status: http.StatusBadRequest, body: errorBody(apiError{Type: typeInvalid, Code: code, Param: param, Message: fmt.Sprintf(format, args...)})}
}

// refused is an error of the endpoint itself, saved under the key.
func refused(status int, e apiError) answer {
	return answer{status: status, body: errorBody(e), save: true}
}

func missing(kind, param, id string) answer {
	return refused(http.StatusNotFound, apiError{Type: typeInvalid, Code: "resource_missing", Param: param,
		Message: fmt.Sprintf("No such %s: '%s'", kind, id)})
}

var (
	internalErrorBody = errorBody(apiError{Type: typeAPI, Message: "An unknown error occurred"})
	rateLimitBody     = errorBody(apiError{Type: typeInvalid, Code: "rate_limit",
		Message: "Request rate limit exceeded. Learn more about rate limits here https://stripe.com/docs/rate-limits."})
	noKeyBody = errorBody(apiError{Type: typeInvalid,
		Message: "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY')."})
	badKeyBody = errorBody(apiError{Type: typeInvalid,
		Message: "Invalid API Key provided: the simulator accepts only test-mode keys (sk_test_... or rk_test_...)"})
)

// serveHTTP is the simulator's handler: control endpoints, then the API.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/_sim/") {
		s.serveControl(w, r)
		return
	}
	rt, id := classify(r.Method, r.URL.Path)
	s.stats.requests[rt].Add(1)
	seq := s.reqSeq.Add(1)
	f := s.faults.Load()
	reqID := padded("req_sim", int(seq))

	apiKey, ok := bearerKey(r)
	if !ok {
		s.stats.unauthorized.Add(1)
		s.pause(f, seq)
		body := badKeyBody
		if r.Header.Get("Authorization") == "" {
			body = noKeyBody
		}
		writeAnswer(w, http.StatusUnauthorized, body, reqID, "", false)
		return
	}
	// Limits come before the idempotency layer: a 429 neither holds nor
	// saves the key, as Stripe saves answers only once an endpoint runs.
	if f.RateLimitShare > 0 && draw(s.seed, seq, knobRateLimit) < f.RateLimitShare {
		s.stats.rateLimited.Add(1)
		s.stats.rateLimitedRoutes[rt].Add(1)
		s.pause(f, seq)
		writeAnswer(w, http.StatusTooManyRequests, rateLimitBody, reqID, "", false)
		return
	}
	if lim := s.limiter.Load(); lim != nil {
		if reason, ok := lim.admit(rt); !ok {
			s.stats.rateLimited.Add(1)
			s.stats.rateLimitedRoutes[rt].Add(1)
			s.stats.rateLimitedReasons[reason].Add(1)
			s.pause(f, seq)
			w.Header()["Stripe-Rate-Limited-Reason"] = []string{rateLimitedReasons[reason]}
			writeAnswer(w, http.StatusTooManyRequests, rateLimitBody, reqID, "", false)
			return
		}
	}
	if err := r.ParseForm(); err != nil {
		s.pause(f, seq)
		a := invalid("", "", "Invalid request: the form body could not be parsed")
		s.countInvalid(a)
		writeAnswer(w, a.status, a.body, reqID, "", false)
		return
	}
	if r.Method == http.MethodPost {
		s.servePost(w, r, rt, id, apiKey, reqID, f, seq)
		return
	}
	s.pause(f, seq)
	var a answer
	switch rt {
	case routeListRefunds:
		a = s.listRefunds(r.Form)
	case routeGetRefund:
		a = s.getRefund(id, r.Form)
	case routeGetCharge:
		a = s.getCharge(id, r.Form)
	case routeListCharges:
		a = s.listCharges(r.Form)
	default:
		a = unrecognized(r.Method, r.URL.Path)
	}
	s.countInvalid(a)
	writeAnswer(w, a.status, a.body, reqID, "", false)
}

func unrecognized(method, path string) answer {
	return answer{status: http.StatusNotFound, body: errorBody(apiError{Type: typeInvalid,
		Message: fmt.Sprintf("Unrecognized request URL (%s: %s).", method, path)})}
}

func (s *Server) countInvalid(a answer) {
	if a.status == http.StatusBadRequest && !a.save {
		s.stats.validationErrors.Add(1)
	}
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

// servePost runs a POST through Stripe's idempotency layer.
func (s *Server) servePost(w http.ResponseWriter, r *http.Request, rt route, id, apiKey, reqID string, f *Faults, seq uint64) {
	key := strings.TrimSpace(r.Header.Get("Idempotency-Key"))
	if len(key) > 255 {
		s.pause(f, seq)
		a := invalid("", "", "Idempotency keys can be at most 255 characters long.")
		s.countInvalid(a)
		writeAnswer(w, a.status, a.body, reqID, "", false)
		return
	}
	var scope string
	var held *keyEntry
	if key != "" {
		scope = apiKey + "\x00" + key
		saved, e, v := s.keys.begin(scope, r.Method, r.URL.Path, r.Form.Encode(), s.now(), s.keyTTL)
		if v != keyNew {
			s.pause(f, seq)
			s.writeKeyVerdict(w, v, saved, key, r.URL.Path, reqID)
			return
		}
		held = e
	}
	// The key is held from here: latency and the hook keep it in flight.
	// run may outlive the handler, so it takes nothing from r but values.
	form, method, path := r.Form, r.Method, r.URL.Path
	run := func() answer {
		s.pause(f, seq)
		var a answer
		switch rt {
		case routeCreateRefund:
			if h := s.hook.Load(); h != nil {
				(*h)(key)
			}
			a = s.createRefund(form, key, f, seq)
		case routeCancelRefund:
			a = s.cancelRefund(id, form)
		default:
			a = unrecognized(method, path)
		}
		s.countInvalid(a)
		if held != nil {
			if a.save {
				s.keys.finish(scope, held, a.status, a.body, reqID)
			} else {
				s.keys.abandon(scope, held)
			}
		}
		return a
	}
	if rt == routeCreateRefund && f.GatewayTimeoutShare > 0 && draw(s.seed, seq, knobGatewayTimeout) < f.GatewayTimeoutShare {
		// The gateway gives up at once; the request goes on behind it.
		s.stats.gatewayTimeouts.Add(1)
		background := s.goBackground(func() { run() })
		writeGatewayAnswer(w, f.gatewayStatus(http.StatusGatewayTimeout), f.GatewayStripeBody)
		if !background { // the server is closing: finish it here
			run()
		}
		return
	}
	a := run()
	switch {
	case a.drop:
		s.stats.dropped.Add(1)
		dropConnection(w)
	case a.gateway:
		s.stats.gatewayErrorsAfter.Add(1)
		writeGatewayAnswer(w, f.gatewayStatus(http.StatusBadGateway), f.GatewayStripeBody)
	default:
		writeAnswer(w, a.status, a.body, reqID, key, false)
	}
}

func (s *Server) writeKeyVerdict(w http.ResponseWriter, v verdict, saved keyEntry, key, path, reqID string) {
	switch v {
	case keyReplay:
		s.stats.replayed.Add(1)
		writeAnswer(w, saved.status, saved.body, saved.requestID, key, true)
	case keyInUse:
		s.stats.keyInUse.Add(1)
		body := errorBody(apiError{Type: typeIdempotency, Code: "idempotency_key_in_use",
			Message: fmt.Sprintf("There is currently another in-progress request using this Idempotency Key (that probably means you submitted twice, and the other request is still going through): '%s'. Please try again later.", key)})
		writeAnswer(w, http.StatusConflict, body, reqID, key, false)
	case keyEndpointMismatch:
		s.stats.keyMismatch.Add(1)
		body := errorBody(apiError{Type: typeIdempotency,
			Message: fmt.Sprintf("Keys for idempotent requests can only be used for the same endpoint they were first used for ('%s' vs '%s'). Try using a key other than '%s' if you meant to execute a different request.", saved.path, path, key)})
		writeAnswer(w, http.StatusBadRequest, body, reqID, key, false)
	case keyParamsMismatch:
		s.stats.keyMismatch.Add(1)
		body := errorBody(apiError{Type: typeIdempotency,
			Message: fmt.Sprintf("Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '%s' if you meant to execute a different request.", key)})
		writeAnswer(w, http.StatusBadRequest, body, reqID, key, false)
	}
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

// writeGatewayAnswer writes what a gateway in front of Stripe answers on
// its own: none of Stripe's headers (no Request-Id, no Idempotency-Key),
// and an HTML page unless stripeBody asks for Stripe's api_error shape.
func writeGatewayAnswer(w http.ResponseWriter, status int, stripeBody bool) {
	text := http.StatusText(status)
	if text == "" {
		text = "Server Error"
	}
	var body []byte
	h := w.Header()
	if stripeBody {
		body = errorBody(apiError{Type: typeAPI, Message: fmt.Sprintf("An error occurred at the gateway in front of the API (%d %s).", status, text)})
		h["Content-Type"] = []string{"application/json"}
	} else {
		body = fmt.Appendf(nil, "<html>\r\n<head><title>%d %s</title></head>\r\n<body>\r\n<center><h1>%d %s</h1></center>\r\n<hr><center>gateway</center>\r\n</body>\r\n</html>\r\n", status, text, status, text)
		h["Content-Type"] = []string{"text/html"}
	}
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(status)
	w.Write(body)
}

// dropConnection closes the connection without a byte of answer, as a
// load balancer or a network failure would after the work was done.
func dropConnection(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		// Not hijackable (HTTP/2, a recorder): abort the handler instead.
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	conn.Close()
}

// createParams are the parameters of POST /v1/refunds that the simulator
// acts on.
type createParams struct {
	charge, intent       string
	hasCharge, hasIntent bool
	amount               int64 // 0: the charge's remaining amount
	amountText           string
	hasAmount            bool
	reason               string
	hasReason            bool
	metadata             map[string]string
	expandCharge         bool
	badExpand            string
	badMetadata          bool
	unknown              string
}

// Parameters of POST /v1/refunds that stripe-go may send and the simulator
// accepts without acting on them.
var ignoredCreateParams = map[string]bool{
	"currency": true, "customer": true, "instructions_email": true, "origin": true,
	"refund_application_fee": true, "reverse_transfer": true,
}

func parseCreate(form url.Values) createParams {
	var p createParams
	for name, vals := range form {
		v := vals[len(vals)-1]
		switch {
		case name == "charge":
			p.charge, p.hasCharge = v, true
		case name == "payment_intent":
			p.intent, p.hasIntent = v, true
		case name == "amount":
			p.amountText, p.hasAmount = v, true
		case name == "reason":
			p.reason, p.hasReason = v, true
		case strings.HasPrefix(name, "metadata[") && strings.HasSuffix(name, "]"):
			k := name[len("metadata[") : len(name)-1]
			if v == "" {
				continue // an empty value unsets a key
			}
			if p.metadata == nil {
				p.metadata = make(map[string]string, 4)
			}
			p.metadata[k] = v
		case name == "metadata":
			p.badMetadata = p.badMetadata || v != "" // metadata= unsets all keys
		case isArrayParam(name, "expand"):
			for _, e := range vals {
				if e == "charge" {
					p.expandCharge = true
				} else if p.badExpand == "" || e < p.badExpand {
					p.badExpand = e
				}
			}
		case ignoredCreateParams[name]:
		default:
			if p.unknown == "" || name < p.unknown { // the same one every time
				p.unknown = name
			}
		}
	}
	return p
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

// validate checks the parameters as Stripe does before the endpoint runs.
func (p *createParams) validate() (answer, bool) {
	switch {
	case p.unknown != "":
		return invalid("parameter_unknown", p.unknown, "Received unknown parameter: %s", p.unknown), false
	case p.hasCharge && p.charge == "":
		return invalid("parameter_invalid_empty", "charge", "You passed an empty string for 'charge'. We assume empty values are an attempt to unset a parameter; however 'charge' cannot be unset. You should remove 'charge' from your request or supply a non-empty value."), false
	case p.hasIntent && p.intent == "":
		return invalid("parameter_invalid_empty", "payment_intent", "You passed an empty string for 'payment_intent'. We assume empty values are an attempt to unset a parameter; however 'payment_intent' cannot be unset. You should remove 'payment_intent' from your request or supply a non-empty value."), false
	case p.hasCharge && p.hasIntent:
		return invalid("", "payment_intent", "You cannot specify both a charge and a payment_intent. Please specify one or the other."), false
	case !p.hasCharge && !p.hasIntent:
		return invalid("parameter_missing", "charge", "One of the following params should be provided for this request: charge or payment_intent."), false
	}
	if p.hasAmount {
		n, err := strconv.ParseInt(p.amountText, 10, 64)
		if err != nil {
			return invalid("parameter_invalid_integer", "amount", "Invalid integer: %s", p.amountText), false
		}
		if n <= 0 {
			return invalid("parameter_invalid_integer", "amount", "This value must be greater than or equal to 1."), false
		}
		p.amount = n
	}
	if p.hasReason {
		if p.reason == "" {
			return invalid("parameter_invalid_empty", "reason", "You passed an empty string for 'reason'. We assume empty values are an attempt to unset a parameter; however 'reason' cannot be unset. You should remove 'reason' from your request or supply a non-empty value."), false
		}
		if !validReason(p.reason) {
			return invalid("", "reason", "Invalid reason: must be one of duplicate, fraudulent, or requested_by_customer"), false
		}
	}
	if p.badMetadata {
		return invalid("", "metadata", "Invalid object"), false
	}
	if msg := checkMetadata(p.metadata); msg != "" {
		return invalid("", "metadata", "Invalid metadata: %s", msg), false
	}
	if p.badExpand != "" {
		return invalid("", "expand", "This property cannot be expanded (%s).", p.badExpand), false
	}
	return answer{}, true
}

// createRefund is POST /v1/refunds after the idempotency layer.
func (s *Server) createRefund(form url.Values, key string, f *Faults, seq uint64) answer {
	p := parseCreate(form)
	if a, ok := p.validate(); !ok {
		return a
	}
	var ch *charge
	if p.hasCharge {
		if ch = s.chargeByID(p.charge); ch == nil {
			s.stats.refundsRefused.Add(1)
			return missing("charge", "charge", p.charge)
		}
	} else if ch = s.chargeByIntent(p.intent); ch == nil {
		s.stats.refundsRefused.Add(1)
		return missing("payment_intent", "payment_intent", p.intent)
	}
	if f.ErrorBeforeCommitShare > 0 && draw(s.seed, seq, knobErrorBeforeCommit) < f.ErrorBeforeCommitShare {
		s.stats.errorsBefore.Add(1)
		return answer{status: http.StatusInternalServerError, body: internalErrorBody, save: true}
	}
	status := StatusSucceeded
	if f.RequiresActionShare > 0 && draw(s.seed, seq, knobRequiresAction) < f.RequiresActionShare {
		status = StatusRequiresAction
	}
	ch.mu.Lock()
	remaining := ch.amount - ch.refunded
	if remaining == 0 {
		ch.mu.Unlock()
		s.stats.refundsRefused.Add(1)
		return refused(http.StatusBadRequest, apiError{Type: typeInvalid, Code: "charge_already_refunded", Charge: ch.id,
			Message: fmt.Sprintf("Charge %s has already been refunded.", ch.id)})
	}
	amount := p.amount
	if amount == 0 {
		amount = remaining
	}
	if amount > remaining {
		ch.mu.Unlock()
		s.stats.refundsRefused.Add(1)
		return refused(http.StatusBadRequest, apiError{Type: typeInvalid, Code: "amount_too_large", Param: "amount",
			Message: fmt.Sprintf("Refund amount (%s) is greater than unrefunded amount on charge (%s)", money(amount, ch.currency), money(remaining, ch.currency))})
	}
	re := s.addRefund(ch, amount, status, p.reason, p.metadata, key)
	obj := re.object(p.expandCharge)
	ch.mu.Unlock()
	s.stats.refundsCreated.Add(1)

	if f.ErrorAfterCommitShare > 0 && draw(s.seed, seq, knobErrorAfterCommit) < f.ErrorAfterCommitShare {
		s.stats.errorsAfter.Add(1)
		return answer{status: http.StatusInternalServerError, body: internalErrorBody, save: true}
	}
	a := answer{status: http.StatusOK, body: mustJSON(obj), save: true}
	switch {
	case f.GatewayErrorAfterCommitShare > 0 && draw(s.seed, seq, knobGatewayErrorAfterCommit) < f.GatewayErrorAfterCommitShare:
		a.gateway = true
	case f.DropAfterCommitShare > 0 && draw(s.seed, seq, knobDropAfterCommit) < f.DropAfterCommitShare:
		a.drop = true
	}
	return a
}

// money formats minor units as Stripe's messages do for two-decimal
// currencies ("$12.00" there; "12.00 usd" here).
func money(minor int64, currency string) string {
	return fmt.Sprintf("%d.%02d %s", minor/100, minor%100, currency)
}

// cancelRefund is POST /v1/refunds/{id}/cancel after the idempotency layer.
func (s *Server) cancelRefund(id string, form url.Values) answer {
	expand, a, ok := parseExpandOnly(form, "charge")
	if !ok {
		return a
	}
	re := s.refundByID(id)
	if re == nil {
		return missing("refund", "id", id)
	}
	ch := re.ch
	ch.mu.Lock()
	if st := *re.status.Load(); st != StatusRequiresAction {
		ch.mu.Unlock()
		return refused(http.StatusBadRequest, apiError{Type: typeInvalid,
			Message: fmt.Sprintf("Only refunds with a status of requires_action can be canceled; refund %s has status %s.", id, st)})
	}
	canceled := StatusCanceled
	re.status.Store(&canceled)
	ch.refunded -= re.amount
	obj := re.object(expand)
	ch.mu.Unlock()
	s.stats.refundsCanceled.Add(1)
	return answer{status: http.StatusOK, body: mustJSON(obj), save: true}
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

func (s *Server) getRefund(id string, form url.Values) answer {
	expand, a, ok := parseExpandOnly(form, "charge")
	if !ok {
		return a
	}
	re := s.refundByID(id)
	if re == nil {
		return missing("refund", "id", id)
	}
	var obj refundObject
	if expand {
		re.ch.mu.Lock()
		obj = re.object(true)
		re.ch.mu.Unlock()
	} else {
		obj = re.object(false)
	}
	return answer{status: http.StatusOK, body: mustJSON(obj)}
}

func (s *Server) getCharge(id string, form url.Values) answer {
	if _, a, ok := parseExpandOnly(form, ""); !ok {
		return a
	}
	ch := s.chargeByID(id)
	if ch == nil {
		return missing("charge", "id", id)
	}
	ch.mu.Lock()
	obj := ch.object()
	ch.mu.Unlock()
	return answer{status: http.StatusOK, body: mustJSON(obj)}
}

// listCharges is GET /v1/charges filtered by payment_intent, the one filter
// the tools use: the charges of a payment intent (here at most one).
func (s *Server) listCharges(form url.Values) answer {
	for name := range form {
		switch name {
		case "payment_intent", "limit":
		default:
			return invalid("parameter_unknown", name, "Received unknown parameter: %s", name)
		}
	}
	pi := form.Get("payment_intent")
	if pi == "" {
		return invalid("parameter_missing", "payment_intent", "The simulator lists charges only by payment_intent.")
	}
	list := chargeList{Object: "list", Data: []chargeObject{}, URL: "/v1/charges"}
	if ch := s.chargeByIntent(pi); ch != nil {
		ch.mu.Lock()
		list.Data = append(list.Data, ch.object())
		ch.mu.Unlock()
	}
	return answer{status: http.StatusOK, body: mustJSON(list)}
}

type chargeList struct {
	Object  string         `json:"object"`
	Data    []chargeObject `json:"data"`
	HasMore bool           `json:"has_more"`
	URL     string         `json:"url"`
}

// listRefunds is GET /v1/refunds: newest first, paged by starting_after or
// ending_before, filtered by charge or payment_intent.
func (s *Server) listRefunds(form url.Values) answer {
	var chargeID, intentID, after, before string
	limit := 10
	expand := false
	for name, vals := range form {
		v := vals[len(vals)-1]
		switch {
		case name == "charge":
			chargeID = v
		case name == "payment_intent":
			intentID = v
		case name == "starting_after":
			after = v
		case name == "ending_before":
			before = v
		case name == "limit":
			n, err := strconv.Atoi(v)
			if err != nil {
				return invalid("parameter_invalid_integer", "limit", "Invalid integer: %s", v)
			}
			if n < 1 || n > 100 {
				return invalid("parameter_invalid_integer", "limit", "This value must be between 1 and 100 (it currently is %d).", n)
			}
			limit = n
		case isArrayParam(name, "expand"):
			for _, e := range vals {
				if e != "data.charge" {
					return invalid("", "expand", "This property cannot be expanded (%s).", e)
				}
				expand = true
			}
		default:
			// created filters included: the simulator does not implement
			// them, and must not pretend to.
			return invalid("parameter_unknown", name, "Received unknown parameter: %s", name)
		}
	}
	if chargeID != "" && intentID != "" {
		return invalid("", "payment_intent", "You cannot specify both a charge and a payment_intent. Please specify one or the other.")
	}
	if after != "" && before != "" {
		return invalid("", "ending_before", "You may only specify one of these parameters: ending_before, starting_after.")
	}

	var scope []*refund
	switch {
	case chargeID != "":
		ch := s.chargeByID(chargeID)
		if ch == nil {
			return missing("charge", "charge", chargeID)
		}
		ch.mu.Lock()
		scope = ch.refunds[:len(ch.refunds):len(ch.refunds)]
		ch.mu.Unlock()
	case intentID != "":
		ch := s.chargeByIntent(intentID)
		if ch == nil {
			return missing("payment_intent", "payment_intent", intentID)
		}
		ch.mu.Lock()
		scope = ch.refunds[:len(ch.refunds):len(ch.refunds)]
		ch.mu.Unlock()
	default:
		scope = s.allRefunds()
	}

	var page []*refund // oldest first
	hasMore := false
	switch {
	case after != "":
		anchor := s.refundByID(after)
		if anchor == nil {
			return missing("refund", "starting_after", after)
		}
		end := sort.Search(len(scope), func(i int) bool { return scope[i].seq >= anchor.seq })
		start := max(0, end-limit)
		page, hasMore = scope[start:end], start > 0
	case before != "":
		anchor := s.refundByID(before)
		if anchor == nil {
			return missing("refund", "ending_before", before)
		}
		start := sort.Search(len(scope), func(i int) bool { return scope[i].seq > anchor.seq })
		end := min(len(scope), start+limit)
		page, hasMore = scope[start:end], end < len(scope)
	default:
		start := max(0, len(scope)-limit)
		page, hasMore = scope[start:], start > 0
	}

	list := refundList{Object: "list", Data: make([]refundObject, len(page)), HasMore: hasMore, URL: "/v1/refunds"}
	for i, re := range page {
		j := len(page) - 1 - i // newest first
		if expand {
			re.ch.mu.Lock()
			list.Data[j] = re.object(true)
			re.ch.mu.Unlock()
		} else {
			list.Data[j] = re.object(false)
		}
	}
	return answer{status: http.StatusOK, body: mustJSON(list)}
}

// refundObject is Stripe's refund object as stripe-go v76 decodes it.
type refundObject struct {
	ID                     string            `json:"id"`
	Object                 string            `json:"object"`
	Amount                 int64             `json:"amount"`
	BalanceTransaction     *string           `json:"balance_transaction"`
	Charge                 any               `json:"charge"` // id, or the charge object when expanded
	Created                int64             `json:"created"`
	Currency               string            `json:"currency"`
	FailureReason          string            `json:"failure_reason,omitempty"`
	Metadata               map[string]string `json:"metadata"`
	PaymentIntent          *string           `json:"payment_intent"`
	Reason                 *string           `json:"reason"`
	ReceiptNumber          *string           `json:"receipt_number"`
	SourceTransferReversal *string           `json:"source_transfer_reversal"`
	Status                 string            `json:"status"`
	TransferReversal       *string           `json:"transfer_reversal"`
}

type refundList struct {
	Object  string         `json:"object"`
	Data    []refundObject `json:"data"`
	HasMore bool           `json:"has_more"`
	URL     string         `json:"url"`
}

// chargeObject is the part of Stripe's charge object the simulator keeps.
type chargeObject struct {
	ID             string            `json:"id"`
	Object         string            `json:"object"`
	Amount         int64             `json:"amount"`
	AmountCaptured int64             `json:"amount_captured"`
	AmountRefunded int64             `json:"amount_refunded"`
	Captured       bool              `json:"captured"`
	Created        int64             `json:"created"`
	Currency       string            `json:"currency"`
	Livemode       bool              `json:"livemode"`
	Metadata       map[string]string `json:"metadata"`
	Paid           bool              `json:"paid"`
	PaymentIntent  *string           `json:"payment_intent"`
	Refunded       bool              `json:"refunded"`
	Status         string            `json:"status"`
}

var emptyMetadata = map[string]string{}

// object renders the charge; the caller holds ch.mu.
func (ch *charge) object() chargeObject {
	return chargeObject{
		ID: ch.id, Object: "charge", Amount: ch.amount, AmountCaptured: ch.amount,
		AmountRefunded: ch.refunded, Captured: true, Created: ch.created, Currency: ch.currency,
		Metadata: emptyMetadata, Paid: true, PaymentIntent: optional(ch.intent),
		Refunded: ch.refunded == ch.amount, Status: "succeeded",
	}
}

// object renders the refund; with expandCharge the caller holds re.ch.mu.
func (re *refund) object(expandCharge bool) refundObject {
	status := *re.status.Load()
	o := refundObject{
		ID: re.id, Object: "refund", Amount: re.amount, Charge: re.ch.id, Created: re.created,
		Currency: re.ch.currency, Metadata: re.metadata, PaymentIntent: optional(re.ch.intent),
		Reason: optional(re.reason), Status: status,
	}
	if o.Metadata == nil {
		o.Metadata = emptyMetadata
	}
	if status != StatusRequiresAction {
		txn := "txn_sim" + re.id[len(refundPrefix):]
		o.BalanceTransaction = &txn
	}
	if status == StatusCanceled {
		o.FailureReason = "merchant_request"
	}
	if expandCharge {
		o.Charge = re.ch.object()
	}
	return o
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // plain structs of strings and numbers: cannot fail
	}
	return b
}
