package cli

// --provider: the refund API a run calls, its settings and its pace.

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/checkpoint/natsjs"
	"github.com/refundkit/refundkit/refund/checkpoint/postgres"
	"github.com/refundkit/refundkit/refund/provider/adyen"
	"github.com/refundkit/refundkit/refund/provider/adyen/notes"
	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
	"github.com/refundkit/refundkit/refund/provider/events"
	"github.com/refundkit/refundkit/refund/provider/events/natsstore"
	"github.com/refundkit/refundkit/refund/provider/events/pgstore"
	"github.com/refundkit/refundkit/refund/provider/exec"
	"github.com/refundkit/refundkit/refund/provider/paypal"
	ppevents "github.com/refundkit/refundkit/refund/provider/paypal/events"
	"github.com/refundkit/refundkit/refund/provider/stripe"
)

// The providers --provider names.
const (
	providerStripe = "stripe"
	providerPayPal = "paypal"
	providerExec   = "exec"
	providerAdyen  = "adyen"
)

// providerFlags choose the provider and carry its settings.
type providerFlags struct {
	Provider string `enum:"stripe,paypal,adyen,exec" default:"stripe" group:"provider" help:"The refund API: stripe (STRIPE_API_KEY), paypal (PAYPAL_CLIENT_ID, PAYPAL_CLIENT_SECRET), adyen (ADYEN_API_KEY, ADYEN_MERCHANT_ACCOUNT, ADYEN_HMAC_KEY; ADYEN_API_BASE) or exec (any API, through the commands of --exec-create and --exec-find: docs/providers.md, \"Any refund API\")."`
	stripeFlags
	paypalFlags
	adyenFlags
	execFlags
	// checkpoint is the run's, whose PostgreSQL database also holds
	// Adyen's notifications when --notifications names none.
	checkpoint string `kong:"-"`
	// warn tells stderr what a store of events cannot show durable.
	warn func(msg string) `kong:"-"`
}

// The key itself is never a flag, nor any other secret: they come from the
// environment only, so they stay out of shell history and process listings.
type stripeFlags struct {
	APIBase string `name:"api-base" placeholder:"URL" group:"provider" help:"Stripe API base URL (default: env STRIPE_API_BASE, else https://api.stripe.com)."`
	Live    bool   `group:"provider" help:"${live_help}"`
}

type paypalFlags struct {
	PayPalAPIBase string `name:"paypal-api-base" placeholder:"URL" group:"provider" help:"PayPal API base URL (default: env PAYPAL_API_BASE, else the sandbox, https://api-m.sandbox.paypal.com; with --live, https://api-m.paypal.com)."`
}

type adyenFlags struct {
	Notifications string `placeholder:"FILE|URL" group:"provider" predictor:"file" help:"The provider's own events, as the receiver keeps them. --provider adyen: the notifications webhook --adyen (or adyen-webhook --out) keeps (a file, a PostgreSQL URL or a NATS URL; default with a PostgreSQL checkpoint: its database), verified with ADYEN_HMAC_KEY; without them every Adyen refund stays pending. --provider stripe: the events webhook --stripe keeps (a file, a PostgreSQL URL or a NATS URL), verified with STRIPE_WEBHOOK_SECRET; --provider paypal: the events webhook --paypal keeps (a file, a PostgreSQL URL or a NATS URL), verified for PAYPAL_WEBHOOK_ID: a pending refund they tell the end of is settled with no request to the provider."`
}

// execFlags are --provider exec's. Its commands (/bin/sh -c) inherit
// refund's environment, which refund never prints.
type execFlags struct {
	ExecCreate  string        `name:"exec-create" placeholder:"CMD" group:"exec" help:"--provider exec: the command run once per refund attempt, the plan item as JSON on stdin, REFUNDKIT_IDEMPOTENCY_KEY and the rest in its environment; it prints one JSON answer. Exit 0 answered, 75 retry later with the same key, anything else leaves the item in doubt."`
	ExecFind    string        `name:"exec-find" placeholder:"CMD" group:"exec" help:"--provider exec: the command that prints the refunds the API holds for a payment (JSON lines), so that an item in doubt is looked up before anything is sent again. Without it, an item in doubt is sent again only under the same key."`
	ExecTimeout time.Duration `name:"exec-timeout" default:"30s" placeholder:"D" group:"exec" help:"--provider exec: how long one run of a command may take (100ms or more); then its process group is killed (a create call in doubt)."`
	ExecKeyTTL  time.Duration `name:"exec-key-ttl" default:"0s" placeholder:"D" group:"exec" help:"--provider exec: how long the API keeps an idempotency key (0: for ever). Without --exec-find, an item in doubt is sent again under its key while the key is surely kept (for ever, or within half this TTL of its first call); later it is left for a person."`
}

