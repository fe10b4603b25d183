package stripesim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76"
)

// holdKey makes the create hook block the first request with key until the
// returned release is called (at the latest by the test's cleanup, so a
// failing test does not hang Close).
func holdKey(t *testing.T, s *Server, key string) (release func()) {
	t.Helper()
	ch := make(chan struct{})
	var once, first sync.Once
	release = func() { once.Do(func() { close(ch) }) }
	s.SetCreateHook(func(k string) {
		if k == key {
			first.Do(func() { <-ch })
		}
	})
	t.Cleanup(release) // runs before the server's Close: cleanups run last in, first out
	return release
}

func settle(t *testing.T, s *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a guard, not a wait
	defer cancel()
	if err := s.Settle(ctx); err != nil {
		t.Fatalf("settle: %v", err)
	}
}

// rawPost sends a refund creation without stripe-go, so the test sees the
// exact status, headers and body.
func rawPost(t *testing.T, s *Server, path, form, key string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("POST", s.URL()+path, strings.NewReader(form))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp, readAll(t, resp)
}

func rawGet(t *testing.T, s *Server, path string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", s.URL()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp, readAll(t, resp)
}

// checkGatewayAnswer checks an answer is the gateway's own: the status,
// none of Stripe's headers, and the body asked for.
func checkGatewayAnswer(t *testing.T, resp *http.Response, body string, status int, stripeBody bool) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want the gateway's %d: %s", resp.StatusCode, status, body)
	}
	for _, h := range []string{"Request-Id", "Idempotency-Key", "Idempotent-Replayed"} {
		if v, ok := resp.Header[h]; ok {
			t.Errorf("gateway answer carries %s: %q", h, v)
		}
	}
	if !stripeBody {
		if ct := resp.Header.Get("Content-Type"); ct != "text/html" || !strings.HasPrefix(body, "<html>") || !strings.Contains(body, fmt.Sprintf("<title>%d ", status)) {
			t.Errorf("HTML answer: %s %q", ct, body)
		}
		return
	}
	var env struct {
		Error struct {
			Type, Message string
		}
	}
	if err := json.Unmarshal([]byte(body), &env); err != nil || env.Error.Type != "api_error" || env.Error.Message == "" ||
		resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("Stripe-shaped answer: %s %q (%v)", resp.Header.Get("Content-Type"), body, err)
	}
}

