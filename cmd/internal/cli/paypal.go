package cli

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/provider/paypal"
)

// paypalFlags are the PayPal settings of every command that calls PayPal.
// The app's credentials are never flags: they come from PAYPAL_CLIENT_ID
// and PAYPAL_CLIENT_SECRET only, so they stay out of shell history and
// process listings.
type paypalFlags struct {
	PayPalAPIBase string `name:"paypal-api-base" placeholder:"URL" group:"provider" help:"PayPal API base URL (default: env PAYPAL_API_BASE, else the sandbox, https://api-m.sandbox.paypal.com; with --live, https://api-m.paypal.com)."`
}

// provider builds the PayPal client from the flags and the environment.
// PayPal's live API, where real money moves, is used only with live
// (--live); plain http only to a loopback address (the simulator). Its
// errors never contain the secret.
func (f *paypalFlags) provider(env Env, live bool, conns int) (refund.Provider, error) {
	id, secret := env.Getenv("PAYPAL_CLIENT_ID"), env.Getenv("PAYPAL_CLIENT_SECRET")
	switch {
	case id == "":
		return nil, &usageError{"PAYPAL_CLIENT_ID is not set"}
	case secret == "":
		return nil, &usageError{"PAYPAL_CLIENT_SECRET is not set"}
	}
	base, from := f.PayPalAPIBase, "--paypal-api-base"
	if base == "" {
		base, from = env.Getenv("PAYPAL_API_BASE"), "PAYPAL_API_BASE"
	}
	if base == "" {
		base = paypal.SandboxAPIBase
		if live {
			base = paypal.LiveAPIBase
		}
		return paypal.New(base, id, secret, conns), nil
	}
	u, err := url.Parse(base)
	switch {
	case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		return nil, &usageError{fmt.Sprintf("%s %q: want an http(s) URL", from, redactURL(base))}
	case u.Scheme == "http" && !isLoopback(u.Hostname()):
		return nil, &usageError{fmt.Sprintf("%s %q: plain http is allowed only to a loopback address (the credentials would cross the network in clear)", from, redactURL(base))}
	case paypalLive(u.Hostname()) && !live:
		return nil, &usageError{fmt.Sprintf("%s %q is PayPal's live API: pass --live to move real money", from, redactURL(base))}
	}
	return paypal.New(base, id, secret, conns), nil
}

// paypalLive reports a host of PayPal's live API (api-m.paypal.com, and
// api.paypal.com, its older name): any paypal.com host but the sandbox's.
func paypalLive(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	return (h == "paypal.com" || strings.HasSuffix(h, ".paypal.com")) && !strings.Contains(h, "sandbox")
}
