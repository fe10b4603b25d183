package events

// PayPal's side of the one receiver (cmd webhook): each delivery verified
// offline (Verifier) and kept with its five headers before it is answered
// 2xx, which is what ends PayPal's retries. The receiving itself is
// refund/provider/events' Receiver.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"time"

	store "github.com/refundkit/refundkit/refund/provider/events"
	"github.com/refundkit/refundkit/refund/provider/paypal/wire"
)

// EventsPath is the path PayPal's events are served at by default.
const EventsPath = "/paypal/events"

// Reasons a delivery is refused, as ReceiverStats names them.
const (
	RefusedSignature  = "signature"             // 401: a header missing, another algorithm, too old or new (a replay), a certificate not PayPal's, or no signature that verifies
	RefusedCertFetch  = "cert_unavailable"      // 503: the certificate could not be fetched; PayPal retries
	RefusedTooLarge   = store.RefusedTooLarge   // 413
	RefusedBadRequest = store.RefusedBadRequest // 400: signed, but not an event refundkit reads
	RefusedMethod     = store.RefusedMethod     // 405
)

// ReceiverConfig configures a Receiver.
type ReceiverConfig struct {
	Verifier     *Verifier     // its WebhookID is the receiving webhook's (PAYPAL_WEBHOOK_ID)
	Events       EventStore    // a file opened for writing, or a table, under the same verifier
	MaxBody      int64         // default 1 MiB
	StoreTimeout time.Duration // bounds an Add (default 30 s)
	Now          func() time.Time
	Logf         func(format string, args ...any)
}

// ReceiverStats are a Receiver's counters (Rejected by the reasons above).
type ReceiverStats = store.ReceiverStats

// Receiver serves POSTs of PayPal's events. It is safe for concurrent use.
type Receiver = store.Receiver[Kept]

// NewReceiver checks cfg and fills in its defaults.
func NewReceiver(cfg ReceiverConfig) (*Receiver, error) {
	if cfg.Verifier == nil || cfg.Verifier.WebhookID == "" {
		return nil, errors.New("no webhook id to verify PayPal's events for")
	}
	if cfg.Events == nil {
		return nil, errors.New("no events file")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return store.NewReceiver(store.ReceiverConfig[Kept]{
		Provider: "PayPal",
		Noun:     "event",
		Reasons:  []string{RefusedSignature, RefusedCertFetch},
		Verify: func(ctx context.Context, h http.Header, body []byte) error {
			return refusal(cfg.Verifier.Verify(ctx, h, body))
		},
		Read: func(h http.Header, body []byte) (Kept, string, error) {
			ev, err := ReadEvent(body)
			if err != nil {
				return Kept{}, "", err
			}
			k := Kept{V: KeptVersion, Received: cfg.Now().UTC(), Headers: wire.HeadersOf(h), Payload: string(body)}
			return k, store.EventName(ev.ID, ev.Type), nil
		},
		Keep:         cfg.Events.Add,
		MaxBody:      cfg.MaxBody,
		StoreTimeout: cfg.StoreTimeout,
		Logf:         cfg.Logf,
	})
}

// refusal is how a verification error is answered: 503 for a certificate
// that could not be fetched (a retry may pass), 401 for any other of the
// Verifier's; an error of none of them (no webhook id) is a 500.
func refusal(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrCertFetch):
		return store.Refuse(http.StatusServiceUnavailable, RefusedCertFetch, err.Error())
	case errors.Is(err, ErrHeaders), errors.Is(err, ErrAlgo), errors.Is(err, ErrTime),
		errors.Is(err, ErrCertURL), errors.Is(err, ErrCert), errors.Is(err, ErrSignature):
		return store.Refuse(http.StatusUnauthorized, RefusedSignature, err.Error())
	}
	return err
}

// PrivateVerifier is a Verifier for webhookID that trusts rootPEM alone,
// both for the signing chain and for the HTTPS of the certificate host,
// and takes cert URLs of hosts only (the simulator's: its root PEM and
// 127.0.0.1). PayPal's own deliveries need the zero Verifier's defaults.
func PrivateVerifier(webhookID string, rootPEM []byte, hosts ...string) (*Verifier, error) {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(rootPEM) {
		return nil, errors.New("paypal webhook: no PEM certificate in the root given")
	}
	if len(hosts) == 0 {
		return nil, errors.New("paypal webhook: no certificate host to allow")
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	return &Verifier{WebhookID: webhookID, Roots: roots, Hosts: hosts,
		Client: &http.Client{Transport: transport, Timeout: 10 * time.Second}}, nil
}
