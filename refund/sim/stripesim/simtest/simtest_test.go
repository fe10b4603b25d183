package simtest_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/refundkit/refundkit/refund/sim/paypalsim"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/refund/sim/stripesim/simtest"
)

// do sends a request to the simulator and returns status and body.
func do(t *testing.T, method, url, auth, requestID, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if requestID != "" {
		req.Header.Set("PayPal-Request-Id", requestID)
	}
	if strings.HasPrefix(body, "grant_type") {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestPayPalOnTheSameURL: the simulator serves PayPal's routes beside
// Stripe's; Calls counts them by their names, the stats and the control
// endpoints include them.
func TestPayPalOnTheSameURL(t *testing.T) {
	s := simtest.Start(t, stripesim.Config{Charges: stripesim.GenerateCharges(1, 1),
		PayPal: paypalsim.Config{Captures: paypalsim.GenerateCaptures(2, 1)}})
	for i, name := range paypalsim.RouteNames {
		if want := []string{simtest.PayPalToken, simtest.PayPalRefund, simtest.PayPalGetRefund, simtest.PayPalGetCapture, simtest.PayPalGetOrder}[i]; name != want {
			t.Errorf("route %d: %q, simtest names it %q", i, name, want)
		}
	}
	code, body := do(t, "POST", s.URL+"/v1/oauth2/token", "Basic Y2xpZW50OnNlY3JldA==", "", "grant_type=client_credentials")
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &tok) != nil {
		t.Fatalf("token: %d %s", code, body)
	}
	bearer := "Bearer " + tok.AccessToken
	code, body = do(t, "POST", s.URL+"/v2/payments/captures/CAPSIM00000000001/refund", bearer, "rid-1", "")
	if code != 201 {
		t.Fatalf("refund: %d %s", code, body)
	}
	do(t, "POST", s.URL+"/v2/payments/captures/CAPSIM00000000001/refund", bearer, "rid-1", "")
	do(t, "GET", s.URL+"/v2/payments/captures/CAPSIM00000000002", bearer, "", "")
	do(t, "GET", s.URL+"/v2/checkout/orders/ORDSIM00000000002", bearer, "", "")
	if s.PayPalCreates() != 2 || s.PayPalLookups() != 2 || s.Calls(simtest.PayPalToken) != 1 || s.Creates() != 0 {
		t.Errorf("calls: %d creates, %d look-ups, stats %+v", s.PayPalCreates(), s.PayPalLookups(), s.Stats())
	}
	st := s.Stats()
	if st.RefundsCreated != 1 || st.Replayed != 1 || st.PayPal.TokensIssued != 1 || st.PayPal.Refunds[paypalsim.StatusCompleted] != 1 {
		t.Errorf("stats %+v", st)
	}
	s.Reset()
	if s.PayPalCreates() != 0 {
		t.Errorf("after Reset: %d", s.PayPalCreates())
	}

	code, body = do(t, "POST", s.URL+"/_sim/captures", "", "", `{"id":"CAPJPY1","currency":"JPY","amount":500}`)
	if code != 200 || !strings.Contains(body, `"added":1`) {
		t.Errorf("add captures: %d %s", code, body)
	}
	code, body = do(t, "POST", s.URL+"/v2/payments/captures/CAPJPY1/refund", bearer, "rid-2", `{"amount":{"value":"200","currency_code":"JPY"}}`)
	if code != 201 || !strings.Contains(body, `"value":"200"`) {
		t.Errorf("jpy refund: %d %s", code, body)
	}
	_, lines := do(t, "GET", s.URL+"/_sim/refunds", "", "", "")
	if !strings.Contains(lines, `"capture":"CAPSIM00000000001"`) || !strings.Contains(lines, `"capture":"CAPJPY1","amount":200,"currency":"JPY","status":"COMPLETED"`) ||
		!strings.Contains(lines, `"paypal_request_id":"rid-2"`) {
		t.Errorf("/_sim/refunds:\n%s", lines)
	}
	if _, stats := do(t, "GET", s.URL+"/_sim/stats", "", "", ""); !strings.Contains(stats, `"POST /v2/payments/captures/{id}/refund":3`) || !strings.Contains(stats, `"paypal":{"tokens_issued":1`) {
		t.Errorf("/_sim/stats: %s", stats)
	}
	if _, forgot := do(t, "POST", s.URL+"/_sim/forget-keys", "", "", ""); !strings.Contains(forgot, `"forgotten":2`) {
		t.Errorf("forget-keys: %s", forgot)
	}
	code, body = do(t, "POST", s.URL+"/_sim/faults", "", "", `{"paypal_pending_share":1,"paypal_pending_for":"1h"}`)
	if code != 200 || s.Faults().PayPalPendingShare != 1 {
		t.Errorf("faults: %d %s", code, body)
	}
	if code, body = do(t, "POST", s.URL+"/v2/payments/captures/CAPSIM00000000002/refund", bearer, "rid-3", ""); code != 201 || !strings.Contains(body, `"status":"PENDING","status_details":{"reason":"ECHECK"}`) {
		t.Errorf("pending: %d %s", code, body)
	}
}
