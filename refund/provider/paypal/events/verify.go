// Package events reads PayPal's webhook events about refunds: verified
// offline, by PayPal's documented method (the CRC32 of the body and the
// delivery signed with the certificate at PAYPAL-CERT-URL), and read into
// the refund they tell of through the provider's own mapping.
//
// Why offline and not PayPal's verify-webhook-signature call: no network
// round trip per event and no OAuth token on the receiver's hot path; an
// event kept with its five headers can be verified again later from what
// was kept (Reverify); and the call would add one request per event to the
// account's request budget, which the refunds themselves spend.
//
// What an event says is matched to an item only by the refund's id and
// custom_id, and checked against the journal's binding by the engine,
// never trusted alone.
package events

import (
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/refundkit/refundkit/refund/provider/paypal/wire"
)

// Headers are the five signed values of one delivery, to keep with its body.
type Headers = wire.Headers

// Tolerance is how far a delivery's transmission time may be from the
// receiver's clock (Stripe's default): an older one is a replay.
const Tolerance = 300 * time.Second

// DefaultHosts are the hosts PayPal serves its certificates from.
var DefaultHosts = []string{"api.paypal.com", "api.sandbox.paypal.com", "*.paypal.com"}

// DefaultNames are the names a signing certificate must carry (its CN or a
// DNS name): PayPal's. A public CA issues those to PayPal alone.
var DefaultNames = []string{"paypal.com", "*.paypal.com"}

// Why a delivery is refused. Only ErrCertFetch may pass on a retry (answer
// it 5xx so that PayPal sends the event again); the others never will.
var (
	ErrHeaders   = errors.New("paypal webhook: a signature header is missing or unreadable")
	ErrAlgo      = errors.New("paypal webhook: signature algorithm not " + wire.AuthAlgo)
	ErrTime      = errors.New("paypal webhook: transmission time outside the tolerance")
	ErrCertURL   = errors.New("paypal webhook: certificate URL is not PayPal's")
	ErrCertFetch = errors.New("paypal webhook: certificate could not be fetched")
	ErrCert      = errors.New("paypal webhook: certificate refused")
	ErrSignature = errors.New("paypal webhook: signature does not verify")
)

// Verifier checks PayPal's webhook deliveries to one webhook. Its zero
// value but WebhookID uses the defaults; it must not be copied once used.
type Verifier struct {
	WebhookID string         // PayPal's id of the receiving webhook (the cli reads PAYPAL_WEBHOOK_ID)
	Roots     *x509.CertPool // nil: the system's
	Hosts     []string       // cert URL hosts: exact, or "*.d" for d's subdomains; nil: DefaultHosts
	Names     []string       // the leaf's names, as Hosts; nil: DefaultNames
	Client    *http.Client   // fetches certificates; nil: one with a 10 s timeout
	Now       func() time.Time
	Tolerance time.Duration // 0: Tolerance

	certs certCache
}

// Verify checks a delivery as it arrives: signed for v.WebhookID by a
// PayPal certificate valid now, sent within the tolerance.
func (v *Verifier) Verify(ctx context.Context, h http.Header, body []byte) error {
	hs := wire.HeadersOf(h)
	at, err := readHeaders(hs)
	if err != nil {
		return err
	}
	now := v.now()
	tol := v.Tolerance
	if tol <= 0 {
		tol = Tolerance
	}
	if d := now.Sub(at); d > tol || d < -tol {
		return fmt.Errorf("%w: sent %s, received %s", ErrTime, hs.TransmissionTime, now.UTC().Format(time.RFC3339))
	}
	return v.verify(ctx, hs, body, now)
}

// Reverify checks a delivery kept long ago: its signature, by a PayPal
// certificate that was valid when it was sent. Its age is no fault.
func (v *Verifier) Reverify(ctx context.Context, h Headers, body []byte) error {
	at, err := readHeaders(h)
	if err != nil {
		return err
	}
	return v.verify(ctx, h, body, at)
}

// readHeaders checks that all five values are there and returns the time.
func readHeaders(h Headers) (time.Time, error) {
	for _, f := range [][2]string{{wire.TransmissionIDHeader, h.TransmissionID}, {wire.TransmissionTimeHeader, h.TransmissionTime},
		{wire.TransmissionSigHeader, h.TransmissionSig}, {wire.CertURLHeader, h.CertURL}, {wire.AuthAlgoHeader, h.AuthAlgo}} {
		if f[1] == "" {
			return time.Time{}, fmt.Errorf("%w: no %s", ErrHeaders, f[0])
		}
	}
	if h.AuthAlgo != wire.AuthAlgo {
		return time.Time{}, fmt.Errorf("%w: %q", ErrAlgo, h.AuthAlgo)
	}
	at, err := time.Parse(time.RFC3339, h.TransmissionTime)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: %s %q", ErrHeaders, wire.TransmissionTimeHeader, h.TransmissionTime)
	}
	return at, nil
}