// TestGatewayTimeoutGoesOn is defect 4's situation: a gateway answers 504
// while the refund goes on. The 504 comes before the refund exists, a retry
// with the key meanwhile gets 409, after it the saved success; one refund.
func TestGatewayTimeoutGoesOn(t *testing.T) {
	for _, stripeBody := range []bool{false, true} {
		t.Run(fmt.Sprintf("stripe body %v", stripeBody), func(t *testing.T) {
			s := start(t, Config{Charges: oneCharge(1000).Charges, Faults: Faults{GatewayTimeoutShare: 1, GatewayStripeBody: stripeBody}})
			release := holdKey(t, s, "k")
			c := newClients(s, clientOpts{keepAlive: true})

			_, err := c.refunds.New(refundParams("ch_a", 100, "k"))
			var se *stripe.Error
			isStripe := errors.As(err, &se)
			switch {
			case err == nil:
				t.Fatal("the gateway timeout answered a refund")
			case stripeBody && (!isStripe || se.HTTPStatusCode != 504 || se.Type != stripe.ErrorTypeAPI || se.RequestID != ""):
				// The shape that fooled the old client: an api_error, but
				// no Request-Id, because Stripe never answered.
				t.Fatalf("Stripe-shaped 504: %v (%+v)", err, se)
			case !stripeBody && (isStripe || !strings.Contains(err.Error(), "504")):
				t.Fatalf("HTML 504: %v", err)
			}
			if n := len(s.Refunds()); n != 0 {
				t.Fatalf("%d refunds when the 504 came back, want 0: the request is held", n)
			}
			if st := s.Stats(); st.GatewayTimeouts != 1 || st.GatewayInFlight != 1 {
				t.Errorf("stats while held = %+v", st)
			}

			_, err = c.refunds.New(refundParams("ch_a", 100, "k"))
			if se := stripeErr(t, err); se.HTTPStatusCode != 409 || se.Code != stripe.ErrorCodeIdempotencyKeyInUse || se.RequestID == "" {
				t.Errorf("retry in flight: %d %s request id %q, want Stripe's 409", se.HTTPStatusCode, se.Code, se.RequestID)
			}

			release()
			settle(t, s)
			all := s.Refunds()
			if len(all) != 1 || all[0].IdempotencyKey != "k" || all[0].Amount != 100 {
				t.Fatalf("refunds after the request went on = %+v, want one of 100 under k", all)
			}
			re, err := c.refunds.New(refundParams("ch_a", 100, "k"))
			if err != nil {
				t.Fatal(err)
			}
			if re.ID != all[0].ID || !replayed(re.LastResponse) || re.LastResponse.RequestID == "" {
				t.Errorf("retry after: %s replayed=%v, want the saved %s replayed", re.ID, replayed(re.LastResponse), all[0].ID)
			}
			if n := len(s.Refunds()); n != 1 {
				t.Errorf("%d refunds in the end, want 1", n)
			}
			if st, _ := s.Charge("ch_a"); st.AmountRefunded != 100 {
				t.Errorf("charge refunded %d, want 100", st.AmountRefunded)
			}
			if st := s.Stats(); st.RefundsCreated != 1 || st.KeyInUse != 1 || st.Replayed != 1 || st.GatewayInFlight != 0 {
				t.Errorf("stats = %+v", st)
			}
		})
	}
}

// TestGatewayErrorAfterCommit: the refund exists and its success is saved
// before the gateway's 502 reaches the client; a retry replays it.
func TestGatewayErrorAfterCommit(t *testing.T) {
	for _, stripeBody := range []bool{false, true} {
		t.Run(fmt.Sprintf("stripe body %v", stripeBody), func(t *testing.T) {
			s := start(t, Config{Charges: oneCharge(1000).Charges, Faults: Faults{GatewayErrorAfterCommitShare: 1, GatewayStripeBody: stripeBody}})
			c := newClients(s, clientOpts{keepAlive: true})
			_, err := c.refunds.New(refundParams("ch_a", 100, "k"))
			var se *stripe.Error
			if isStripe := errors.As(err, &se); err == nil || isStripe != stripeBody ||
				isStripe && (se.HTTPStatusCode != 502 || se.Type != stripe.ErrorTypeAPI || se.RequestID != "") ||
				!isStripe && !strings.Contains(err.Error(), "502") {
				t.Fatalf("got %v, want the gateway's 502", err)
			}
			all := s.Refunds()
			if len(all) != 1 || all[0].IdempotencyKey != "k" {
				t.Fatalf("refunds when the 502 came back = %+v, want the one committed", all)
			}
			re, err := c.refunds.New(refundParams("ch_a", 100, "k"))
			if err != nil {
				t.Fatal(err)
			}
			if re.ID != all[0].ID || !replayed(re.LastResponse) {
				t.Errorf("retry: %s replayed=%v, want %s replayed", re.ID, replayed(re.LastResponse), all[0].ID)
			}
			if st := s.Stats(); st.RefundsCreated != 1 || st.GatewayErrorsAfterCommit != 1 || st.Replayed != 1 || len(s.Refunds()) != 1 {
				t.Errorf("stats = %+v", st)
			}
		})
	}
}

