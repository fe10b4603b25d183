package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/refundkit/refundkit/refund/checkpoint/natsjs"
	"github.com/refundkit/refundkit/refund/checkpoint/postgres"
	"github.com/refundkit/refundkit/refund/provider/adyen/notes"
	"github.com/refundkit/refundkit/refund/provider/adyen/webhook"
	ppevents "github.com/refundkit/refundkit/refund/provider/paypal/events"
	"github.com/refundkit/refundkit/refund/provider/stripe"
)

// webhookCmd is the one receiver of every provider's events: a path per
// provider, each event kept durably before it is answered 2xx.
type webhookCmd struct {
	Listen      string `default:"127.0.0.1:8089" placeholder:"HOST:PORT" group:"server" help:"Address to listen on (default ${default}); port 0 picks a free port. Loopback only unless --public."`
	Public      bool   `group:"server" help:"Allow a --listen address that is not loopback. Serve plain HTTP behind a proxy that ends TLS: the providers' live webhooks need HTTPS."`
	AddrFile    string `name:"addr-file" placeholder:"FILE" group:"server" predictor:"file" help:"Once listening, write the base URL to FILE (atomically; into the pipe if FILE is a named pipe), so scripts wait for it instead of sleeping."`
	Adyen       string `placeholder:"FILE|URL" group:"output" predictor:"file" help:"Receive Adyen's notifications at /adyen/notifications (each item HMAC-signed under ADYEN_HMAC_KEY) and keep refund outcomes here: a file of JSON lines (created 0600, held by one receiver), the PostgreSQL checkpoint's database (table refundkit.adyen_notifications), or a bucket beside a NATS JetStream checkpoint (nats://HOST/NAME), shared by many receivers. refund and audit read it with --provider adyen --notifications."`
	AdyenOthers string `name:"adyen-others" placeholder:"FILE|URL" group:"output" predictor:"file" help:"Where Adyen's notifications of other events (not a refund's outcome) are kept, apart (default: --adyen's file with .jsonl replaced by .others.jsonl; for postgres://, table refundkit.adyen_other_notifications of the same database; for nats://, the adyen_others bucket)."`
	Stripe      string `placeholder:"FILE|URL" group:"output" predictor:"file" help:"Receive Stripe's events at /stripe/events (Stripe-Signature under STRIPE_WEBHOOK_SECRET) and keep them here: a file of JSON lines (created 0600, held by one receiver), the PostgreSQL checkpoint's database (table refundkit.stripe_events), or a bucket beside a NATS JetStream checkpoint (nats://HOST/NAME), shared by many receivers. refund reads it with --provider stripe --notifications: a pending refund its events settle costs no request."`
	PayPal      string `name:"paypal" placeholder:"FILE|URL" group:"output" predictor:"file" help:"Receive PayPal's webhook events at /paypal/events (signed for PAYPAL_WEBHOOK_ID with PayPal's certificate, checked offline) and keep them here: a file of JSON lines (created 0600, held by one receiver), the PostgreSQL checkpoint's database (table refundkit.paypal_events), or a bucket beside a NATS JetStream checkpoint (nats://HOST/NAME), shared by many receivers. refund reads it with --provider paypal --notifications."`
}

// webhookStats are the receiver's counters, one member per provider served.
type webhookStats struct {
	Adyen  *webhook.Stats          `json:"adyen,omitempty"`
	Stripe *stripe.ReceiverStats   `json:"stripe,omitempty"`
	PayPal *ppevents.ReceiverStats `json:"paypal,omitempty"`
}