// minExecTimeout is the shortest --exec-timeout: shorter, /bin/sh could
// not start, and every item would be in doubt.
const minExecTimeout = 100 * time.Millisecond

// provider builds the provider the flags name (errors never hold a secret);
// a lister only lists refunds (audit).
func (f *providerFlags) provider(env Env, stderr io.Writer, name string, conns int, lister bool) (refund.Provider, error) {
	f.warn = func(msg string) { warnf(stderr, name, "%s", msg) }
	if f.Provider == providerExec && lister && f.ExecFind == "" {
		return nil, &usageError{"--provider exec lists refunds with --exec-find CMD: give it"}
	}
	if f.Provider == providerExec && !lister && f.ExecCreate == "" {
		return nil, &usageError{"--provider exec needs --exec-create CMD"}
	}
	// The commands refused the flags that do not apply (refuseInapplicable).
	switch f.Provider {
	case providerExec:
		return f.exec(stderr, name)
	case providerPayPal:
		return f.paypalFlags.provider(env, f.Live, conns, f.Notifications, f.warn)
	case providerAdyen:
		return f.adyen(env, conns)
	}
	return f.stripe(env, conns)
}

// closeProvider closes what a provider holds open (Adyen's notifications).
func closeProvider(p refund.Provider) {
	if cl, ok := p.(io.Closer); ok {
		cl.Close()
	}
}

// stripe builds the Stripe client from the flags and STRIPE_API_KEY.
func (f *providerFlags) stripe(env Env, conns int) (refund.Provider, error) {
	key := env.Getenv("STRIPE_API_KEY")
	switch {
	case key == "":
		return nil, &usageError{"STRIPE_API_KEY is not set"}
	case !strings.HasPrefix(key, "sk_") && !strings.HasPrefix(key, "rk_"):
		return nil, &usageError{"STRIPE_API_KEY does not look like a Stripe secret or restricted key (sk_... or rk_...)"}
	case stripeLive(key) && !f.Live:
		return nil, &usageError{"STRIPE_API_KEY is a live-mode key: pass --live to move real money"}
	}
	f.APIBase = cmp.Or(f.APIBase, env.Getenv("STRIPE_API_BASE"))
	if f.APIBase != "" {
		if err := checkAPIBase("--api-base", f.APIBase, "the key", "", false); err != nil {
			return nil, err
		}
	}
	c := stripe.New(f.APIBase, key, conns)
	if f.Notifications == "" {
		return c, nil
	}
	secrets, err := stripeSecrets(env.Getenv, "--notifications with --provider stripe needs STRIPE_WEBHOOK_SECRET: the endpoint's signing secret (whsec_...) each kept event is verified under again, or several separated by commas while one is rolled")
	if err != nil {
		return nil, err
	}
	evs, err := openStripeEvents(f.Notifications, secrets, false, f.warn)
	if err != nil {
		return nil, err
	}
	return &stripe.Telling{Client: c, Events: evs, Live: stripeLive(key)}, nil
}

// openStripeEvents opens Stripe's kept events: a file (held for writing
// with write), a table of the PostgreSQL checkpoint's database, or a
// bucket beside a NATS JetStream checkpoint (openEvents).
func openStripeEvents(spec string, secrets []string, write bool, warn func(string)) (stripe.EventStore, error) {
	return openEvents(spec, "stripe", stripe.Codec(secrets), stripe.EventsTable, write, warn)
}

// openPayPalEvents opens PayPal's kept events, as openStripeEvents.
func openPayPalEvents(spec string, v *ppevents.Verifier, write bool, warn func(string)) (ppevents.EventStore, error) {
	c, err := ppevents.Codec(v)
	if err != nil {
		return nil, err
	}
	return openEvents(spec, "paypal", c, ppevents.EventsTable, write, warn)
}