// TestGatewayAnswers checks the gateway's answers byte by byte, knob by
// knob, with and without GatewayStatus, and what the key holds after.
func TestGatewayAnswers(t *testing.T) {
	tests := []struct {
		name   string
		faults Faults
		status int
	}{
		{"timeout html", Faults{GatewayTimeoutShare: 1}, 504},
		{"timeout stripe body", Faults{GatewayTimeoutShare: 1, GatewayStripeBody: true}, 504},
		{"timeout as 500", Faults{GatewayTimeoutShare: 1, GatewayStatus: 500, GatewayStripeBody: true}, 500},
		{"after commit html", Faults{GatewayErrorAfterCommitShare: 1}, 502},
		{"after commit stripe body", Faults{GatewayErrorAfterCommitShare: 1, GatewayStripeBody: true}, 502},
		{"after commit as 503", Faults{GatewayErrorAfterCommitShare: 1, GatewayStatus: 503}, 503},
		{"unknown status text", Faults{GatewayErrorAfterCommitShare: 1, GatewayStatus: 599}, 599},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := start(t, Config{Charges: oneCharge(1000).Charges, Faults: tt.faults})
			resp, body := rawPost(t, s, "/v1/refunds", "charge=ch_a&amount=100", "k")
			checkGatewayAnswer(t, resp, body, tt.status, tt.faults.GatewayStripeBody)
			settle(t, s)
			resp, body = rawPost(t, s, "/v1/refunds", "charge=ch_a&amount=100", "k")
			all := s.Refunds()
			if resp.StatusCode != 200 || resp.Header.Get("Idempotent-Replayed") != "true" || !strings.HasPrefix(resp.Header.Get("Request-Id"), "req_sim") ||
				len(all) != 1 || !strings.Contains(body, `"id":"`+all[0].ID+`"`) {
				t.Errorf("retry: %d %v %s; refunds %+v", resp.StatusCode, resp.Header, body, all)
			}
		})
	}
}

// TestGatewayTimeoutRunsAsItWould: behind the gateway the request meets the
// other knobs as it would have, and the key saves what it ended with.
func TestGatewayTimeoutRunsAsItWould(t *testing.T) {
	t.Run("500 before commit saved", func(t *testing.T) {
		s := start(t, Config{Charges: oneCharge(1000).Charges, Faults: Faults{GatewayTimeoutShare: 1, ErrorBeforeCommitShare: 1}})
		resp, body := rawPost(t, s, "/v1/refunds", "charge=ch_a&amount=100", "k")
		checkGatewayAnswer(t, resp, body, 504, false)
		settle(t, s)
		resp, body = rawPost(t, s, "/v1/refunds", "charge=ch_a&amount=100", "k")
		if resp.StatusCode != 500 || resp.Header.Get("Idempotent-Replayed") != "true" || resp.Header.Get("Request-Id") == "" || len(s.Refunds()) != 0 {
			t.Errorf("retry: %d %v %s, want Stripe's saved 500", resp.StatusCode, resp.Header, body)
		}
	})
	t.Run("validation error frees the key", func(t *testing.T) {
		s := start(t, Config{Charges: oneCharge(1000).Charges, Faults: Faults{GatewayTimeoutShare: 1}})
		resp, body := rawPost(t, s, "/v1/refunds", "charge=ch_a&amount=100&reason=bogus", "k")
		checkGatewayAnswer(t, resp, body, 504, false)
		settle(t, s)
		s.SetFaults(Faults{})
		resp, body = rawPost(t, s, "/v1/refunds", "charge=ch_a&amount=100", "k")
		if resp.StatusCode != 200 || resp.Header.Get("Idempotent-Replayed") != "" || len(s.Refunds()) != 1 {
			t.Errorf("after a validation error behind the gateway: %d %s", resp.StatusCode, body)
		}
		if st := s.Stats(); st.InvalidRequests != 1 {
			t.Errorf("stats = %+v", st)
		}
	})
	t.Run("no idempotency key", func(t *testing.T) {
		s := start(t, Config{Charges: oneCharge(1000).Charges, Faults: Faults{GatewayTimeoutShare: 1}})
		resp, body := rawPost(t, s, "/v1/refunds", "charge=ch_a&amount=100", "")
		checkGatewayAnswer(t, resp, body, 504, false)
		settle(t, s)
		if all := s.Refunds(); len(all) != 1 || all[0].IdempotencyKey != "" {
			t.Errorf("refunds = %+v, want one without a key", all)
		}
	})
	t.Run("latency held behind the gateway", func(t *testing.T) {
		// An hour of latency: the 504 comes at once, the key stays in
		// flight, and Close cuts the latency short and commits.
		s := start(t, Config{Charges: oneCharge(1000).Charges, Faults: Faults{GatewayTimeoutShare: 1, Latency: time.Hour}})
		resp, body := rawPost(t, s, "/v1/refunds", "charge=ch_a&amount=100", "k")
		checkGatewayAnswer(t, resp, body, 504, false)
		s.SetFaults(Faults{})
		resp, body = rawPost(t, s, "/v1/refunds", "charge=ch_a&amount=100", "k")
		if resp.StatusCode != 409 || resp.Header.Get("Request-Id") == "" {
			t.Errorf("retry in flight: %d %s", resp.StatusCode, body)
		}
		s.Close()
		if st := s.Stats(); st.GatewayInFlight != 0 || st.RefundsCreated != 1 || len(s.Refunds()) != 1 {
			t.Errorf("after Close: %+v", st)
		}
	})
}

