package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"reflect"
	"syscall"
	"time"

	"github.com/google/renameio/v2"

	"github.com/refundkit/refundkit/refund/sim"
	"github.com/refundkit/refundkit/refund/sim/adyensim"
	"github.com/refundkit/refundkit/refund/sim/paypalsim"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
)

type stripeSimCmd struct {
	Addr                         string        `default:"127.0.0.1:12480" placeholder:"HOST:PORT" group:"server" help:"Loopback address to listen on (default ${default}, a port of its own: stripe-mock's are 12111 and 12112); port 0 picks a free port."`
	AddrFile                     string        `name:"addr-file" placeholder:"FILE" group:"server" predictor:"file" help:"Once listening, write the base URL to FILE (atomically; into the pipe if FILE is a named pipe), so scripts wait for it instead of sleeping."`
	Charges                      int           `placeholder:"N" group:"data" help:"Generate N charges ch_sim0000001... with payment intents pi_sim0000001..., amounts drawn from --seed."`
	ChargesFile                  string        `name:"charges-file" placeholder:"FILE" group:"data" predictor:"file" help:"Add the charges in FILE, JSON lines of {id, payment_intent, currency, amount, refunds:[{amount, status, reason, metadata}]}."`
	Captures                     int           `placeholder:"N" group:"data" help:"Generate N PayPal captures CAPSIM00000000001... in USD, amounts drawn from --seed."`
	CapturesFile                 string        `name:"captures-file" placeholder:"FILE" group:"data" predictor:"file" help:"Add the PayPal captures in FILE, JSON lines of {id, currency, amount, refunds:[{amount, status, custom_id}]}."`
	Seed                         int64         `default:"1" group:"data" help:"Seed of generated amounts and of fault draws."`
	Latency                      time.Duration `group:"faults" help:"Latency added to every API request (a POST holds its idempotency key meanwhile)."`
	LatencyJitter                time.Duration `name:"latency-jitter" group:"faults" help:"Up to this much more latency, drawn per request."`
	RateLimitShare               float64       `name:"rate-limit-share" placeholder:"0-1" group:"faults" help:"Share of API requests answered 429 rate_limit (never saved under a key)."`
	ErrorBeforeCommitShare       float64       `name:"error-before-commit-share" placeholder:"0-1" group:"faults" help:"Share of refund creations answered 500 without creating the refund (the 500 is saved under the key)."`
	ErrorAfterCommitShare        float64       `name:"error-after-commit-share" placeholder:"0-1" group:"faults" help:"Share of refund creations that create the refund and answer 500 (saved under the key)."`
	DropAfterCommitShare         float64       `name:"drop-after-commit-share" placeholder:"0-1" group:"faults" help:"Share of refund creations that create the refund, save the success under the key and close the connection unanswered."`
	RequiresActionShare          float64       `name:"requires-action-share" placeholder:"0-1" group:"faults" help:"Share of new refunds that get status requires_action instead of succeeded."`
	GatewayTimeoutShare          float64       `name:"gateway-timeout-share" placeholder:"0-1" group:"faults" help:"Share of refund creations a gateway answers 504 at once while the request goes on (holding its key, then creating the refund and saving the success under the key)."`
	GatewayErrorAfterCommitShare float64       `name:"gateway-error-after-commit-share" placeholder:"0-1" group:"faults" help:"Share of refund creations that create the refund and save the success under the key, then get a 502 from a gateway."`
	GatewayStatus                int           `name:"gateway-status" placeholder:"500-599" group:"faults" help:"Status of the gateway's answers instead of 504 (timeouts) and 502 (after commit)."`
	GatewayStripeBody            bool          `name:"gateway-stripe-body" group:"faults" help:"Gateway answers carry a Stripe-shaped api_error JSON body instead of an HTML page (never a Request-Id header)."`
	PayPalPendingShare           float64       `name:"paypal-pending-share" placeholder:"0-1" group:"paypal" help:"Share of new PayPal refunds that are PENDING (status_details.reason ECHECK) instead of COMPLETED."`
	PayPalPendingFor             time.Duration `name:"paypal-pending-for" group:"paypal" help:"How long a PENDING PayPal refund stays so before it settles; 0 keeps it PENDING."`
	PayPalFailedShare            float64       `name:"paypal-failed-share" placeholder:"0-1" group:"paypal" help:"Share of PENDING PayPal refunds that settle FAILED instead of COMPLETED."`
	PayPalTokenTTL               time.Duration `name:"paypal-token-ttl" group:"paypal" help:"Lifetime of PayPal access tokens (default 9h): a short one makes clients renew them; an expired token gets 401 invalid_token."`
	PayPalEventsURL              string        `name:"paypal-events-url" placeholder:"URL" group:"paypal" help:"POST PayPal's webhook events (PAYMENT.REFUND.PENDING, PAYMENT.CAPTURE.REFUNDED, PAYMENT.REFUND.FAILED) to URL, a loopback address, signed for PAYPAL_WEBHOOK_ID from the environment with a throwaway certificate served over HTTPS; each is sent again until the receiver answers 2xx."`
	PayPalEventsCertRoot         string        `name:"paypal-events-cert-root" placeholder:"FILE" group:"paypal" predictor:"file" help:"With --paypal-events-url: write the root certificate (PEM) of the signing certificates to FILE before the URL is published, for the receiver's PAYPAL_CERT_ROOT_FILE."`
	PayPalEventsDuplicateShare   float64       `name:"paypal-events-duplicate-share" placeholder:"0-1" group:"paypal" help:"Share of PayPal's events delivered twice (a new transmission each)."`
	PayPalEventsReorderShare     float64       `name:"paypal-events-reorder-share" placeholder:"0-1" group:"paypal" help:"Share of PayPal's events held back so that later ones overtake them."`
	PayPalEventsForgedShare      float64       `name:"paypal-events-forged-share" placeholder:"0-1" group:"paypal" help:"Share of PayPal's events that also get a forged delivery (another key, or a tampered body), which a receiver must refuse."`
	PayPalEventsRollAfter        int           `name:"paypal-events-roll-after" placeholder:"N" group:"paypal" help:"Rotate the signing certificate every N events, as PayPal rotates its own: a new key and chain under the same root at a new cert URL, the old ones still served (0: never)."`
	AdyenPayments                int           `name:"adyen-payments" placeholder:"N" group:"data" help:"Generate N Adyen payments SIMPAY0000000001... in EUR, amounts drawn from --seed."`
	AdyenPaymentsFile            string        `name:"adyen-payments-file" placeholder:"FILE" group:"data" predictor:"file" help:"Add the Adyen payments in FILE, JSON lines of {psp_reference, currency, amount, merchant_account}."`
	AdyenMerchantAccount         string        `name:"adyen-merchant-account" default:"RefundkitSim" placeholder:"NAME" group:"data" help:"Adyen merchant account of the simulated company (default ${default}), and of payments that name none. The API key (ADYEN_API_KEY, default adyen_sim_test_key) acts for it and for every account a payment names."`
	AdyenKeyTTL                  time.Duration `name:"adyen-key-ttl" default:"744h" group:"adyen" help:"Forget Adyen Idempotency-Keys this long after their first use (default 744h, Adyen's 31 days); 0 keeps them until POST /_sim/adyen/forget-keys."`
	AdyenNotifyURL               string        `name:"adyen-notify-url" placeholder:"URL" group:"adyen" help:"Post Adyen's notifications (REFUND, REFUND_FAILED, REFUNDED_REVERSED) to URL, a loopback address, signed with ADYEN_HMAC_KEY (hex) from the environment; each is sent again until the receiver answers [accepted]."`
	AdyenNotifyDelay             time.Duration `name:"adyen-notify-delay" group:"adyen" help:"How long after a refund its first notification is due, and each later one after the one before."`
	AdyenNotifyJitter            time.Duration `name:"adyen-notify-jitter" group:"adyen" help:"Up to this much more delay, drawn per notification."`
	AdyenNotifyBackoff           time.Duration `name:"adyen-notify-backoff" default:"50ms" group:"adyen" help:"Wait before a notification that was not accepted is sent again, doubling up to 64 times as long (default ${default})."`
	AdyenRefundFailedShare       float64       `name:"adyen-refund-failed-share" placeholder:"0-1" group:"adyen" help:"Share of new Adyen refunds refused: their REFUND notification says success false."`
	AdyenRefundFailedLaterShare  float64       `name:"adyen-refund-failed-later-share" placeholder:"0-1" group:"adyen" help:"Share of the others that succeed (REFUND true), then fail: a REFUND_FAILED notification follows."`
	AdyenReversedShare           float64       `name:"adyen-reversed-share" placeholder:"0-1" group:"adyen" help:"Share of the others that succeed, then are reversed: a REFUNDED_REVERSED notification follows."`
	AdyenNotifyDuplicateShare    float64       `name:"adyen-notify-duplicate-share" placeholder:"0-1" group:"adyen" help:"Share of Adyen notifications delivered twice."`
	AdyenNotifyReorder           bool          `name:"adyen-notify-reorder" group:"adyen" help:"Send a refund's later notification (REFUND_FAILED, REFUNDED_REVERSED) before its REFUND."`
	AdyenNotifyFailShare         float64       `name:"adyen-notify-fail-share" placeholder:"0-1" group:"adyen" help:"Share of notification deliveries counted as failed whatever the receiver answered, so they are sent again."`
	AdyenConflictStatus          int           `name:"adyen-conflict-status" placeholder:"422|409" group:"adyen" help:"Status of errorCode 704, the answer while a request with the same Idempotency-Key runs: 422 (default) or 409, both of which Adyen documents."`
	AdyenOverRefund422           bool          `name:"adyen-over-refund-422" group:"adyen" help:"Refuse an Adyen refund past the payment's refundable amount at once (422, errorCode 137) instead of receiving it and refusing it in its REFUND notification (success false, Insufficient balance on payment)."`
	StripePendingShare           float64       `name:"stripe-pending-share" placeholder:"0-1" group:"stripe" help:"Share of new Stripe refunds that are pending instead of succeeded."`
	StripePendingFor             time.Duration `name:"stripe-pending-for" group:"stripe" help:"How long a pending Stripe refund stays so before it settles (succeeded, or failed); 0 keeps it pending."`
	StripeFailedShare            float64       `name:"stripe-failed-share" placeholder:"0-1" group:"stripe" help:"Share of pending Stripe refunds that settle failed (failure_reason expired_or_canceled_card) instead of succeeded."`
	StripeEventsURL              string        `name:"stripe-events-url" placeholder:"URL" group:"stripe" help:"POST Stripe's webhook events (refund.created, refund.updated, refund.failed, charge.refund.updated) to URL, a loopback address, signed (Stripe-Signature) with STRIPE_WEBHOOK_SECRET from the environment (whsec_..., a comma-separated list while secrets roll); each is sent again until the receiver answers 2xx."`
	StripeEventsBackoff          time.Duration `name:"stripe-events-backoff" default:"50ms" group:"stripe" help:"Wait before an event that was not accepted is sent again, doubling up to --stripe-events-max-backoff (default ${default})."`
	StripeEventsMaxBackoff       time.Duration `name:"stripe-events-max-backoff" default:"5s" group:"stripe" help:"Longest wait between an event's resends (default ${default}; Stripe retries for days)."`
	StripeEventsRollAfter        int           `name:"stripe-events-roll-after" placeholder:"N" group:"stripe" help:"Roll the signing secret every N events: the next of STRIPE_WEBHOOK_SECRET's signs from then on (0: never)."`
	StripeEventsRollOverlap      int           `name:"stripe-events-roll-overlap" default:"3" placeholder:"N" group:"stripe" help:"After a roll, sign N events with both the old and the new secret, as Stripe does while the old one expires (default ${default})."`
	StripeEventsDelay            time.Duration `name:"stripe-events-delay" group:"stripe" help:"How long after its change an event is due."`
	StripeEventsJitter           time.Duration `name:"stripe-events-jitter" group:"stripe" help:"Up to this much more delay, drawn per event."`
	StripeEventsDuplicateShare   float64       `name:"stripe-events-duplicate-share" placeholder:"0-1" group:"stripe" help:"Share of Stripe events delivered twice."`
	StripeEventsReorderShare     float64       `name:"stripe-events-reorder-share" placeholder:"0-1" group:"stripe" help:"Share of Stripe events held back --stripe-events-reorder-delay more, so later ones overtake them."`
	StripeEventsReorderDelay     time.Duration `name:"stripe-events-reorder-delay" group:"stripe" help:"How long a reordered event is held back (0: 100ms)."`
	StripeEventsForgedShare      float64       `name:"stripe-events-forged-share" placeholder:"0-1" group:"stripe" help:"Share of Stripe events followed by a forged delivery, posted once: a wrong signature or a tampered body, which the receiver must refuse (counted in the stats' events.forged and, if answered 2xx, events.forged_accepted)."`
	KeyTTL                       time.Duration `name:"key-ttl" group:"limits" help:"Forget Stripe idempotency keys this long after their first use (Stripe: 24h); 0 keeps them until POST /_sim/forget-keys. PayPal-Request-Ids are kept 45 days."`
	RateLimits                   string        `name:"rate-limits" enum:"off,test,live" default:"off" placeholder:"off|test|live" group:"limits" help:"Stripe's documented rate limits as token buckets (default off): for the account 25 requests/s (test, what test keys get) or 100/s (live), and 25/s for each endpoint (method and route: POST /v1/refunds and GET /v1/refunds apart). A request over a bucket gets 429 rate_limit with Stripe-Rate-Limited-Reason global-rate or endpoint-rate, never saved under its key. Bursts: one second's worth."`
	GlobalRate                   float64       `name:"global-rate" placeholder:"R" group:"limits" help:"With --rate-limits: the account's requests/s instead of the mode's 25 or 100."`
	GlobalBurst                  int           `name:"global-burst" placeholder:"N" group:"limits" help:"With --rate-limits: the account's bucket size instead of one second's worth."`
	EndpointRate                 float64       `name:"endpoint-rate" placeholder:"R" group:"limits" help:"With --rate-limits: each endpoint's requests/s instead of 25."`
	EndpointBurst                int           `name:"endpoint-burst" placeholder:"N" group:"limits" help:"With --rate-limits: each endpoint's bucket size instead of one second's worth."`
}