// verify checks the signature under the certificate at h.CertURL, its
// chain as of at. Errors name no webhook id and no signature.
func (v *Verifier) verify(ctx context.Context, h Headers, body []byte, at time.Time) error {
	if v.WebhookID == "" {
		return errors.New("paypal webhook: no webhook id to verify for")
	}
	sig, err := base64.StdEncoding.DecodeString(h.TransmissionSig)
	if err != nil || len(sig) == 0 {
		return fmt.Errorf("%w: %s is not base64", ErrHeaders, wire.TransmissionSigHeader)
	}
	u, err := v.certURL(h.CertURL)
	if err != nil {
		return err
	}
	chain, err := v.certs.get(ctx, u, v.fetch)
	if err != nil {
		return err
	}
	leaf := chain[0]
	mid := x509.NewCertPool()
	for _, c := range chain[1:] {
		mid.AddCert(c)
	}
	// Any usage: PayPal's signing certificate is no TLS server's.
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: v.Roots, Intermediates: mid, CurrentTime: at,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrCert, u, err)
	}
	if !v.named(leaf) {
		return fmt.Errorf("%w: %s: issued to %q, not PayPal", ErrCert, u, leaf.Subject.CommonName)
	}
	key, ok := leaf.PublicKey.(*rsa.PublicKey)
	if !ok {
		return fmt.Errorf("%w: %s: no RSA key", ErrCert, u)
	}
	sum := sha256.Sum256(wire.Message(h.TransmissionID, h.TransmissionTime, v.WebhookID, body))
	if err := rsa.VerifyPKCS1v15(key, crypto.SHA256, sum[:], sig); err != nil {
		return fmt.Errorf("%w: transmission %s", ErrSignature, h.TransmissionID)
	}
	return nil
}

// certURL is raw if it is an https URL of an allowed host under
// wire.CertPath, checked before anything is fetched: the header is the
// sender's to choose.
func (v *Verifier) certURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.User != nil || u.RawQuery != "" || u.Fragment != "" ||
		!strings.HasPrefix(u.EscapedPath(), wire.CertPath) || len(u.EscapedPath()) == len(wire.CertPath) {
		return "", fmt.Errorf("%w: %q", ErrCertURL, raw)
	}
	if !match(orDefault(v.Hosts, DefaultHosts), u.Hostname()) {
		return "", fmt.Errorf("%w: host %q", ErrCertURL, u.Hostname())
	}
	return u.String(), nil
}

// named reports whether leaf is issued to one of v's names.
func (v *Verifier) named(leaf *x509.Certificate) bool {
	names := orDefault(v.Names, DefaultNames)
	if match(names, leaf.Subject.CommonName) {
		return true
	}
	for _, n := range leaf.DNSNames {
		if match(names, n) {
			return true
		}
	}
	return false
}

// match reports whether name is one of patterns: exact, or "*.d" for any
// name ending in ".d" (never d itself).
func match(patterns []string, name string) bool {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if name == "" {
		return false
	}
	for _, p := range patterns {
		p = strings.ToLower(p)
		if d, ok := strings.CutPrefix(p, "*."); ok {
			if strings.HasSuffix(name, "."+d) {
				return true
			}
		} else if name == p {
			return true
		}
	}
	return false
}

func orDefault(s, d []string) []string {
	if s == nil {
		return d
	}
	return s
}

func (v *Verifier) now() time.Time {
	if v.Now != nil {
		return v.Now()
	}
	return time.Now()
}

// maxCert bounds a certificate answer: PayPal's chain is a few KiB.
const maxCert = 64 << 10

var defaultClient = &http.Client{Timeout: 10 * time.Second}

// fetch reads the PEM chain at u, the leaf first. It follows no redirect:
// the host was allowed, wherever it points was not.
func (v *Verifier) fetch(ctx context.Context, u string) ([]*x509.Certificate, error) {
	c := *defaultClient
	if v.Client != nil {
		c = *v.Client
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCertURL, u, err)
	}
	res, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCertFetch, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, maxCert+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: %s: %v", ErrCertFetch, u, err)
	case res.StatusCode >= 500 || res.StatusCode == http.StatusTooManyRequests:
		return nil, fmt.Errorf("%w: %s: HTTP %d", ErrCertFetch, u, res.StatusCode)
	case res.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%w: %s: HTTP %d", ErrCert, u, res.StatusCode)
	case len(data) > maxCert:
		return nil, fmt.Errorf("%w: %s: over %d bytes", ErrCert, u, maxCert)
	}
	var chain []*x509.Certificate
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrCert, u, err)
		}
		chain = append(chain, c)
	}
	if len(chain) == 0 {
		return nil, fmt.Errorf("%w: %s: no PEM certificate", ErrCert, u)
	}
	return chain, nil
}

// maxCached bounds the cache: PayPal signs with one certificate at a time,
// a few while it rolls them; more are a sender trying URLs.
const maxCached = 32

// certCache holds fetched chains by URL, fetching each once however many
// deliveries ask at the same time. Only a fetched and parsed chain is
// kept: its validity is checked on every use, at that use's time.
type certCache struct {
	mu       sync.Mutex
	chains   map[string][]*x509.Certificate
	order    []string // oldest first: the one dropped when full
	inflight map[string]*fetching
}

type fetching struct {
	done  chan struct{}
	chain []*x509.Certificate
	err   error
}

func (c *certCache) get(ctx context.Context, u string, fetch func(context.Context, string) ([]*x509.Certificate, error)) ([]*x509.Certificate, error) {
	c.mu.Lock()
	if chain, ok := c.chains[u]; ok {
		c.mu.Unlock()
		return chain, nil
	}
	if f, ok := c.inflight[u]; ok {
		c.mu.Unlock()
		select {
		case <-f.done:
			return f.chain, f.err
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %v", ErrCertFetch, ctx.Err())
		}
	}
	f := &fetching{done: make(chan struct{})}
	if c.inflight == nil {
		c.inflight, c.chains = map[string]*fetching{}, map[string][]*x509.Certificate{}
	}
	c.inflight[u] = f
	c.mu.Unlock()

	f.chain, f.err = fetch(ctx, u)
	c.mu.Lock()
	delete(c.inflight, u)
	if f.err == nil {
		if len(c.order) >= maxCached {
			delete(c.chains, c.order[0])
			c.order = c.order[1:]
		}
		c.chains[u], c.order = f.chain, append(c.order, u)
	}
	c.mu.Unlock()
	close(f.done)
	return f.chain, f.err
}