// TestCloseAndShutdownWaitForGatewayRequests: no request behind a gateway
// outlives the server.
func TestCloseAndShutdownWaitForGatewayRequests(t *testing.T) {
	t.Run("shutdown", func(t *testing.T) {
		s := start(t, Config{Charges: oneCharge(1000).Charges, Faults: Faults{GatewayTimeoutShare: 1}})
		release := holdKey(t, s, "k")
		resp, body := rawPost(t, s, "/v1/refunds", "charge=ch_a&amount=100", "k")
		checkGatewayAnswer(t, resp, body, 504, false)

		// Held by the hook: Shutdown gives up when its context ends.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := s.Shutdown(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("shutdown with a request held: %v", err)
		}
		if st := s.Stats(); st.GatewayInFlight != 1 {
			t.Errorf("in flight after a canceled shutdown: %d", st.GatewayInFlight)
		}
		release()
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		if st := s.Stats(); st.GatewayInFlight != 0 || len(s.Refunds()) != 1 {
			t.Errorf("after shutdown: %+v", st)
		}
	})
	t.Run("settle endpoint", func(t *testing.T) {
		s := start(t, Config{Charges: oneCharge(1000).Charges, Faults: Faults{GatewayTimeoutShare: 1}})
		release := holdKey(t, s, "k")
		resp, body := rawPost(t, s, "/v1/refunds", "charge=ch_a&amount=100", "k")
		checkGatewayAnswer(t, resp, body, 504, false)
		done := make(chan string)
		go func() {
			resp, err := http.Post(s.URL()+"/_sim/settle", "", nil)
			if err != nil {
				done <- err.Error()
				return
			}
			defer resp.Body.Close()
			var sb strings.Builder
			if _, err := io.Copy(&sb, resp.Body); err != nil {
				sb.WriteString(err.Error())
			}
			done <- sb.String()
		}()
		release()
		body = <-done
		var st Stats
		if err := json.Unmarshal([]byte(body), &st); err != nil || st.GatewayInFlight != 0 || st.RefundsCreated != 1 || st.GatewayTimeouts != 1 {
			t.Errorf("settle answered %s (%v)", body, err)
		}
	})
}