// StripeSim is stripe-sim: Stripe's, PayPal's and Adyen's refund APIs
// simulated on loopback until a signal, then its counters as JSON.
func StripeSim(env Env) int {
	const name = "stripe-sim"
	var c stripeSimCmd
	if code, done := parse(env, name, "Serve a simulated Stripe refund API, and PayPal's and Adyen's on the same port, on loopback, with fault knobs and control endpoints under /_sim/.", &c); done {
		return code
	}
	cfg, err := c.config()
	if err == nil {
		err = adyenKeys(&cfg.Adyen, env.Getenv)
	}
	if err == nil && cfg.Events.URL != "" { // the receiver reads the same variable
		cfg.Events.Secrets, err = stripeSecrets(env.Getenv, "--stripe-events-url needs STRIPE_WEBHOOK_SECRET in the environment: the endpoint's signing secret (whsec_...), or several separated by commas while one is rolled")
	}
	if err == nil && c.PayPalEventsURL != "" {
		if cfg.PayPal.Events.WebhookID = env.Getenv("PAYPAL_WEBHOOK_ID"); cfg.PayPal.Events.WebhookID == "" {
			err = &usageError{"--paypal-events-url needs PAYPAL_WEBHOOK_ID in the environment: the receiving webhook's id, which each delivery is signed for"}
		}
	}
	if err != nil {
		return usage(env.Stderr, name, err)
	}
	if err := stripesim.CheckLoopback(c.Addr); err != nil {
		return failf(env.Stderr, name, ExitUsage, "--addr: %v", err)
	}

	// Caught before the URL is published: a script's stop exits cleanly.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	s, err := stripesim.Listen(cfg, c.Addr)
	if err != nil {
		return fail(env.Stderr, name, withCode(ExitFailed, err))
	}
	defer s.Close()
	if c.PayPalEventsCertRoot != "" {
		root, _, _, ok := s.PayPal().EventsCerts()
		if !ok {
			return failf(env.Stderr, name, ExitUsage, "--paypal-events-cert-root is for --paypal-events-url")
		}
		if err := os.WriteFile(c.PayPalEventsCertRoot, root, 0o644); err != nil {
			return failf(env.Stderr, name, ExitFailed, "--paypal-events-cert-root: %v", err)
		}
	}
	if c.AddrFile != "" {
		if err := publishURL(ctx, c.AddrFile, s.URL()); err != nil {
			return failf(env.Stderr, name, ExitFailed, "--addr-file: %v", err)
		}
	}
	warnf(env.Stderr, name, "listening on %s", s.URL())
	if u := cfg.Adyen.NotifyURL; u != "" {
		warnf(env.Stderr, name, "adyen notifications to %s", u)
	}
	if u := cfg.Events.URL; u != "" {
		warnf(env.Stderr, name, "stripe events to %s", u)
	}
	if u := cfg.PayPal.Events.URL; u != "" {
		warnf(env.Stderr, name, "paypal events to %s", u)
	}
	if l := cfg.Faults.RateLimits; l.Enabled() {
		warnf(env.Stderr, name, "rate limits: %s", l)
	}

	<-ctx.Done()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.Shutdown(shutdownCtx) // requests still running after 5s are cut by Close
	st := s.Stats()
	warnf(env.Stderr, name, "stopped: %d refunds created, %d replayed, %d rate limited, %d dropped", st.RefundsCreated, st.Replayed, st.RateLimited, st.Dropped)
	if err := json.NewEncoder(env.Stdout).Encode(st); err != nil {
		return failf(env.Stderr, name, ExitFailed, "write the stats: %v", err)
	}
	return ExitOK
}

