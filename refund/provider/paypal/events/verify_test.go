package events

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund/provider/paypal/wire"
)

const webhookID = "WH-ID-7XK2"

// rig is a PayPal cert host on loopback TLS, counting what it serves.
type rig struct {
	srv     *httptest.Server
	fetches atomic.Int64
	mu      sync.Mutex
	chains  map[string][]byte // by cert id; "" for any other id
	fail    atomic.Bool       // answer 500
	slow    time.Duration
}

func newRig(t *testing.T, chain []byte) *rig {
	r := &rig{chains: map[string][]byte{"": chain}}
	r.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.fetches.Add(1)
		time.Sleep(r.slow)
		id, ok := strings.CutPrefix(req.URL.Path, wire.CertPath)
		switch {
		case !ok:
			http.NotFound(w, req)
		case r.fail.Load():
			http.Error(w, "down", http.StatusInternalServerError)
		case id == "REDIRECT":
			http.Redirect(w, req, wire.CertPath+"CERT-1", http.StatusFound)
		default:
			r.mu.Lock()
			c, ok := r.chains[id]
			if !ok {
				c = r.chains[""]
			}
			r.mu.Unlock()
			_, _ = w.Write(c)
		}
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *rig) url(id string) string { return r.srv.URL + wire.CertPath + id }

func (r *rig) serve(id string, chain []byte) {
	r.mu.Lock()
	r.chains[id] = chain
	r.mu.Unlock()
}

func mustCerts(t *testing.T, from, until time.Time, names ...string) *wire.Certs {
	t.Helper()
	c, err := wire.NewCerts(from, until, names...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var now = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

func setup(t *testing.T) (*rig, *wire.Certs, *Verifier) {
	c := mustCerts(t, now.Add(-time.Hour), now.Add(24*time.Hour))
	r := newRig(t, c.ChainPEM)
	return r, c, r.verifier(c)
}

func (r *rig) verifier(c *wire.Certs) *Verifier {
	return &Verifier{WebhookID: webhookID, Roots: c.Roots, Hosts: []string{"127.0.0.1"}, Client: r.srv.Client(),
		Now: func() time.Time { return now }}
}

func header(h Headers) http.Header {
	out := http.Header{}
	h.Set(out)
	return out
}

var body = []byte(`{"id":"WH-1","event_type":"PAYMENT.CAPTURE.REFUNDED"}`)

func TestVerify(t *testing.T) {
	r, c, v := setup(t)
	s := &wire.Signer{Key: c.Key, CertURL: r.url("CERT-1")}
	good := s.Sign(body, webhookID, "T-1", now.Add(-time.Minute))
	other := mustCerts(t, now.Add(-time.Hour), now.Add(24*time.Hour)) // its own root, not trusted
	r.serve("CERT-OTHER", other.ChainPEM)
	alien := &wire.Signer{Key: other.Key, CertURL: r.url("CERT-OTHER")}
	edit := func(f func(*Headers)) Headers { h := good; f(&h); return h }
	cases := []struct {
		name string
		h    Headers
		body []byte
		want error
	}{
		{"round trip", good, body, nil},
		{"tampered body", good, append([]byte(nil), append(body[:len(body)-1], ' ', '}')...), ErrSignature},
		{"another webhook's", s.Sign(body, "WH-OTHER", "T-1", now), body, ErrSignature},
		{"another transmission id", edit(func(h *Headers) { h.TransmissionID = "T-2" }), body, ErrSignature},
		{"another time", edit(func(h *Headers) { h.TransmissionTime = now.Add(-2 * time.Minute).Format(time.RFC3339) }), body, ErrSignature},
		{"signature of another key", edit(func(h *Headers) {
			h.TransmissionSig = alien.Sign(body, webhookID, "T-1", now.Add(-time.Minute)).TransmissionSig
		}), body, ErrSignature},
		{"replay past the tolerance", s.Sign(body, webhookID, "T-1", now.Add(-Tolerance-time.Second)), body, ErrTime},
		{"from the future", s.Sign(body, webhookID, "T-1", now.Add(Tolerance+time.Second)), body, ErrTime},
		{"not chaining to the roots", alien.Sign(body, webhookID, "T-1", now), body, ErrCert},
		{"no signature", edit(func(h *Headers) { h.TransmissionSig = "" }), body, ErrHeaders},
		{"signature not base64", edit(func(h *Headers) { h.TransmissionSig = "%%%" }), body, ErrHeaders},
		{"time unreadable", edit(func(h *Headers) { h.TransmissionTime = "yesterday" }), body, ErrHeaders},
		{"another algorithm", edit(func(h *Headers) { h.AuthAlgo = "SHA1withRSA" }), body, ErrAlgo},
		{"redirected cert URL", edit(func(h *Headers) { h.CertURL = r.url("REDIRECT") }), body, ErrCert},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := v.Verify(context.Background(), header(tc.h), tc.body)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Verify: %v, want %v", err, tc.want)
			}
			if err != nil && (strings.Contains(err.Error(), webhookID) || (tc.h.TransmissionSig != "" && strings.Contains(err.Error(), tc.h.TransmissionSig))) {
				t.Fatalf("the error shows the webhook id or the signature: %v", err)
			}
		})
	}
	if err := (&Verifier{Roots: c.Roots, Hosts: v.Hosts, Client: v.Client, Now: v.Now}).Verify(context.Background(), header(good), body); err == nil {
		t.Fatal("Verify without a webhook id: nil error")
	}
}