// Webhook is webhook: it keeps each provider's verified events and answers
// 2xx once they are durable, until a signal; then its counters.
func Webhook(env Env) int {
	const name = "webhook"
	var c webhookCmd
	if code, done := parse(env, name, "Receive the providers' webhooks: Adyen's notifications (--adyen) and Stripe's events (--stripe), each verified as its provider signs it and answered 2xx only once kept durably.", &c); done {
		return code
	}
	stderr := newProgressWriter(env.Stderr) // serializes the requests' messages
	if err := c.check(); err != nil {
		return usage(stderr, name, err)
	}
	var secrets []string
	if c.Stripe != "" {
		var err error
		if secrets, err = stripeSecrets(env.Getenv, "--stripe needs STRIPE_WEBHOOK_SECRET in the environment: the endpoint's signing secret (whsec_...), or several separated by commas while one is rolled"); err != nil {
			return usage(stderr, name, err)
		}
	}
	var adyenCfg webhook.Config
	if c.Adyen != "" {
		a := adyenWebhookCmd{Listen: c.Listen, Public: c.Public, Out: c.Adyen, Others: c.AdyenOthers, Path: webhook.DefaultPath}
		var err error
		if adyenCfg, err = a.config(env); err != nil {
			return usage(stderr, name, err)
		}
		c.AdyenOthers = a.Others
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := func(format string, args ...any) { warnf(stderr, name, format, args...) }
	mux := http.NewServeMux()
	var serving []string
	var closers []func() int
	defer func() {
		for _, cl := range closers {
			cl()
		}
	}()
	var ady *adyenPart
	if c.Adyen != "" {
		a, code, ok := openAdyen(ctx, stderr, name, adyenCfg, c.Adyen, c.AdyenOthers, "--adyen", "--adyen-others")
		if !ok {
			return code
		}
		ady = a
		closers = append(closers, func() int { return a.close(stderr, name) })
		mux.Handle(webhook.DefaultPath, a.h)
		serving = append(serving, fmt.Sprintf("Adyen's notifications at %s (refund outcomes into %s, others into %s)", webhook.DefaultPath, redactStore(c.Adyen), redactStore(c.AdyenOthers)))
	}
	var str *stripe.Receiver
	if c.Stripe != "" {
		evs, err := openStripeEvents(c.Stripe, secrets, true, func(msg string) { warnf(stderr, name, "--stripe: %s", msg) })
		if err != nil {
			return failf(stderr, name, exitCodeFor(unwritable(err)), "--stripe: %v", err)
		}
		if f, ok := evs.(*stripe.EventsFile); ok && f.Torn() != nil {
			warnf(stderr, name, "%s", f.Torn())
		}
		closers = append(closers, closeOnce(stderr, name, "--stripe", evs))
		if str, err = stripe.NewReceiver(stripe.ReceiverConfig{Secrets: secrets, Events: evs, Logf: logf}); err != nil {
			return usage(stderr, name, err)
		}
		mux.Handle(stripe.EventsPath, str)
		serving = append(serving, fmt.Sprintf("Stripe's events at %s (into %s)", stripe.EventsPath, redactStore(c.Stripe)))
	}

	var pp *ppevents.Receiver
	if c.PayPal != "" {
		v, err := paypalVerifier(env.Getenv, false, "--paypal needs PAYPAL_WEBHOOK_ID in the environment: the id of the webhook (PayPal's Developer Dashboard), which each delivery is signed for")
		if err != nil {
			return usage(stderr, name, err)
		}
		evs, err := openPayPalEvents(c.PayPal, v, true, func(msg string) { warnf(stderr, name, "--paypal: %s", msg) })
		if err != nil {
			return failf(stderr, name, exitCodeFor(unwritable(err)), "--paypal: %v", err)
		}
		if f, ok := evs.(*ppevents.EventsFile); ok && f.Torn() != nil {
			warnf(stderr, name, "%s", f.Torn())
		}
		closers = append(closers, closeOnce(stderr, name, "--paypal", evs))
		if pp, err = ppevents.NewReceiver(ppevents.ReceiverConfig{Verifier: v, Events: evs, Logf: logf}); err != nil {
			return usage(stderr, name, err)
		}
		mux.Handle(ppevents.EventsPath, pp)
		serving = append(serving, fmt.Sprintf("PayPal's events at %s (into %s)", ppevents.EventsPath, redactStore(c.PayPal)))
	}

	code, served := serveWebhook(ctx, stderr, name, c.Listen, c.AddrFile, mux, func(url string) {
		warnf(stderr, name, "listening on %s: %s", url, strings.Join(serving, "; "))
	})
	if !served {
		return code
	}
	for _, cl := range closers {
		code = max(code, cl())
	}
	var st webhookStats
	var said []string
	if ady != nil {
		s := ady.h.Stats()
		st.Adyen = &s
		said = append(said, "Adyen: "+adyenStopped(s))
	}
	if str != nil {
		s := str.Stats()
		st.Stripe = &s
		said = append(said, "Stripe: "+stripeStopped(s))
	}
	if pp != nil {
		s := pp.Stats()
		st.PayPal = &s
		said = append(said, "PayPal: "+stripeStopped(s))
	}
	warnf(stderr, name, "stopped: %s", strings.Join(said, "; "))
	if err := json.NewEncoder(env.Stdout).Encode(st); err != nil {
		return failf(stderr, name, ExitFailed, "write the counters: %v", err)
	}
	if (st.Adyen != nil && st.Adyen.StoreErrors > 0) || (st.Stripe != nil && st.Stripe.StoreErrors > 0) || (st.PayPal != nil && st.PayPal.StoreErrors > 0) {
		// Those were answered 500 and the provider sends them again, but
		// a store that failed is for a person to look at.
		warnf(stderr, name, "a store failed to keep events (answered 500: the provider sends them again to a receiver that can keep them)")
		code = max(code, ExitJournal)
	}
	return code
}

// check refuses a receiver of nothing and two providers in one file.
func (c *webhookCmd) check() error {
	if c.Adyen == "" && c.Stripe == "" && c.PayPal == "" {
		return fmt.Errorf("nothing to receive: give --adyen FILE|URL (Adyen's notifications), --stripe FILE|URL (Stripe's events), --paypal FILE|URL (PayPal's events), or several")
	}
	if c.AdyenOthers != "" && c.Adyen == "" {
		return fmt.Errorf("--adyen-others is for --adyen")
	}
	if err := checkListen(c.Listen, c.Public); err != nil {
		return err
	}
	files := map[string]string{}
	for _, f := range [][2]string{{"--adyen", c.Adyen}, {"--adyen-others", c.AdyenOthers}, {"--stripe", c.Stripe}, {"--paypal", c.PayPal}} {
		if f[1] == "" || isStoreURL(f[1]) {
			continue
		}
		p := filepath.Clean(f[1])
		if other, dup := files[p]; dup {
			return fmt.Errorf("%s %s is %s: each is kept in its own file", f[0], f[1], other)
		}
		files[p] = f[0]
	}
	if c.Adyen != "" && c.AdyenOthers == "" && !isStoreURL(c.Adyen) {
		if other, dup := files[filepath.Clean(defaultOthers(c.Adyen))]; dup {
			return fmt.Errorf("%s %s is where --adyen keeps Adyen's other events: name another file", other, defaultOthers(c.Adyen))
		}
	}
	return nil
}

// closeOnce closes c the first time it is called: ExitJournal if that
// fails, said with flag.
func closeOnce(stderr io.Writer, name, flag string, c io.Closer) func() int {
	closed := false
	return func() int {
		if closed {
			return ExitOK
		}
		closed = true
		if err := c.Close(); err != nil {
			warnf(stderr, name, "%s: %v", flag, err)
			return ExitJournal
		}
		return ExitOK
	}
}

// stripeStopped is what Stripe's (or PayPal's) part of the receiver did.
func stripeStopped(st stripe.ReceiverStats) string {
	return fmt.Sprintf("%d requests accepted, %d events kept, %d duplicates, %d requests refused, %d store errors",
		st.Accepted, st.Added, st.Duplicates, refused(st.Rejected), st.StoreErrors)
}

// refused is the requests refused for every reason.
func refused(rejected map[string]int64) (n int64) {
	for _, r := range rejected {
		n += r
	}
	return n
}

type adyenWebhookCmd struct {
	Listen   string `default:"127.0.0.1:8089" placeholder:"HOST:PORT" group:"server" help:"Address to listen on (default ${default}); port 0 picks a free port. Loopback only unless --public."`
	Public   bool   `group:"server" help:"Allow a --listen address that is not loopback. Serve plain HTTP behind a proxy that ends TLS: Adyen's live webhooks need HTTPS."`
	Out      string `required:"" placeholder:"FILE|URL" group:"output" predictor:"file" help:"Where accepted refund notifications are kept: a file of JSON lines (created 0600, held by one receiver), the PostgreSQL checkpoint's database (table refundkit.adyen_notifications), or a bucket beside a NATS JetStream checkpoint (nats://HOST/NAME), shared by many receivers."`
	Others   string `placeholder:"FILE|URL" group:"output" predictor:"file" help:"Where notifications of other events (not a refund's outcome) are kept, apart (default: --out's file with .jsonl replaced by .others.jsonl; for postgres://, table refundkit.adyen_other_notifications of the same database; for nats://, the adyen_others bucket)."`
	Path     string `default:"/adyen/notifications" placeholder:"PATH" group:"server" help:"The one path served (default ${default}): the webhook's URL in Adyen's Customer Area ends with it."`
	AddrFile string `name:"addr-file" placeholder:"FILE" group:"server" predictor:"file" help:"Once listening, write the base URL to FILE (atomically; into the pipe if FILE is a named pipe), so scripts wait for it instead of sleeping."`
}

// Environment variables of adyen-webhook.
const (
	envHMACKey         = "ADYEN_HMAC_KEY"
	envMerchantAccount = "ADYEN_MERCHANT_ACCOUNT"
	envWebhookUser     = "ADYEN_WEBHOOK_USERNAME"
	envWebhookPassword = "ADYEN_WEBHOOK_PASSWORD"
)

// AdyenWebhook is adyen-webhook: it keeps Adyen's verified notifications
// and answers [accepted] once durable, until a signal; then its counters.
func AdyenWebhook(env Env) int {
	const name = "adyen-webhook"
	var c adyenWebhookCmd
	if code, done := parse(env, name, "Receive Adyen's notifications (webhooks): verify each item's HMAC signature, keep refund outcomes in --out and other events in --others, and answer [accepted] once they are durable.", &c); done {
		return code
	}
	stderr := newProgressWriter(env.Stderr) // serializes the requests' messages
	cfg, err := c.config(env)
	if err != nil {
		return usage(stderr, name, err)
	}

	// Caught before the URL is published: a script's stop exits cleanly.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	a, code, ok := openAdyen(ctx, stderr, name, cfg, c.Out, c.Others, "--out", "--others")
	if !ok {
		return code
	}
	defer a.close(stderr, name)
	code, served := serveWebhook(ctx, stderr, name, c.Listen, c.AddrFile, a.h, func(url string) {
		warnf(stderr, name, "listening on %s%s, keeping refund notifications in %s and others in %s", url, cfg.Path, redactStore(c.Out), redactStore(c.Others))
		warnf(stderr, name, "note: webhook --adyen FILE receives Adyen's notifications as this does, beside Stripe's events (--stripe); adyen-webhook stays for this release and then goes")
	})
	if !served {
		return code
	}
	code = max(code, a.close(stderr, name))
	st := a.h.Stats()
	warnf(stderr, name, "stopped: %s", adyenStopped(st))
	if err := json.NewEncoder(env.Stdout).Encode(st); err != nil {
		return failf(stderr, name, ExitFailed, "write the counters: %v", err)
	}
	return code
}

// adyenPart is Adyen's part of a receiver: its handler over its stores.
type adyenPart struct {
	h      *webhook.Handler
	stores []notes.Store
	closed bool
}

// openAdyen opens the stores out and others (named in messages by their
// flags) and the handler over them; code is the exit code when !ok.
func openAdyen(ctx context.Context, stderr io.Writer, name string, cfg webhook.Config, out, others, outFlag, othersFlag string) (a *adyenPart, code int, ok bool) {
	refunds, err := openNotes(ctx, stderr, name, out, cfg.Keys, false)
	if err != nil {
		return nil, failf(stderr, name, exitCodeFor(unwritable(err)), "%s: %v", outFlag, err), false
	}
	rest, err := openNotes(ctx, stderr, name, others, cfg.Keys, true)
	if err != nil {
		refunds.Close()
		return nil, failf(stderr, name, exitCodeFor(unwritable(err)), "%s: %v", othersFlag, err), false
	}
	a = &adyenPart{stores: []notes.Store{refunds, rest}}
	cfg.Refunds, cfg.Others = refunds, rest
	cfg.Logf = func(format string, args ...any) { warnf(stderr, name, format, args...) }
	if a.h, err = webhook.New(cfg); err != nil {
		a.close(io.Discard, name)
		return nil, usage(stderr, name, err), false
	}
	return a, ExitOK, true
}

// close closes the stores once: ExitJournal if one fails to.
func (a *adyenPart) close(stderr io.Writer, name string) int {
	if a.closed {
		return ExitOK
	}
	a.closed = true
	code := ExitOK
	for _, s := range a.stores {
		if err := s.Close(); err != nil {
			warnf(stderr, name, "%v", err)
			code = ExitJournal
		}
	}
	return code
}

// adyenStopped is what the Adyen receiver did, for its last message.
func adyenStopped(st webhook.Stats) string {
	return fmt.Sprintf("%d requests accepted, %d refund notifications kept, %d duplicates, %d others kept, %d requests refused, %d store errors",
		st.Accepted, st.Added, st.Duplicates, st.Others, refused(st.Rejected), st.StoreErrors)
}

// serveWebhook serves h on listen until ctx ends (a signal), publishing
// its URL to addrFile; listening says where it listens. Requests under
// way finish first. served is false when it never listened.
func serveWebhook(ctx context.Context, stderr io.Writer, name, listen, addrFile string, h http.Handler, listening func(url string)) (code int, served bool) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fail(stderr, name, withCode(ExitFailed, err)), false
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      time.Minute,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          log.New(stderr, name+": ", 0),
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	url := "http://" + ln.Addr().String()
	if addrFile != "" {
		if err := publishURL(ctx, addrFile, url); err != nil {
			warnf(stderr, name, "--addr-file: %v", err)
			srv.Close()
			return ExitFailed, false
		}
	}
	listening(url)
	code = ExitOK
	select {
	case <-ctx.Done():
	case err := <-done:
		warnf(stderr, name, "serve: %v", err)
		code = ExitFailed
	}
	// Requests under way finish; after 10s they are cut, and the provider retries.
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		srv.Close()
	}
	return code, true
}