// openEvents opens the deliveries kept under c at spec: a file (held for
// writing with write; one that cannot be read, for reading, is a usage
// error of --notifications), t in the PostgreSQL checkpoint's database, or
// provider's bucket beside a NATS JetStream checkpoint.
func openEvents[N any](spec, provider string, c *events.Codec[N], t *events.Table[N], write bool, warn func(string)) (events.Store[N], error) {
	if natsjs.IsURL(spec) {
		kv, done, err := openEventsBucket(spec, provider, write, warn)
		if err != nil {
			return nil, err
		}
		return natsstore.New(kv, c, done), nil
	}
	if postgres.IsURL(spec) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := pgstore.Open(ctx, spec, c, t)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	s, err := events.Open(spec, c, write)
	if err != nil {
		if write {
			return nil, err
		}
		return nil, &usageError{fmt.Sprintf("--notifications: %v", err)}
	}
	return s, nil
}

// openEventsBucket opens provider's bucket of deliveries beside the NATS
// JetStream checkpoint at spec, created with write (a reader of a missing
// one is a usage error of --notifications), warned of what the server
// cannot show durable; done ends the connection.
func openEventsBucket(spec, provider string, write bool, warn func(string)) (kv jetstream.KeyValue, done func(), err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cp, err := natsjs.Open(ctx, spec, natsjs.Options{Warn: warn}, true)
	if err != nil {
		return nil, nil, err
	}
	if kv, err = cp.EventsBucket(ctx, provider, write); err != nil {
		cp.Close()
		if errors.Is(err, natsjs.ErrNoEvents) {
			return nil, nil, &usageError{fmt.Sprintf("--notifications: %v", err)}
		}
		return nil, nil, err
	}
	return kv, func() { cp.Close() }, nil
}

// isStoreURL: spec names a shared store (a PostgreSQL database or a NATS
// JetStream server), not a file.
func isStoreURL(spec string) bool { return postgres.IsURL(spec) || natsjs.IsURL(spec) }

// stripeSecrets are STRIPE_WEBHOOK_SECRET's signing secrets (whsec_...,
// comma-separated while one is rolled); unset, none, or the error missing
// says when it names one. Never printed.
func stripeSecrets(getenv func(string) string, missing string) ([]string, error) {
	raw := getenv("STRIPE_WEBHOOK_SECRET")
	switch {
	case strings.TrimSpace(raw) == "" && missing == "":
		return nil, nil
	case strings.TrimSpace(raw) == "":
		return nil, &usageError{missing}
	}
	var secrets []string
	for _, sec := range strings.Split(raw, ",") {
		sec = strings.TrimSpace(sec)
		if rest, ok := strings.CutPrefix(sec, "whsec_"); !ok || rest == "" {
			return nil, &usageError{"STRIPE_WEBHOOK_SECRET: want whsec_... secrets separated by commas"}
		}
		secrets = append(secrets, sec)
	}
	return secrets, nil
}

func stripeLive(key string) bool {
	return strings.HasPrefix(key, "sk_live_") || strings.HasPrefix(key, "rk_live_")
}

// provider builds the PayPal client: the live API only with live.
func (f *paypalFlags) provider(env Env, live bool, conns int, notifications string, warn func(string)) (refund.Provider, error) {
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
	} else if err := checkAPIBase(from, base, "the credentials", "PayPal's", live); err != nil {
		return nil, err
	}
	c := paypal.New(base, id, secret, conns)
	if notifications == "" {
		return c, nil
	}
	v, err := paypalVerifier(env.Getenv, live, "--notifications with --provider paypal needs PAYPAL_WEBHOOK_ID: the id of the webhook the events were signed for (PayPal's Developer Dashboard shows it)")
	if err != nil {
		return nil, err
	}
	evs, err := openPayPalEvents(notifications, v, false, warn)
	if err != nil {
		return nil, err
	}
	return &ppevents.Telling{Client: c, Events: evs}, nil
}

// paypalVerifier checks PayPal's webhook deliveries for PAYPAL_WEBHOOK_ID
// (missing says what to do when it is unset) under the system's roots; a
// simulator's root when PAYPAL_CERT_ROOT_FILE names one (its certificates
// served on loopback), never with live.
func paypalVerifier(getenv func(string) string, live bool, missing string) (*ppevents.Verifier, error) {
	id := getenv("PAYPAL_WEBHOOK_ID")
	if id == "" {
		return nil, &usageError{missing}
	}
	root := getenv("PAYPAL_CERT_ROOT_FILE")
	if root == "" {
		return &ppevents.Verifier{WebhookID: id}, nil
	}
	if live {
		return nil, &usageError{"PAYPAL_CERT_ROOT_FILE trusts a simulator's certificates: not with --live"}
	}
	pem, err := os.ReadFile(root)
	if err != nil {
		return nil, &usageError{fmt.Sprintf("PAYPAL_CERT_ROOT_FILE: %v", err)}
	}
	v, err := ppevents.PrivateVerifier(id, pem, "127.0.0.1", "localhost")
	if err != nil {
		return nil, &usageError{fmt.Sprintf("PAYPAL_CERT_ROOT_FILE %s: %v", root, err)}
	}
	return v, nil
}

