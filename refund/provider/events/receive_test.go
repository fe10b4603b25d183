package events

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestReceiverAnswers: the core's answers, whatever the provider: a
// refusal as its status and reason, any other error of Verify or Keep a
// 500 the provider retries, a reason nobody declared still counted.
func TestReceiverAnswers(t *testing.T) {
	var logs []string
	r, err := NewReceiver(ReceiverConfig[string]{
		Provider: "Acme", Noun: "event", Reasons: []string{"signature"},
		Verify: func(_ context.Context, h http.Header, _ []byte) error {
			switch h.Get("X-Case") {
			case "forged":
				return Refuse(http.StatusUnauthorized, "signature", "no")
			case "undeclared":
				return Refuse(http.StatusForbidden, "undeclared", "no")
			case "broken":
				return errors.New("verifier misconfigured")
			}
			return nil
		},
		Read: func(_ http.Header, body []byte) (string, string, error) {
			if string(body) == "junk" {
				return "", "", errors.New("not an event")
			}
			return string(body), "event " + string(body), nil
		},
		Keep: func(_ context.Context, k string) (bool, error) {
			if k == "fail" {
				return false, errors.New("disk full")
			}
			return k != "dup", nil
		},
		MaxBody: 16,
		Logf:    func(f string, a ...any) { logs = append(logs, f) },
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		method, body, kase string
		want               int
	}{
		{"POST", "e1", "", 200},
		{"POST", "dup", "", 200},
		{"GET", "", "", 405},
		{"POST", strings.Repeat("x", 17), "", 413},
		{"POST", "e1", "forged", 401},
		{"POST", "e1", "undeclared", 403},
		{"POST", "e1", "broken", 500},
		{"POST", "\xff", "", 400},
		{"POST", "junk", "", 400},
		{"POST", "fail", "", 500},
	} {
		req := httptest.NewRequest(c.method, "/acme", strings.NewReader(c.body))
		req.Header.Set("X-Case", c.kase)
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		if w.Code != c.want {
			t.Errorf("%s %q %s: %d, want %d", c.method, c.body, c.kase, w.Code, c.want)
		}
	}
	st := r.Stats()
	if st.Accepted != 2 || st.Added != 1 || st.Duplicates != 1 || st.StoreErrors != 2 ||
		st.Rejected[RefusedMethod] != 1 || st.Rejected[RefusedTooLarge] != 1 || st.Rejected["signature"] != 1 || st.Rejected[RefusedBadRequest] != 3 {
		t.Fatalf("stats %+v", st)
	}
}