// TestReverify: a delivery kept long ago verifies again, its age no
// fault, its certificate checked as of its transmission, a forgery still not.
func TestReverify(t *testing.T) {
	sent := now.Add(-36 * time.Hour)
	c := mustCerts(t, now.Add(-48*time.Hour), now.Add(-24*time.Hour)) // expired by now
	r := newRig(t, c.ChainPEM)
	v := r.verifier(c)
	s := &wire.Signer{Key: c.Key, CertURL: r.url("CERT-1")}
	h := s.Sign(body, webhookID, "T-OLD", sent)
	ctx := context.Background()
	if err := v.Verify(ctx, header(h), body); !errors.Is(err, ErrTime) {
		t.Fatalf("Verify of a 36 h old delivery: %v, want ErrTime", err)
	}
	if err := v.Reverify(ctx, h, body); err != nil {
		t.Fatalf("Reverify: %v", err)
	}
	if err := v.Reverify(ctx, h, append([]byte("x"), body...)); !errors.Is(err, ErrSignature) {
		t.Fatalf("Reverify of a tampered body: %v, want ErrSignature", err)
	}
	// Signed when the certificate had expired (a stolen old key): refused.
	late := s.Sign(body, webhookID, "T-LATE", now.Add(-time.Minute))
	if err := v.Verify(ctx, header(late), body); !errors.Is(err, ErrCert) {
		t.Fatalf("Verify under an expired certificate: %v, want ErrCert", err)
	}
	if err := v.Reverify(ctx, late, body); !errors.Is(err, ErrCert) {
		t.Fatalf("Reverify under an expired certificate: %v, want ErrCert", err)
	}
}

