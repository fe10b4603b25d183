package cli

import (
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/provider/stripe"
)

// stripeFlags are the Stripe settings shared by every command that calls
// Stripe. The key itself is never a flag: it comes from STRIPE_API_KEY only,
// so it stays out of shell history and process listings.
type stripeFlags struct {
	APIBase string `name:"api-base" placeholder:"URL" group:"provider" help:"Stripe API base URL (default: env STRIPE_API_BASE, else https://api.stripe.com)."`
	Live    bool   `group:"provider" help:"${live_help}"`
}

// client builds the Stripe client from the flags and STRIPE_API_KEY. Its
// errors never contain the key.
func (f *stripeFlags) client(env Env, conns int) (refund.Provider, error) {
	key := env.Getenv("STRIPE_API_KEY")
	switch {
	case key == "":
		return nil, &usageError{"STRIPE_API_KEY is not set"}
	case !strings.HasPrefix(key, "sk_") && !strings.HasPrefix(key, "rk_"):
		return nil, &usageError{"STRIPE_API_KEY does not look like a Stripe secret or restricted key (sk_... or rk_...)"}
	case (strings.HasPrefix(key, "sk_live_") || strings.HasPrefix(key, "rk_live_")) && !f.Live:
		return nil, &usageError{"STRIPE_API_KEY is a live-mode key: pass --live to move real money"}
	}
	if f.APIBase == "" {
		f.APIBase = env.Getenv("STRIPE_API_BASE")
	}
	if f.APIBase != "" {
		u, err := url.Parse(f.APIBase)
		if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
			return nil, &usageError{fmt.Sprintf("--api-base %q: want an http(s) URL", redactURL(f.APIBase))}
		}
		if u.Scheme == "http" && !isLoopback(u.Hostname()) {
			return nil, &usageError{fmt.Sprintf("--api-base %q: plain http is allowed only to a loopback address (the key would cross the network in clear)", redactURL(f.APIBase))}
		}
	}
	return stripe.New(f.APIBase, key, conns), nil
}

// redactURL is an API base as messages may show it: without the password
// a user put in it (https://user:secret@host names a secret too).
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		return u.Redacted()
	}
	if at := strings.LastIndex(raw, "@"); at >= 0 {
		return "(a URL with credentials, not shown)" // unparsable: say nothing of it
	}
	return raw
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
