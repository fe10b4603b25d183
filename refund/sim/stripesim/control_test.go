package stripesim

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// control sends one request to a /_sim/ endpoint, without a key.
func control(t *testing.T, s *Server, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, s.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, readAll(t, resp)
}

func TestControlEndpoints(t *testing.T) {
	s := start(t, oneCharge(1000))
	c := newClients(s, clientOpts{keepAlive: true})

	code, body := control(t, s, "POST", "/_sim/faults", `{"latency":"1ms","latency_jitter":2000000,"requires_action_share":1}`)
	if code != 200 {
		t.Fatalf("set faults: %d %s", code, body)
	}
	want := Faults{Latency: time.Millisecond, LatencyJitter: 2 * time.Millisecond, RequiresActionShare: 1}
	if s.Faults() != want {
		t.Errorf("faults = %+v, want %+v", s.Faults(), want)
	}
	if code, body := control(t, s, "GET", "/_sim/faults", ""); code != 200 || !strings.Contains(body, `"latency":"1ms"`) || !strings.Contains(body, `"latency_jitter":"2ms"`) {
		t.Errorf("get faults: %d %s", code, body)
	}
	for _, bad := range []string{`{"rate_limit_share":1.5}`, `{"rate_limt_share":0.5}`, `{"latency":"soon"}`, `{"latency":"-1s"}`, `nope`} {
		if code, _ := control(t, s, "POST", "/_sim/faults", bad); code != 400 {
			t.Errorf("faults %s: %d, want 400", bad, code)
		}
	}
	if s.Faults() != want {
		t.Error("a refused faults request changed the faults")
	}

	code, body = control(t, s, "POST", "/_sim/charges", `{"id":"ch_b","payment_intent":"pi_b","amount":700,"refunds":[{"amount":200,"metadata":{"refundkit_item":"old"}}]}`+"\n")
	if code != 200 || !strings.Contains(body, `"added":1`) {
		t.Fatalf("add charges: %d %s", code, body)
	}
	if code, body := control(t, s, "POST", "/_sim/charges", "{\"id\":\"ch_c\",\"amount\":1}\n{\"id\":\"bad\",\"amount\":1}\n"); code != 400 || !strings.Contains(body, "<body>:2: charge id") {
		t.Errorf("bad charges: %d %s", code, body)
	}
	if code, _ := control(t, s, "POST", "/_sim/charges", `{"id":"ch_b","amount":1}`); code != 409 {
		t.Errorf("existing charge: %d, want 409", code)
	}

	if _, err := c.refunds.New(refundParams("ch_b", 0, "k")); err != nil {
		t.Fatal(err)
	}
	code, body = control(t, s, "GET", "/_sim/refunds", "")
	if code != 200 {
		t.Fatalf("refunds: %d %s", code, body)
	}
	var lines []Refund
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		var r Refund
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, r)
	}
	if len(lines) != 2 || lines[0].Metadata["refundkit_item"] != "old" || lines[0].Status != StatusSucceeded || lines[0].IdempotencyKey != "" ||
		lines[1].Charge != "ch_b" || lines[1].Amount != 500 || lines[1].Status != StatusRequiresAction || lines[1].IdempotencyKey != "k" {
		t.Errorf("refund lines = %+v", lines)
	}

	if code, body := control(t, s, "POST", "/_sim/forget-keys", ""); code != 200 || !strings.Contains(body, `"forgotten":1`) {
		t.Errorf("forget keys: %d %s", code, body)
	}
	code, body = control(t, s, "GET", "/_sim/stats", "")
	var st Stats
	if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil {
		t.Fatalf("stats: %d %s %v", code, body, err)
	}
	if st.RefundsCreated != 1 || st.Requests["POST /v1/refunds"] != 1 {
		t.Errorf("stats = %+v", st)
	}
	if code, _ := control(t, s, "GET", "/_sim/nothing", ""); code != 404 {
		t.Errorf("unknown control endpoint: %d", code)
	}
	// Control requests are not API requests: no counts, no fault draws.
	if st2 := s.Stats(); st2.Requests["other"] != 0 {
		t.Errorf("control requests counted: %+v", st2.Requests)
	}
}

func TestHandlerWithoutListener(t *testing.T) {
	// New + Handler: mounted in another server (here one from net/http).
	s := New(oneCharge(1000))
	srv := &http.Server{Handler: s.Handler()}
	if s.URL() != "" || srv.Handler == nil {
		t.Error("New must not listen")
	}
}

func TestUnknownRoute(t *testing.T) {
	s := start(t, oneCharge(1000))
	req, _ := http.NewRequest("DELETE", s.URL()+"/v1/refunds/re_sim0000000001", nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp)
	if resp.StatusCode != 404 || !strings.Contains(body, "Unrecognized request URL") {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
	if s.Stats().Requests["other"] != 1 {
		t.Error("not counted as other")
	}
}
