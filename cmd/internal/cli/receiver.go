package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/refundkit/refundkit/refund/checkpoint/postgres"
	"github.com/refundkit/refundkit/refund/provider/adyen/webhook"
	"github.com/refundkit/refundkit/refund/provider/stripe"
)

// webhookCmd is the one receiver of every provider's events: a path per
// provider, each event kept durably before it is answered 2xx.
type webhookCmd struct {
	Listen      string `default:"127.0.0.1:8089" placeholder:"HOST:PORT" group:"server" help:"Address to listen on (default ${default}); port 0 picks a free port. Loopback only unless --public."`
	Public      bool   `group:"server" help:"Allow a --listen address that is not loopback. Serve plain HTTP behind a proxy that ends TLS: the providers' live webhooks need HTTPS."`
	AddrFile    string `name:"addr-file" placeholder:"FILE" group:"server" predictor:"file" help:"Once listening, write the base URL to FILE (atomically; into the pipe if FILE is a named pipe), so scripts wait for it instead of sleeping."`
	Adyen       string `placeholder:"FILE|postgres://..." group:"output" predictor:"file" help:"Receive Adyen's notifications at /adyen/notifications (each item HMAC-signed under ADYEN_HMAC_KEY) and keep refund outcomes here: a file of JSON lines (created 0600, held by one receiver), or the PostgreSQL checkpoint's database (table refundkit.adyen_notifications, shared by many receivers). refund and audit read it with --provider adyen --notifications."`
	AdyenOthers string `name:"adyen-others" placeholder:"FILE|postgres://..." group:"output" predictor:"file" help:"Where Adyen's notifications of other events (not a refund's outcome) are kept, apart (default: --adyen's file with .jsonl replaced by .others.jsonl; for postgres://, table refundkit.adyen_other_notifications of the same database)."`
	Stripe      string `placeholder:"FILE" group:"output" predictor:"file" help:"Receive Stripe's events at /stripe/events (Stripe-Signature under STRIPE_WEBHOOK_SECRET) and keep them here: a file of JSON lines (created 0600, held by one receiver). refund reads it with --provider stripe --notifications: a pending refund its events settle costs no request."`
}

// webhookStats are the receiver's counters, one member per provider served.
type webhookStats struct {
	Adyen  *webhook.Stats        `json:"adyen,omitempty"`
	Stripe *stripe.ReceiverStats `json:"stripe,omitempty"`
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
		evs, err := stripe.OpenEvents(c.Stripe, secrets, true)
		if err != nil {
			return failf(stderr, name, exitCodeFor(unwritable(err)), "--stripe: %v", err)
		}
		if t := evs.Torn(); t != nil {
			warnf(stderr, name, "%s", t)
		}
		closed := false
		closers = append(closers, func() int {
			if closed {
				return ExitOK
			}
			closed = true
			if err := evs.Close(); err != nil {
				warnf(stderr, name, "--stripe: %v", err)
				return ExitJournal
			}
			return ExitOK
		})
		if str, err = stripe.NewReceiver(stripe.ReceiverConfig{Secrets: secrets, Events: evs, Logf: logf}); err != nil {
			return usage(stderr, name, err)
		}
		mux.Handle(stripe.EventsPath, str)
		serving = append(serving, fmt.Sprintf("Stripe's events at %s (into %s)", stripe.EventsPath, c.Stripe))
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
	warnf(stderr, name, "stopped: %s", strings.Join(said, "; "))
	if err := json.NewEncoder(env.Stdout).Encode(st); err != nil {
		return failf(stderr, name, ExitFailed, "write the counters: %v", err)
	}
	return code
}

// check refuses a receiver of nothing and two providers in one file.
func (c *webhookCmd) check() error {
	if c.Adyen == "" && c.Stripe == "" {
		return fmt.Errorf("nothing to receive: give --adyen FILE|postgres://... (Adyen's notifications), --stripe FILE (Stripe's events), or both")
	}
	if c.AdyenOthers != "" && c.Adyen == "" {
		return fmt.Errorf("--adyen-others is for --adyen")
	}
	if err := checkListen(c.Listen, c.Public); err != nil {
		return err
	}
	files := map[string]string{}
	for _, f := range [][2]string{{"--adyen", c.Adyen}, {"--adyen-others", c.AdyenOthers}, {"--stripe", c.Stripe}} {
		if f[1] == "" || postgres.IsURL(f[1]) {
			continue
		}
		p := filepath.Clean(f[1])
		if other, dup := files[p]; dup {
			return fmt.Errorf("%s %s is %s: each is kept in its own file", f[0], f[1], other)
		}
		files[p] = f[0]
	}
	if c.Adyen != "" && c.AdyenOthers == "" && !postgres.IsURL(c.Adyen) {
		if other, dup := files[filepath.Clean(defaultOthers(c.Adyen))]; dup {
			return fmt.Errorf("%s %s is where --adyen keeps Adyen's other events: name another file", other, defaultOthers(c.Adyen))
		}
	}
	if postgres.IsURL(c.Stripe) {
		return fmt.Errorf("--stripe %s: Stripe's events are kept in a file (JSON lines); a PostgreSQL store of them is not built yet", postgres.Redact(c.Stripe))
	}
	return nil
}

// stripeStopped is what Stripe's part of the receiver did.
func stripeStopped(st stripe.ReceiverStats) string {
	rejected := int64(0)
	for _, n := range st.Rejected {
		rejected += n
	}
	return fmt.Sprintf("%d requests accepted, %d events kept, %d duplicates, %d requests refused, %d store errors",
		st.Accepted, st.Added, st.Duplicates, rejected, st.StoreErrors)
}