// TestEveryStripeAnswerHasRequestID: whatever the simulator itself answers,
// 429s and 500s included, carries Request-Id; only the gateway's do not.
func TestEveryStripeAnswerHasRequestID(t *testing.T) {
	s := start(t, Config{Charges: []Charge{{ID: "ch_a", Amount: 1000}, {ID: "ch_b", Amount: 1000}}})
	release := holdKey(t, s, "held")
	form := "charge=ch_a&amount=10"
	steps := []struct {
		name         string
		faults       Faults
		method, path string
		form, key    string
		status       int
		gateway      bool
	}{
		{"create", Faults{}, "POST", "/v1/refunds", form, "k1", 200, false},
		{"replay", Faults{}, "POST", "/v1/refunds", form, "k1", 200, false},
		{"other parameters", Faults{}, "POST", "/v1/refunds", "charge=ch_a&amount=11", "k1", 400, false},
		{"validation", Faults{}, "POST", "/v1/refunds", "charge=ch_a&amount=-1", "k2", 400, false},
		{"key too long", Faults{}, "POST", "/v1/refunds", form, strings.Repeat("x", 256), 400, false},
		{"missing charge", Faults{}, "POST", "/v1/refunds", "charge=ch_nope", "k3", 404, false},
		{"too large", Faults{}, "POST", "/v1/refunds", "charge=ch_a&amount=5000", "k4", 400, false},
		{"rate limited create", Faults{RateLimitShare: 1}, "POST", "/v1/refunds", form, "k5", 429, false},
		{"rate limited list", Faults{RateLimitShare: 1}, "GET", "/v1/refunds?charge=ch_a", "", "", 429, false},
		{"500 before commit", Faults{ErrorBeforeCommitShare: 1}, "POST", "/v1/refunds", form, "k6", 500, false},
		{"500 after commit", Faults{ErrorAfterCommitShare: 1}, "POST", "/v1/refunds", form, "k7", 500, false},
		{"500 replayed", Faults{}, "POST", "/v1/refunds", form, "k7", 500, false},
		{"gateway timeout", Faults{GatewayTimeoutShare: 1, GatewayStripeBody: true}, "POST", "/v1/refunds", "charge=ch_b&amount=10", "held", 504, true},
		{"in flight", Faults{}, "POST", "/v1/refunds", "charge=ch_b&amount=10", "held", 409, false},
		{"gateway after commit", Faults{GatewayErrorAfterCommitShare: 1, GatewayStatus: 500, GatewayStripeBody: true}, "POST", "/v1/refunds", form, "k8", 500, true},
		{"cancel refused", Faults{}, "POST", "/v1/refunds/re_sim0000000001/cancel", "", "k9", 400, false},
		{"list", Faults{}, "GET", "/v1/refunds?charge=ch_a", "", "", 200, false},
		{"get refund", Faults{}, "GET", "/v1/refunds/re_sim0000000001", "", "", 200, false},
		{"get charge", Faults{}, "GET", "/v1/charges/ch_a", "", "", 200, false},
		{"unknown route", Faults{}, "GET", "/v1/customers", "", "", 404, false},
	}
	for _, st := range steps {
		if err := s.SetFaults(st.faults); err != nil {
			t.Fatal(err)
		}
		var resp *http.Response
		var body string
		if st.method == "GET" {
			resp, body = rawGet(t, s, st.path)
		} else {
			resp, body = rawPost(t, s, st.path, st.form, st.key)
		}
		if st.gateway {
			checkGatewayAnswer(t, resp, body, st.status, true)
			continue
		}
		if resp.StatusCode != st.status {
			t.Errorf("%s: status %d, want %d: %s", st.name, resp.StatusCode, st.status, body)
		}
		if id := resp.Header.Get("Request-Id"); !strings.HasPrefix(id, "req_sim") {
			t.Errorf("%s: %d answer without Stripe's Request-Id (%q)", st.name, resp.StatusCode, id)
		}
	}
	// Unauthorized: no key at all, and a live key.
	for _, auth := range []string{"", "Bearer sk_live_x"} {
		req, _ := http.NewRequest("GET", s.URL()+"/v1/charges/ch_a", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, resp)
		if resp.StatusCode != 401 || resp.Header.Get("Request-Id") == "" {
			t.Errorf("auth %q: %d without Request-Id", auth, resp.StatusCode)
		}
	}
	release()
	settle(t, s)
}