// adyenNotes opens the notifications named (by default pgDefault's). None is
// a usage error: Adyen lists no refunds, so a run would send blind.
func (f *adyenFlags) adyenNotes(env Env, pgDefault string, warn func(string)) (notes.Store, error) {
	src := f.Notifications
	if src == "" && postgres.IsURL(pgDefault) {
		src = pgDefault
	}
	if src == "" {
		return nil, &usageError{"--provider adyen needs --notifications FILE|URL, the notifications adyen-webhook keeps (its --out): Adyen has no API that lists a payment's refunds, so they are the only look-up; without them a refund already made cannot be seen"}
	}
	keys, err := hmacKeys(env.Getenv, "ADYEN_HMAC_KEY is not set: the notifications cannot be verified without it")
	if err != nil {
		return nil, err
	}
	if natsjs.IsURL(src) {
		kv, done, err := openEventsBucket(src, "adyen", false, warn)
		if err != nil {
			return nil, err
		}
		return notes.OpenNATS(kv, keys, done)
	}
	if postgres.IsURL(src) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s, err := notes.OpenPG(ctx, src, keys)
		if err != nil {
			return nil, fmt.Errorf("--notifications: %w", err)
		}
		return s, nil
	}
	s, err := notes.OpenFile(src, keys, false)
	if err != nil {
		return nil, &usageError{fmt.Sprintf("--notifications: %v", err)}
	}
	return s, nil
}

// hmacKeys are ADYEN_HMAC_KEY's keys (hex; two, separated by a comma,
// while a key is rotated); unset, none, or the error missing says when it
// names one.
func hmacKeys(getenv func(string) string, missing string) ([][]byte, error) {
	raw := getenv("ADYEN_HMAC_KEY")
	switch {
	case raw == "" && missing == "":
		return nil, nil
	case raw == "":
		return nil, &usageError{missing}
	}
	keys, err := wire.ParseHMACKeys(raw)
	if err != nil {
		return nil, &usageError{"ADYEN_HMAC_KEY: " + err.Error()}
	}
	return keys, nil
}

// adyen builds the Adyen client (a live ADYEN_API_BASE only with --live)
// over the notifications kept, by default in the checkpoint's database.
func (f *providerFlags) adyen(env Env, conns int) (refund.Provider, error) {
	store, err := f.adyenNotes(env, f.checkpoint, f.warn)
	if err != nil {
		return nil, err
	}
	key, merchant := env.Getenv("ADYEN_API_KEY"), env.Getenv("ADYEN_MERCHANT_ACCOUNT")
	switch {
	case key == "":
		return nil, &usageError{"ADYEN_API_KEY is not set"}
	case merchant == "":
		return nil, &usageError{"ADYEN_MERCHANT_ACCOUNT is not set"}
	}
	base := env.Getenv("ADYEN_API_BASE")
	if base == "" {
		if f.Live {
			return nil, &usageError{"--live with Adyen needs ADYEN_API_BASE: Adyen's live Checkout API is at your own prefix (https://[prefix]-checkout-live.adyenpayments.com/checkout)"}
		}
		base = adyen.TestAPIBase
	}
	if err := checkAPIBase("ADYEN_API_BASE", base, "the API key", "Adyen's", f.Live); err != nil {
		return nil, err
	}
	cfg := adyen.Config{Base: base, APIKey: key, Merchant: merchant, Conns: conns}
	if store != nil { // a nil Store in the interface would not be nil
		cfg.Notes = store
	}
	return adyen.New(cfg), nil
}

// checkAPIBase refuses a base that is not http(s), plain http off loopback
// (secret in clear), or whose's live API without live.
func checkAPIBase(from, base, secret, whose string, live bool) error {
	u, err := url.Parse(base)
	switch {
	case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		return &usageError{fmt.Sprintf("%s %q: want an http(s) URL", from, redactURL(base))}
	case u.Scheme == "http" && !isLoopback(u.Hostname()):
		return &usageError{fmt.Sprintf("%s %q: plain http is allowed only to a loopback address (%s would cross the network in clear)", from, redactURL(base), secret)}
	case !live && (whose == "PayPal's" && paypalLive(u.Hostname()) || whose == "Adyen's" && adyenLive(u.Hostname())):
		return &usageError{fmt.Sprintf("%s %q is %s live API: pass --live to move real money", from, redactURL(base), whose)}
	}
	return nil
}