// config is the flags' configuration, data files read.
func (c *stripeSimCmd) config() (stripesim.Config, error) {
	var faults stripesim.Faults
	copyFields(&faults, c)
	faults.RateLimits = stripesim.RateLimits{Mode: c.RateLimits, GlobalRate: c.GlobalRate, GlobalBurst: c.GlobalBurst,
		EndpointRate: c.EndpointRate, EndpointBurst: c.EndpointBurst}
	if c.RateLimits == stripesim.RateLimitsOff {
		faults.RateLimits.Mode = ""
		for _, f := range []struct {
			name string
			set  bool
		}{{"global-rate", c.GlobalRate != 0}, {"global-burst", c.GlobalBurst != 0}, {"endpoint-rate", c.EndpointRate != 0}, {"endpoint-burst", c.EndpointBurst != 0}} {
			if f.set {
				return stripesim.Config{}, fmt.Errorf("--%s needs --rate-limits test or live", f.name)
			}
		}
	}
	switch err := faults.Validate(); {
	case err != nil:
		return stripesim.Config{}, err
	case c.Charges < 0:
		return stripesim.Config{}, fmt.Errorf("--charges %d: want zero or more", c.Charges)
	case c.Captures < 0:
		return stripesim.Config{}, fmt.Errorf("--captures %d: want zero or more", c.Captures)
	case c.KeyTTL < 0:
		return stripesim.Config{}, fmt.Errorf("--key-ttl %v: want zero (keep keys) or more", c.KeyTTL)
	}
	cfg := stripesim.Config{Faults: faults, Seed: c.Seed, KeyTTL: c.KeyTTL}
	var err error
	cfg.PayPal.Captures, err = withFile(paypalsim.GenerateCaptures(c.Captures, c.Seed), c.CapturesFile, paypalsim.ReadCaptures,
		func(cp paypalsim.Capture) []string { return []string{cp.ID} }, "--captures", c.Captures)
	if err != nil {
		return stripesim.Config{}, err
	}
	if cfg.Adyen, err = c.adyen(); err != nil {
		return stripesim.Config{}, err
	}
	if c.PayPalEventsURL != "" {
		if err := sim.CheckLoopbackURL("paypal events url", "events", c.PayPalEventsURL); err != nil {
			return stripesim.Config{}, fmt.Errorf("--paypal-events-url: %v", err)
		}
	}
	cfg.PayPal.Events = paypalsim.EventsConfig{URL: c.PayPalEventsURL, DuplicateShare: c.PayPalEventsDuplicateShare,
		ReorderShare: c.PayPalEventsReorderShare, ForgedShare: c.PayPalEventsForgedShare, RollAfter: c.PayPalEventsRollAfter}
	if cfg.Events, err = c.stripeEvents(); err != nil {
		return stripesim.Config{}, err
	}
	cfg.Charges, err = withFile(stripesim.GenerateCharges(c.Charges, c.Seed), c.ChargesFile, stripesim.ReadCharges,
		func(ch stripesim.Charge) []string { return []string{ch.ID, ch.PaymentIntent} }, "--charges", c.Charges)
	if err != nil {
		return stripesim.Config{}, err
	}
	return cfg, nil
}

