package stripesim

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestRoutes pins which route answers each request and the shape of the
// answer: every request that is not a control endpoint's gets a Stripe
// answer (JSON error envelope, Request-Id), never ServeMux's plain-text
// 404, 405 or redirect, and counts under the route's name in Stats.
func TestRoutes(t *testing.T) {
	const unknown = "Unrecognized request URL"
	for _, tc := range []struct {
		method, target string
		status         int
		route          string // Stats.Requests key; "" for a control request
		message        string // part of the error message, if an error
	}{
		// Each route, by its pattern.
		{"POST", "/v1/refunds", 400, "POST /v1/refunds", "charge or payment_intent"},
		{"GET", "/v1/refunds?charge=ch_a", 200, "GET /v1/refunds", ""},
		{"GET", "/v1/refunds/re_sim0000000001", 200, "GET /v1/refunds/{id}", ""},
		{"POST", "/v1/refunds/re_sim0000000001/cancel", 400, "POST /v1/refunds/{id}/cancel", "requires_action"},
		{"GET", "/v1/charges/ch_a", 200, "GET /v1/charges/{id}", ""},
		{"GET", "/v1/charges?payment_intent=pi_a", 200, "GET /v1/charges", ""},
		{"GET", "/v1/refunds/re_nope", 404, "GET /v1/refunds/{id}", "No such refund: 're_nope'"},
		// An escaped letter is the letter, as the path decodes.
		{"GET", "/v1/re%66unds?charge=ch_a", 200, "GET /v1/refunds", ""},
		{"POST", "/v1/refunds/%2E%2E/cancel", 404, "POST /v1/refunds/{id}/cancel", "No such refund: '..'"},

		// A known path with another method: Stripe's 404, not a 405.
		{"DELETE", "/v1/refunds", 404, "other", "Unrecognized request URL (DELETE: /v1/refunds)."},
		{"PUT", "/v1/refunds/re_sim0000000001", 404, "other", unknown},
		{"OPTIONS", "/v1/refunds", 404, "other", unknown},
		{"POST", "/v1/charges", 404, "other", unknown},
		{"POST", "/v1/refunds/re_sim0000000001", 404, "other", unknown},
		{"GET", "/v1/refunds/re_sim0000000001/cancel", 404, "other", unknown},
		{"DELETE", "/v1/charges/ch_a", 404, "other", unknown},
		// ServeMux serves HEAD by a GET pattern; no route of Stripe's here does.
		{"HEAD", "/v1/refunds?charge=ch_a", 404, "other", ""},
		{"HEAD", "/v1/charges/ch_a", 404, "other", ""},
		// Paths that are no route: empty ids, an escaped slash in an id,
		// paths ServeMux would redirect to a cleaned form.
		{"GET", "/v1/refunds/", 404, "other", unknown},
		{"GET", "/v1/charges/", 404, "other", unknown},
		{"GET", "/v1/refunds/re_sim0000000001/", 404, "other", unknown},
		{"GET", "/v1/refunds/re%2Fx", 404, "other", "Unrecognized request URL (GET: /v1/refunds/re/x)."},
		{"GET", "/v1//refunds", 404, "other", unknown},
		{"GET", "/v1/refunds/.", 404, "other", unknown},
		{"GET", "/v1/refunds/./re_sim0000000001", 404, "other", unknown},
		{"POST", "/v1/refunds/../refunds", 404, "other", unknown},
		{"GET", "/v1/customers", 404, "other", unknown},
		{"GET", "/", 404, "other", unknown},
		{"GET", "/_sim", 404, "other", unknown},

		// Control endpoints: JSON {"error"}, no key, not counted.
		{"GET", "/_sim/stats", 200, "", ""},
		{"GET", "/%5Fsim/stats", 200, "", ""},
		{"GET", "/_sim/nothing", 404, "", "no control endpoint GET /_sim/nothing"},
		{"POST", "/_sim/stats", 404, "", "no control endpoint POST /_sim/stats"},
		{"HEAD", "/_sim/stats", 404, "", ""},
		{"GET", "/_sim/forget-keys", 404, "", "no control endpoint"},
		{"GET", "/_sim//stats", 404, "", "no control endpoint"},
		{"GET", "/_sim/", 404, "", "no control endpoint"},
	} {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			s := New(oneCharge(1000, SeedRefund{Amount: 100}))
			req := httptest.NewRequest(tc.method, tc.target, nil)
			req.Header.Set("Authorization", "Bearer "+testKey)
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, req)
			body := rec.Body.String()
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, body)
			}
			if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/") || !strings.Contains(ct, "json") {
				t.Errorf("Content-Type %q, want JSON", ct)
			}
			counted := map[string]int64{}
			for r, n := range s.Stats().Requests {
				if n != 0 {
					counted[r] = n
				}
			}
			if tc.route == "" {
				if len(counted) != 0 {
					t.Errorf("a control request counted as %v", counted)
				}
				if tc.status != 200 && tc.method != "HEAD" {
					var e struct{ Error string }
					if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || !strings.Contains(e.Error, tc.message) {
						t.Errorf("control error %q (%v), want one with %q", body, err, tc.message)
					}
				}
				return
			}
			if len(counted) != 1 || counted[tc.route] != 1 {
				t.Errorf("counted %v, want 1 under %q", counted, tc.route)
			}
			if rec.Header().Get("Request-Id") == "" {
				t.Error("no Request-Id: not an answer of Stripe's")
			}
			if tc.status == 200 || tc.method == "HEAD" {
				return
			}
			var env struct {
				Error struct{ Type, Message string }
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil || env.Error.Type != typeInvalid || !strings.Contains(env.Error.Message, tc.message) {
				t.Errorf("body %q (%v), want a Stripe error with %q", body, err, tc.message)
			}
		})
	}
}

// TestUnknownRouteWithoutKey: an unknown route is counted before the key
// is checked, and the 401 is Stripe's.
func TestUnknownRouteWithoutKey(t *testing.T) {
	s := New(oneCharge(1000))
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("PATCH", "/v1/refunds", nil))
	if rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), "You did not provide an API key") {
		t.Errorf("%d %s", rec.Code, rec.Body)
	}
	if n := s.Stats().Requests["other"]; n != 1 {
		t.Errorf("other = %d, want 1", n)
	}
}
