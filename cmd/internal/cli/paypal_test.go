package cli

import (
	"errors"
	"strings"
	"testing"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/provider/paypal"
)

// TestPayPalProvider: the environment's rules for PayPal, as for Stripe's
// key: credentials from the environment only and never in a message, the
// sandbox unless --live, plain http only to loopback.
func TestPayPalProvider(t *testing.T) {
	const secret = "EL-secret-value"
	for _, tc := range []struct {
		name  string
		env   map[string]string
		flag  string
		live  bool
		fails string // part of the usage error; "" for none
		base  string // the API called, when it is not the one named
	}{
		{"sandbox by default", nil, "", false, "", paypal.SandboxAPIBase},
		{"live base with --live", nil, "", true, "", paypal.LiveAPIBase},
		{"no client id", map[string]string{"PAYPAL_CLIENT_ID": ""}, "", false, "PAYPAL_CLIENT_ID is not set", ""},
		{"no secret", map[string]string{"PAYPAL_CLIENT_SECRET": ""}, "", false, "PAYPAL_CLIENT_SECRET is not set", ""},
		{"simulator over http", map[string]string{"PAYPAL_API_BASE": "http://127.0.0.1:12480"}, "", false, "", ""},
		{"localhost", nil, "http://localhost:9", false, "", ""},
		{"http elsewhere", map[string]string{"PAYPAL_API_BASE": "http://paypal.example.com"}, "", false, "plain http is allowed only to a loopback address", ""},
		{"live without --live", map[string]string{"PAYPAL_API_BASE": "https://api-m.paypal.com"}, "", false, "pass --live", ""},
		{"old live name without --live", nil, "https://api.paypal.com/", false, "pass --live", ""},
		{"live with --live", map[string]string{"PAYPAL_API_BASE": "https://api-m.paypal.com"}, "", true, "", ""},
		{"sandbox named", map[string]string{"PAYPAL_API_BASE": paypal.SandboxAPIBase}, "", false, "", ""},
		{"not a url", nil, "api-m.paypal.com", false, "want an http(s) URL", ""},
		{"the flag wins", map[string]string{"PAYPAL_API_BASE": "http://evil.example"}, "http://127.0.0.1:1", false, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars := map[string]string{"PAYPAL_CLIENT_ID": "AX-id", "PAYPAL_CLIENT_SECRET": secret}
			for k, v := range tc.env {
				vars[k] = v
			}
			f := paypalFlags{PayPalAPIBase: tc.flag}
			p, err := f.provider(Env{Getenv: func(k string) string { return vars[k] }}, tc.live, 4, "", nil)
			if tc.fails == "" {
				if err != nil || p == nil {
					t.Fatalf("provider: %v", err)
				}
				want := tc.base
				if want == "" {
					want = strings.TrimSuffix(vars["PAYPAL_API_BASE"], "/")
					if tc.flag != "" {
						want = tc.flag
					}
				}
				if got := p.(*paypal.Client).APIBase(); got != want {
					t.Errorf("calls %q, want %q", got, want)
				}
				return
			}
			var ue *usageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.fails) {
				t.Fatalf("err %v, want a usage error saying %q", err, tc.fails)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the secret in %q", err)
			}
		})
	}
}

// TestRateReplacesEveryBudgetWithoutEndpointLimits: PayPal and Adyen
// publish no limit of an endpoint's own, so --rate sets every budget (a
// PayPal look-up, two requests, at half of it); Stripe's endpoints keep
// their share of their own limits (25/s each).
func TestRateReplacesEveryBudgetWithoutEndpointLimits(t *testing.T) {
	rate := 40.0
	env := Env{Getenv: func(k string) string { return map[string]string{"STRIPE_API_KEY": "sk_test_x"}[k] }}
	for _, tc := range []struct {
		provider string
		want     refund.Limits
	}{
		{providerPayPal, refund.Limits{Global: 40, Create: 40, List: 20, Charges: 40, Get: 40}},
		{providerAdyen, refund.Limits{Create: 40}},
		{providerStripe, refund.Limits{Global: 40, Create: 20, List: 20, Charges: 20, Get: 20}},
	} {
		c := refundCmd{Journal: "j.jsonl", Share: 0.8, Rate: &rate}
		c.Provider = tc.provider
		p, err := c.pacer(env)
		if err != nil {
			t.Fatalf("%s: %v", tc.provider, err)
		}
		if got := p.Rates(); got != tc.want {
			t.Errorf("%s --rate 40: budgets %+v, want %+v", tc.provider, got, tc.want)
		}
	}
}