// TestCertURLRefused: a cert URL not PayPal's is refused before any fetch.
func TestCertURLRefused(t *testing.T) {
	r, c, v := setup(t)
	s := &wire.Signer{Key: c.Key, CertURL: r.url("CERT-1")}
	good := s.Sign(body, webhookID, "T-1", now)
	host := strings.TrimPrefix(r.srv.URL, "https://")
	for _, u := range []string{
		"https://evil.example" + wire.CertPath + "CERT-1",
		"https://paypal.com.evil.example" + wire.CertPath + "CERT-1",
		"https://evilpaypal.com" + wire.CertPath + "CERT-1",
		"http://" + host + wire.CertPath + "CERT-1",
		"https://" + host + "/elsewhere/CERT-1",
		"https://" + host + wire.CertPath,
		"https://" + host + wire.CertPath + "CERT-1?x=1",
		"https://user@" + host + wire.CertPath + "CERT-1",
		"://nope",
	} {
		h := good
		h.CertURL = u
		if err := v.Verify(context.Background(), header(h), body); !errors.Is(err, ErrCertURL) {
			t.Errorf("cert URL %q: %v, want ErrCertURL", u, err)
		}
	}
	// PayPal's hosts only, by default: the loopback is not one.
	def := &Verifier{WebhookID: webhookID, Roots: c.Roots, Client: r.srv.Client(), Now: v.Now}
	if err := def.Verify(context.Background(), header(good), body); !errors.Is(err, ErrCertURL) {
		t.Errorf("loopback under the default hosts: %v, want ErrCertURL", err)
	}
	if n := r.fetches.Load(); n != 0 {
		t.Fatalf("%d fetches for refused URLs", n)
	}
	for _, tc := range []struct {
		name string
		ok   bool
	}{{"api.paypal.com", true}, {"api.sandbox.paypal.com", true}, {"API.PayPal.com", true}, {"x.y.paypal.com", true},
		{"paypal.com", false}, {"paypal.com.evil.example", false}, {"notpaypal.com", false}, {"", false}} {
		if got := match(DefaultHosts, tc.name); got != tc.ok {
			t.Errorf("host %q allowed: %v, want %v", tc.name, got, tc.ok)
		}
	}
}

// TestCertName: a chain to the roots issued to another name is refused,
// unless the verifier is told that name (the simulator's own).
func TestCertName(t *testing.T) {
	c := mustCerts(t, now.Add(-time.Hour), now.Add(time.Hour), "refunds.evil.example")
	r := newRig(t, c.ChainPEM)
	v := r.verifier(c)
	h := (&wire.Signer{Key: c.Key, CertURL: r.url("CERT-1")}).Sign(body, webhookID, "T-1", now)
	if err := v.Verify(context.Background(), header(h), body); !errors.Is(err, ErrCert) {
		t.Fatalf("a certificate issued to another name: %v, want ErrCert", err)
	}
	v2 := r.verifier(c)
	v2.Names = []string{"*.evil.example"}
	if err := v2.Verify(context.Background(), header(h), body); err != nil {
		t.Fatalf("with its name allowed: %v", err)
	}
}

// TestCertCache: one fetch per URL, however many deliveries and at once;
// a failed fetch is not kept; the cache is bounded.
func TestCertCache(t *testing.T) {
	r, c, v := setup(t)
	s := &wire.Signer{Key: c.Key, CertURL: r.url("CERT-1")}
	ctx := context.Background()
	for i := range 2 {
		if err := v.Verify(ctx, header(s.Sign(body, webhookID, fmt.Sprint("T-", i), now)), body); err != nil {
			t.Fatal(err)
		}
	}
	if n := r.fetches.Load(); n != 1 {
		t.Fatalf("two verifies: %d fetches, want 1", n)
	}

	r.slow = 50 * time.Millisecond // all ask while the first fetch is under way
	s.CertURL = r.url("CERT-2")
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() { errs <- v.Verify(ctx, header(s.Sign(body, webhookID, fmt.Sprint("C-", i), now)), body) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := r.fetches.Load(); n != 2 {
		t.Fatalf("16 verifies at once of a new URL: %d fetches in all, want 2", n)
	}
	r.slow = 0

	r.fail.Store(true)
	s.CertURL = r.url("CERT-3")
	h := s.Sign(body, webhookID, "T-F", now)
	if err := v.Verify(ctx, header(h), body); !errors.Is(err, ErrCertFetch) {
		t.Fatalf("cert host down: %v, want ErrCertFetch", err)
	}
	r.fail.Store(false)
	if err := v.Verify(ctx, header(h), body); err != nil {
		t.Fatalf("after the host is back: %v", err)
	}
	if n := r.fetches.Load(); n != 4 {
		t.Fatalf("a failed fetch was kept: %d fetches, want 4", n)
	}

	for i := range maxCached + 5 {
		s.CertURL = r.url(fmt.Sprint("MANY-", i))
		if err := v.Verify(ctx, header(s.Sign(body, webhookID, "T", now)), body); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(v.certs.chains); n > maxCached || len(v.certs.order) != n {
		t.Fatalf("cache holds %d chains (order %d), bound %d", n, len(v.certs.order), maxCached)
	}
}