// TestGatewayDrawsAreDeterministic: the gateway knobs draw per seed and
// arrival like the others, and a refund exists for every request that
// reached the endpoint, whatever the client was told.
func TestGatewayDrawsAreDeterministic(t *testing.T) {
	charges := GenerateCharges(200, 1)
	run := func(seed int64) []int {
		s := start(t, Config{Charges: charges, Seed: seed,
			Faults: Faults{GatewayTimeoutShare: 0.2, GatewayErrorAfterCommitShare: 0.2, DropAfterCommitShare: 0.1}})
		var statuses []int
		for _, ch := range charges {
			form := url.Values{"charge": {ch.ID}}.Encode()
			req, _ := http.NewRequest("POST", s.URL()+"/v1/refunds", strings.NewReader(form))
			req.Header.Set("Authorization", "Bearer "+testKey)
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Idempotency-Key", "k-"+ch.ID)
			req.Close = true // a dropped connection fails this request alone
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				statuses = append(statuses, 0)
				continue
			}
			readAll(t, resp)
			statuses = append(statuses, resp.StatusCode)
		}
		settle(t, s)
		if n := len(s.Refunds()); n != len(charges) {
			t.Errorf("seed %d: %d refunds for %d charges", seed, n, len(charges))
		}
		return statuses
	}
	a, b, other := run(7), run(7), run(8)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Error("the same seed gave other faults")
	}
	if fmt.Sprint(a) == fmt.Sprint(other) {
		t.Error("another seed gave the same faults")
	}
	if n := countOf(a, 504); n < 20 || n > 60 {
		t.Errorf("%d of 200 gateway timeouts, want about 40", n)
	}
	if n := countOf(a, 502); n < 15 || n > 55 {
		t.Errorf("%d of 200 gateway errors after commit, want about 32", n)
	}
	if n := countOf(a, 0); n < 3 || n > 30 {
		t.Errorf("%d of 200 dropped, want about 13", n)
	}
}

func TestGatewayFaultsValidateAndJSON(t *testing.T) {
	for _, tt := range []struct {
		f   Faults
		err string
	}{
		{Faults{GatewayTimeoutShare: 1.5}, "gateway_timeout_share 1.5: want a share between 0 and 1"},
		{Faults{GatewayErrorAfterCommitShare: -0.1}, "gateway_error_after_commit_share -0.1: want a share between 0 and 1"},
		{Faults{GatewayStatus: 200}, "gateway_status 200: want 0 (504 for timeouts, 502 after commit) or a status from 500 to 599"},
		{Faults{GatewayStatus: 499}, "gateway_status 499"},
		{Faults{GatewayStatus: 600}, "gateway_status 600"},
		{Faults{GatewayStatus: 500}, ""},
		{Faults{GatewayStatus: 599, GatewayTimeoutShare: 1, GatewayErrorAfterCommitShare: 0}, ""},
	} {
		err := tt.f.Validate()
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.err)) {
			t.Errorf("Validate(%+v) = %v, want %q", tt.f, err, tt.err)
		}
	}

	s := start(t, oneCharge(1000))
	in := `{"gateway_timeout_share":0.25,"gateway_error_after_commit_share":0.5,"gateway_status":503,"gateway_stripe_body":true}`
	if code, body := control(t, s, "POST", "/_sim/faults", in); code != 200 {
		t.Fatalf("set faults: %d %s", code, body)
	}
	want := Faults{GatewayTimeoutShare: 0.25, GatewayErrorAfterCommitShare: 0.5, GatewayStatus: 503, GatewayStripeBody: true}
	if s.Faults() != want {
		t.Errorf("faults = %+v, want %+v", s.Faults(), want)
	}
	_, body := control(t, s, "GET", "/_sim/faults", "")
	var back Faults
	if err := json.Unmarshal([]byte(body), &back); err != nil || back != want || !strings.Contains(body, `"gateway_stripe_body":true`) {
		t.Errorf("get faults: %s (%v)", body, err)
	}
	for _, bad := range []string{`{"gateway_status":404}`, `{"gateway_timeout_share":2}`, `{"gateway_stripe_body":"yes"}`, `{"gateway_timeout":1}`} {
		if code, _ := control(t, s, "POST", "/_sim/faults", bad); code != 400 {
			t.Errorf("faults %s: %d, want 400", bad, code)
		}
	}
}