// copyFields sets *dst's fields from *src's of the same name and type.
func copyFields(dst, src any) {
	d, s := reflect.ValueOf(dst).Elem(), reflect.ValueOf(src).Elem()
	for i := range d.NumField() {
		name := d.Type().Field(i).Name
		f := s.FieldByName(name)
		if !f.IsValid() {
			panic("no flag sets " + name)
		}
		if f.Type() == d.Field(i).Type() {
			d.Field(i).Set(f)
		}
	}
}

// withFile adds file's records to generated, refusing an id in both.
func withFile[T any](generated []T, file string, read func(io.Reader, string) ([]T, error), ids func(T) []string, flag string, n int) ([]T, error) {
	if file == "" {
		return generated, nil
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fromFile, err := read(f, file)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, g := range generated {
		for _, id := range ids(g) {
			seen[id] = true
		}
	}
	for _, r := range fromFile {
		for _, id := range ids(r) {
			if seen[id] {
				return nil, fmt.Errorf("%s: %s is also generated by %s %d", file, id, flag, n)
			}
		}
	}
	return append(generated, fromFile...), nil
}

// adyen is Adyen's routes' configuration (keys: adyenKeys).
func (c *stripeSimCmd) adyen() (adyensim.Config, error) {
	switch {
	case c.AdyenPayments < 0:
		return adyensim.Config{}, fmt.Errorf("--adyen-payments %d: want zero or more", c.AdyenPayments)
	case c.AdyenKeyTTL < 0:
		return adyensim.Config{}, fmt.Errorf("--adyen-key-ttl %v: want zero (keep keys) or more", c.AdyenKeyTTL)
	case c.AdyenNotifyBackoff < 0:
		return adyensim.Config{}, fmt.Errorf("--adyen-notify-backoff %v: want a duration of zero (the default) or more", c.AdyenNotifyBackoff)
	}
	if c.AdyenNotifyURL != "" {
		if err := adyensim.CheckNotifyURL(c.AdyenNotifyURL); err != nil {
			return adyensim.Config{}, fmt.Errorf("--adyen-notify-url: %v", err)
		}
	}
	payments, err := withFile(adyensim.GeneratePayments(c.AdyenPayments, c.Seed), c.AdyenPaymentsFile, adyensim.ReadPayments,
		func(p adyensim.Payment) []string { return []string{p.PSPReference} }, "--adyen-payments", c.AdyenPayments)
	if err != nil {
		return adyensim.Config{}, err
	}
	return adyensim.Config{Payments: payments, MerchantAccount: c.AdyenMerchantAccount,
		KeyTTL: c.AdyenKeyTTL, NotifyURL: c.AdyenNotifyURL, NotifyBackoff: c.AdyenNotifyBackoff}, nil
}

// adyenKeys reads ADYEN_API_KEY and ADYEN_HMAC_KEY (needed with
// --adyen-notify-url) from the environment, never a flag; never printed.
func adyenKeys(cfg *adyensim.Config, getenv func(string) string) error {
	cfg.APIKey = getenv("ADYEN_API_KEY")
	missing := ""
	if cfg.NotifyURL != "" {
		missing = "--adyen-notify-url needs ADYEN_HMAC_KEY in the environment: the HMAC key in hex, as Adyen's Customer Area shows it"
	}
	keys, err := hmacKeys(getenv, missing)
	if len(keys) > 0 {
		cfg.HMACKey = keys[0] // the first signs; a rotation's others verify
	}
	return err
}

// stripeEvents is the configuration of Stripe's events (secrets: StripeSim).
func (c *stripeSimCmd) stripeEvents() (stripesim.EventsConfig, error) {
	switch {
	case c.StripeEventsBackoff < 0 || c.StripeEventsMaxBackoff < 0:
		return stripesim.EventsConfig{}, fmt.Errorf("--stripe-events-backoff %v, --stripe-events-max-backoff %v: want durations of zero (the default) or more", c.StripeEventsBackoff, c.StripeEventsMaxBackoff)
	case c.StripeEventsRollAfter < 0 || c.StripeEventsRollOverlap < 0:
		return stripesim.EventsConfig{}, fmt.Errorf("--stripe-events-roll-after %d, --stripe-events-roll-overlap %d: want zero or more", c.StripeEventsRollAfter, c.StripeEventsRollOverlap)
	}
	if c.StripeEventsURL != "" {
		if err := sim.CheckLoopbackURL("events url", "events", c.StripeEventsURL); err != nil {
			return stripesim.EventsConfig{}, fmt.Errorf("--stripe-events-url: %v", err)
		}
	}
	return stripesim.EventsConfig{URL: c.StripeEventsURL, RollAfter: c.StripeEventsRollAfter, RollOverlap: c.StripeEventsRollOverlap,
		Backoff: c.StripeEventsBackoff, MaxBackoff: c.StripeEventsMaxBackoff}, nil
}

// publishURL writes url to path: atomically to a file, or into a named pipe
// (a reader blocks until the server is up; none holds nothing up).
func publishURL(ctx context.Context, path, url string) error {
	line := []byte(url + "\n")
	fi, err := os.Stat(path)
	if err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		return renameio.WriteFile(path, line, 0o644)
	}
	go func() {
		f, err := os.OpenFile(path, os.O_WRONLY, 0) // blocks until a reader opens
		if err != nil {
			return
		}
		defer f.Close()
		if ctx.Err() == nil {
			f.Write(line)
		}
	}()
	return nil
}