// config is the handler's configuration (stores aside); the key never printed.
func (c *adyenWebhookCmd) config(env Env) (webhook.Config, error) {
	keys, err := hmacKeys(env.Getenv, envHMACKey+" is not set: the HMAC key of the webhook in Adyen's Customer Area (hex), from the environment only")
	if err != nil {
		return webhook.Config{}, err
	}
	cfg := webhook.Config{
		Keys:            keys,
		Path:            c.Path,
		MerchantAccount: env.Getenv(envMerchantAccount),
		Username:        env.Getenv(envWebhookUser),
		Password:        env.Getenv(envWebhookPassword),
	}
	if (cfg.Username == "") != (cfg.Password == "") {
		return webhook.Config{}, fmt.Errorf("basic auth needs both %s and %s, or neither", envWebhookUser, envWebhookPassword)
	}
	if !strings.HasPrefix(c.Path, "/") || strings.ContainsAny(c.Path, " ?#") {
		return webhook.Config{}, fmt.Errorf("--path %q: want an absolute path such as %s", c.Path, webhook.DefaultPath)
	}
	if err := checkListen(c.Listen, c.Public); err != nil {
		return webhook.Config{}, err
	}
	if c.Others == "" {
		c.Others = defaultOthers(c.Out)
	}
	if !isStoreURL(c.Out) && !isStoreURL(c.Others) && filepath.Clean(c.Out) == filepath.Clean(c.Others) {
		return webhook.Config{}, fmt.Errorf("--others %s is --out: other events are kept apart", c.Others)
	}
	return cfg, nil
}

