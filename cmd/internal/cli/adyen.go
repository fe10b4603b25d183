package cli

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/checkpoint/postgres"
	"github.com/refundkit/refundkit/refund/provider/adyen"
	"github.com/refundkit/refundkit/refund/provider/adyen/notes"
	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
)

// adyenFlags are the Adyen settings of every command that reads Adyen's
// refunds. The API key, merchant account and HMAC key are never flags:
// they come from ADYEN_API_KEY, ADYEN_MERCHANT_ACCOUNT and ADYEN_HMAC_KEY
// only, so they stay out of shell history and process listings.
type adyenFlags struct {
	Notifications string `placeholder:"FILE|URL" group:"provider" predictor:"file" help:"--provider adyen: the notifications adyen-webhook keeps (its --out: a file, or a PostgreSQL URL; default with a PostgreSQL checkpoint: its database), verified with ADYEN_HMAC_KEY. They settle pending refunds and tell of refunds whose answer was lost; without them every Adyen refund stays pending."`
}

// adyenNotes are the notifications the flags name, opened for reading.
// pgDefault is the checkpoint's URL when it is a PostgreSQL database,
// which the receiver may write into too. None named is a usage error:
// Adyen has no API that lists a payment's refunds, so without them a run
// would send blind (a rerun under a new batch name could not see the
// refunds of the last one) and audit could check nothing.
func (f *adyenFlags) adyenNotes(env Env, pgDefault string) (notes.Store, error) {
	src := f.Notifications
	if src == "" && postgres.IsURL(pgDefault) {
		src = pgDefault
	}
	if src == "" {
		return nil, &usageError{"--provider adyen needs --notifications FILE|URL, the notifications adyen-webhook keeps (its --out): Adyen has no API that lists a payment's refunds, so they are the only look-up; without them a refund already made cannot be seen"}
	}
	raw := env.Getenv("ADYEN_HMAC_KEY")
	if raw == "" {
		return nil, &usageError{"ADYEN_HMAC_KEY is not set: the notifications cannot be verified without it"}
	}
	key, err := wire.ParseHMACKey(raw)
	if err != nil {
		return nil, &usageError{"ADYEN_HMAC_KEY: " + err.Error()}
	}
	if postgres.IsURL(src) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := notes.OpenPG(ctx, src, key)
		if err != nil {
			return nil, fmt.Errorf("--notifications: %w", err)
		}
		return s, nil
	}
	s, err := notes.OpenFile(src, key, false)
	if err != nil {
		return nil, &usageError{fmt.Sprintf("--notifications: %v", err)}
	}
	return s, nil
}

// adyenProvider builds the Adyen client from the environment: the test
// API unless ADYEN_API_BASE names another (a live one only with live); plain
// http only to a loopback address (the simulator).
func adyenProvider(env Env, live bool, conns int, store notes.Store) (refund.Provider, error) {
	key, merchant := env.Getenv("ADYEN_API_KEY"), env.Getenv("ADYEN_MERCHANT_ACCOUNT")
	switch {
	case key == "":
		return nil, &usageError{"ADYEN_API_KEY is not set"}
	case merchant == "":
		return nil, &usageError{"ADYEN_MERCHANT_ACCOUNT is not set"}
	}
	base := env.Getenv("ADYEN_API_BASE")
	if base == "" {
		if live {
			return nil, &usageError{"--live with Adyen needs ADYEN_API_BASE: Adyen's live Checkout API is at your own prefix (https://[prefix]-checkout-live.adyenpayments.com/checkout)"}
		}
		base = adyen.TestAPIBase
	}
	u, err := url.Parse(base)
	switch {
	case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		return nil, &usageError{fmt.Sprintf("ADYEN_API_BASE %q: want an http(s) URL", redactURL(base))}
	case u.Scheme == "http" && !isLoopback(u.Hostname()):
		return nil, &usageError{fmt.Sprintf("ADYEN_API_BASE %q: plain http is allowed only to a loopback address (the API key would cross the network in clear)", redactURL(base))}
	case adyenLive(u.Hostname()) && !live:
		return nil, &usageError{fmt.Sprintf("ADYEN_API_BASE %q is Adyen's live API: pass --live to move real money", redactURL(base))}
	}
	cfg := adyen.Config{Base: base, APIKey: key, Merchant: merchant, Conns: conns}
	if store != nil { // a nil Store in the interface would not be nil
		cfg.Notes = store
	}
	return adyen.New(cfg), nil
}

// adyenLive reports a host of Adyen's live APIs: any adyen.com or
// adyenpayments.com host but the test environment's.
func adyenLive(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	adyenHost := h == "adyen.com" || strings.HasSuffix(h, ".adyen.com") || h == "adyenpayments.com" || strings.HasSuffix(h, ".adyenpayments.com")
	return adyenHost && !strings.Contains(h, "-test.") && !strings.HasPrefix(h, "test.")
}
