package paypalsim

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund/sim"
)

// fakeClock is a clock that tests move by hand.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// harness is PayPal's routes on a loopback server, with the core and a
// clock the test controls.
type harness struct {
	t     *testing.T
	s     *Server
	core  *sim.Core
	clock *fakeClock
	url   string
	token string
}

func start(t *testing.T, f sim.Faults, captures ...Capture) *harness {
	t.Helper()
	clk := &fakeClock{}
	clk.ns.Store(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).UnixNano())
	core := sim.NewCore(1, sim.Faults{})
	s, err := New(core, Config{Captures: captures}, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	s.Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		core.CutLatency()
		srv.Close()
		core.StopBackground()
	})
	h := &harness{t: t, s: s, core: core, clock: clk, url: srv.URL}
	h.token = h.newToken()
	core.StoreFaults(f) // after the token: a test's faults hit its own requests
	return h
}

// setFaults replaces the knobs, as POST /_sim/faults does.
func (h *harness) setFaults(f sim.Faults) { h.core.StoreFaults(f) }

// newToken fetches an access token with client credentials.
func (h *harness) newToken() string {
	h.t.Helper()
	res := h.raw("POST", "/v1/oauth2/token", "client-1:secret-1", "", "grant_type=client_credentials")
	var tok struct {
		AccessToken string `json:"access_token"`
		ExpiresIn   int64  `json:"expires_in"`
	}
	if res.status != 200 || json.Unmarshal([]byte(res.body), &tok) != nil || tok.AccessToken == "" || tok.ExpiresIn < 1 {
		h.t.Fatalf("token: %d %s", res.status, res.body)
	}
	return tok.AccessToken
}

// answer is what a request got; status 0 is no answer at all.
type answer struct {
	status  int
	header  http.Header
	body    string
	decoded map[string]any
}

// raw sends a request: basic is "id:secret" for Basic auth, else the
// harness's bearer token unless bearer says another ("-": none).
func (h *harness) raw(method, path, basic, bearer, body string) answer {
	h.t.Helper()
	req, err := http.NewRequest(method, h.url+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	switch {
	case basic != "":
		id, secret, _ := strings.Cut(basic, ":")
		req.SetBasicAuth(id, secret)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	case bearer == "-":
	case bearer != "":
		req.Header.Set("Authorization", "Bearer "+bearer)
	default:
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	return h.send(req)
}

func (h *harness) send(req *http.Request) answer {
	h.t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute}
	res, err := c.Do(req)
	if err != nil {
		return answer{}
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	a := answer{status: res.StatusCode, header: res.Header, body: string(b)}
	json.Unmarshal(b, &a.decoded)
	return a
}

// refund asks for a refund of capture under requestID ("" for none).
func (h *harness) refund(capture, requestID, body string) answer {
	h.t.Helper()
	req, err := http.NewRequest("POST", h.url+"/v2/payments/captures/"+url.PathEscape(capture)+"/refund", strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+h.token)
	req.Header.Set("Content-Type", "application/json")
	if requestID != "" {
		req.Header.Set("PayPal-Request-Id", requestID)
	}
	return h.send(req)
}

func (h *harness) get(path string) answer { h.t.Helper(); return h.raw("GET", path, "", "", "") }

// str digs a string out of a decoded answer: "amount.value", "details.0.issue".
func (a answer) str(path string) string {
	var v any = a.decoded
	for _, k := range strings.Split(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			v = x[k]
		case []any:
			if k != "0" || len(x) == 0 {
				return ""
			}
			v = x[0]
		default:
			return ""
		}
	}
	s, _ := v.(string)
	return s
}

// issue is the first issue of an error answer.
func (a answer) issue() string { return a.str("details.0.issue") }

func usd(id string, amount int64) Capture { return Capture{ID: id, Currency: "USD", Amount: amount} }

// created counts refunds the API made.
func (h *harness) created() int64 { return h.core.Count.RefundsCreated.Load() }