// defaultOthers: notes.others.jsonl beside notes.jsonl; a database's or
// a NATS server's own.
func defaultOthers(out string) string {
	if isStoreURL(out) {
		return out
	}
	return strings.TrimSuffix(out, ".jsonl") + ".others.jsonl"
}

// checkListen refuses an address off loopback unless public.
func checkListen(addr string, public bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--listen %q: %v", addr, err)
	}
	if public || isLoopback(host) {
		return nil
	}
	return fmt.Errorf("--listen %s is not a loopback address: add --public to listen on it (behind a proxy that ends TLS; Adyen's live webhooks need HTTPS)", addr)
}

// openNotes opens a file held for writing, or a table in PostgreSQL.
func openNotes(ctx context.Context, stderr io.Writer, name, spec string, keys [][]byte, others bool) (notes.Store, error) {
	if natsjs.IsURL(spec) {
		bucket := "adyen"
		if others {
			bucket = "adyen_others"
		}
		kv, done, err := openEventsBucket(spec, bucket, true, func(msg string) { warnf(stderr, name, "%s", msg) })
		if err != nil {
			return nil, err
		}
		return notes.OpenNATS(kv, keys, done)
	}
	if postgres.IsURL(spec) {
		if others {
			return notes.OpenPGOthers(ctx, spec, keys)
		}
		return notes.OpenPG(ctx, spec, keys)
	}
	f, err := notes.OpenFile(spec, keys, true)
	if err != nil {
		return nil, err
	}
	if t := f.Torn(); t != nil {
		warnf(stderr, name, "%s", t)
	}
	return f, nil
}

// redactStore names a store in messages: a URL without its password.
func redactStore(spec string) string {
	if postgres.IsURL(spec) {
		return postgres.Redact(spec)
	}
	if natsjs.IsURL(spec) {
		return natsjs.Redact(spec)
	}
	return spec
}