// paypalLive: any paypal.com host but the sandbox's.
func paypalLive(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	return (h == "paypal.com" || strings.HasSuffix(h, ".paypal.com")) && !strings.Contains(h, "sandbox")
}

// adyenLive: any adyen.com or adyenpayments.com host but the test ones.
func adyenLive(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	adyenHost := h == "adyen.com" || strings.HasSuffix(h, ".adyen.com") || h == "adyenpayments.com" || strings.HasSuffix(h, ".adyenpayments.com")
	return adyenHost && !strings.Contains(h, "-test.") && !strings.HasPrefix(h, "test.")
}

// redactURL is raw without its password (unparsable with one: not shown).
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		return u.Redacted()
	}
	if strings.Contains(raw, "@") {
		return "(a URL with credentials, not shown)"
	}
	return raw
}

func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || ip != nil && ip.IsLoopback()
}

// providerRules are the provider flags' rules; live is --live's.
func providerRules(p, notesFor string, notes bool, live applies) []applies {
	return []applies{
		{[]string{"exec-find", "exec-timeout", "exec-key-ttl"}, p == providerExec, "--provider exec"},
		{[]string{"api-base"}, p == providerStripe, "--provider stripe"},
		{[]string{"paypal-api-base"}, p == providerPayPal, "--provider paypal"},
		{[]string{"notifications"}, notes, notesFor},
		live,
	}
}

func (f *providerFlags) exec(stderr io.Writer, name string) (refund.Provider, error) {
	switch {
	case f.ExecTimeout <= 0:
		return nil, &usageError{fmt.Sprintf("--exec-timeout %v: want a duration above 0", f.ExecTimeout)}
	case f.ExecTimeout < minExecTimeout:
		return nil, &usageError{fmt.Sprintf("--exec-timeout %v: want %v or more (a command cannot start and answer sooner)", f.ExecTimeout, minExecTimeout)}
	case f.ExecKeyTTL < 0:
		return nil, &usageError{fmt.Sprintf("--exec-key-ttl %v: want 0 (kept for ever) or more", f.ExecKeyTTL)}
	}
	return exec.New(exec.Config{Create: f.ExecCreate, Find: f.ExecFind, Timeout: f.ExecTimeout, KeyTTL: f.ExecKeyTTL,
		Stderr: stderr, Prefix: name + ": "})
}

// pacer paces the run: --rate for all endpoints (0: none), and --share of
// each provider's limits. A pace that sends nothing within paceBound is
// refused: the run would hold the journal or its claims and never send.
func (c *refundCmd) pacer(env Env) (*refund.Pacer, error) {
	if c.Rate != nil && *c.Rate == 0 {
		return nil, nil
	}
	bound, per := c.paceBound()
	if c.Rate != nil {
		switch r := *c.Rate; {
		case math.IsInf(r, 0):
			return nil, &usageError{fmt.Sprintf("--rate %g: want 0 (no pacing) or a finite number of requests per second", r)}
		case !paces(r, bound):
			return nil, &usageError{fmt.Sprintf("--rate %g: want 0 (no pacing) or at least %s requests per second (one %s)", r, ceilDigits(1/bound.Seconds()), per)}
		}
	}
	limits, whose := c.limits(env, c.Share)
	whole, _ := c.limits(env, 1)
	if c.Rate != nil {
		limits.Global, whole.Global = *c.Rate, 0 // the run's total; Stripe's endpoints keep their share of their own
		// No per-endpoint limits published: --rate replaces the guessed one.
		if guessed := map[string]float64{providerPayPal: paypal.Rate, providerAdyen: adyen.Rate}[c.Provider]; guessed > 0 {
			limits, _ = c.limits(env, *c.Rate/guessed)
			whole = refund.Limits{}
		}
	}
	if limits == (refund.Limits{}) {
		return nil, nil
	}
	if s := whole.Slowest(); s > 0 && !paces(limits.Slowest(), bound) {
		return nil, &usageError{fmt.Sprintf("--share %g: want at least %s of %s limits (one request %s on each of its endpoints), and at most 1", c.Share, ceilDigits(1/(bound.Seconds()*s)), whose, per)}
	}
	return refund.NewPacer(limits), nil
}

