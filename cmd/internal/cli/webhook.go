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

	"github.com/refundkit/refundkit/refund/checkpoint/postgres"
	"github.com/refundkit/refundkit/refund/provider/adyen/notes"
	"github.com/refundkit/refundkit/refund/provider/adyen/webhook"
)

type adyenWebhookCmd struct {
	Listen   string `default:"127.0.0.1:8089" placeholder:"HOST:PORT" group:"server" help:"Address to listen on (default ${default}); port 0 picks a free port. Loopback only unless --public."`
	Public   bool   `group:"server" help:"Allow a --listen address that is not loopback. Serve plain HTTP behind a proxy that ends TLS: Adyen's live webhooks need HTTPS."`
	Out      string `required:"" placeholder:"FILE|postgres://..." group:"output" predictor:"file" help:"Where accepted refund notifications are kept: a file of JSON lines (created 0600, held by one receiver), or the PostgreSQL checkpoint's database (table refundkit.adyen_notifications, shared by many receivers)."`
	Others   string `placeholder:"FILE|postgres://..." group:"output" predictor:"file" help:"Where notifications of other events (not a refund's outcome) are kept, apart (default: --out's file with .jsonl replaced by .others.jsonl; for postgres://, table refundkit.adyen_other_notifications of the same database)."`
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
	rejected := int64(0)
	for _, n := range st.Rejected {
		rejected += n
	}
	return fmt.Sprintf("%d requests accepted, %d refund notifications kept, %d duplicates, %d others kept, %d requests refused, %d store errors",
		st.Accepted, st.Added, st.Duplicates, st.Others, rejected, st.StoreErrors)
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
	if !postgres.IsURL(c.Out) && !postgres.IsURL(c.Others) && filepath.Clean(c.Out) == filepath.Clean(c.Others) {
		return webhook.Config{}, fmt.Errorf("--others %s is --out: other events are kept apart", c.Others)
	}
	return cfg, nil
}

// defaultOthers: notes.others.jsonl beside notes.jsonl; a database's own.
func defaultOthers(out string) string {
	if postgres.IsURL(out) {
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
	return spec
}