// limits are the provider's at share, and whose they are; exec's are none.
func (c *refundCmd) limits(env Env, share float64) (refund.Limits, string) {
	switch c.Provider {
	case providerStripe:
		return stripe.Limits(stripeLive(env.Getenv("STRIPE_API_KEY")), share), "Stripe's"
	case providerPayPal:
		return paypal.Limits(share), "PayPal's"
	case providerAdyen:
		return adyen.Limits(share), "Adyen's"
	}
	return refund.Limits{}, ""
}

// paceBound is the longest a request may wait, and how to say it: a minute,
// or a shorter lease (slower, claimed items starve other workers).
func (c *refundCmd) paceBound() (time.Duration, string) {
	if postgres.IsURL(c.Journal) && c.Lease < time.Minute {
		return c.Lease, "in a --lease of " + c.Lease.String()
	}
	return time.Minute, "a minute"
}

// paces reports whether rate (requests/s) sends one request within bound,
// with the slack that keeps ceilDigits' floor accepted.
func paces(rate float64, bound time.Duration) bool {
	return rate*bound.Seconds() >= 1-1e-9
}

// ceilDigits is x rounded up to three significant digits, so that the
// floor a message names is itself accepted: 1/60 is 0.0167, 1/300 0.00334.
func ceilDigits(x float64) string {
	p := math.Pow(10, math.Floor(math.Log10(x))-2)
	return strconv.FormatFloat(math.Ceil(x/p-1e-6)*p, 'g', 3, 64)
}

// shareBudget splits --share among a shared checkpoint's live workers of
// one account, re-split as they come and go (not with --rate or a dry run).
func (c *refundCmd) shareBudget(ctx context.Context, env Env, log *slog.Logger, cp refund.Checkpoint, pacer *refund.Pacer) error {
	if pacer == nil || c.Rate != nil || c.DryRun {
		return nil
	}
	account := c.budgetAccount(env)
	if account == "" {
		return nil
	}
	apply := func(workers int) {
		pacer.Scale(1 / float64(workers))
		log.Debug("pacing: the live workers of this account split --share", "workers", workers,
			"share", strconv.FormatFloat(c.Share, 'g', 3, 64), "this_run", strconv.FormatFloat(c.Share/float64(workers), 'g', 3, 64))
	}
	var err error
	switch cp := cp.(type) {
	case *postgres.Checkpoint:
		_, err = cp.ShareBudget(ctx, account, c.Share, apply)
	case *natsjs.Checkpoint:
		_, err = cp.ShareBudget(ctx, account, apply)
	}
	return err
}

// budgetAccount names the account the pace shares, for its workers to find
// each other: provider, mode, API base and a 96-bit digest of the credential.
func (c *refundCmd) budgetAccount(env Env) string {
	var mode, base string
	var secret []string
	switch c.Provider {
	case providerStripe:
		key := env.Getenv("STRIPE_API_KEY")
		mode, base, secret = "test", cmp.Or(c.APIBase, env.Getenv("STRIPE_API_BASE"), "https://api.stripe.com"), []string{key}
		if stripeLive(key) {
			mode = "live"
		}
	case providerPayPal:
		mode, base = "sandbox", paypal.SandboxAPIBase
		if c.Live {
			mode, base = "live", paypal.LiveAPIBase
		}
		base = cmp.Or(c.PayPalAPIBase, env.Getenv("PAYPAL_API_BASE"), base)
		secret = []string{env.Getenv("PAYPAL_CLIENT_ID"), env.Getenv("PAYPAL_CLIENT_SECRET")}
	case providerAdyen:
		mode, base = "test", adyen.TestAPIBase
		if c.Live {
			mode = "live"
		}
		base = cmp.Or(env.Getenv("ADYEN_API_BASE"), base)
		secret = []string{env.Getenv("ADYEN_MERCHANT_ACCOUNT"), env.Getenv("ADYEN_API_KEY")}
	default:
		return ""
	}
	h := sha256.New()
	io.WriteString(h, "refundkit budget account\x00"+c.Provider)
	for _, s := range secret {
		fmt.Fprintf(h, "\x00%d:%s", len(s), s)
	}
	return fmt.Sprintf("%s %s %s %s", c.Provider, mode, strings.TrimRight(base, "/"), hex.EncodeToString(h.Sum(nil)[:12]))
}
