package paypalsim

// PayPal's webhook events for the simulator's refunds, signed as PayPal
// signs them (wire.Signer, a throwaway chain of wire's) and posted through
// the core's notifier until a receiver accepts each. The chain is served
// over HTTPS at wire.CertPath on a listener of its own, its TLS
// certificate issued by the chain's root: a receiver trusts that one root
// (EventsCerts) and allows the one host.

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/refundkit/refundkit/refund/provider/paypal/wire"
	"github.com/refundkit/refundkit/refund/sim"
)

// PayPal's event types the simulator sends.
const (
	EventCaptureRefunded = "PAYMENT.CAPTURE.REFUNDED" // a refund completed
	EventRefundPending   = "PAYMENT.REFUND.PENDING"   // a refund made PENDING
	EventRefundFailed    = "PAYMENT.REFUND.FAILED"    // a PENDING refund that failed
)

// CertName is the id of the simulator's signing certificate in its URL.
const CertName = "CERT-360caa42-fca2a594-5a0c5e5d"

// EventsConfig is where and how PayPal's webhook events go.
type EventsConfig struct {
	// URL (loopback) receives every event, POSTed as PayPal does; none
	// when empty.
	URL string
	// WebhookID is the receiving webhook's id, which each delivery is
	// signed for (the receiver's PAYPAL_WEBHOOK_ID).
	WebhookID string
	// Backoff is the wait before an event's first resend, doubling up to
	// MaxBackoff (0: 50ms, 5s).
	Backoff, MaxBackoff time.Duration
	// DuplicateShare of events are delivered twice (a new transmission
	// each); ReorderShare are held ReorderDelay (0:
	// sim.StripeEventsReorderDelayDefault) so that later ones overtake
	// them; ForgedShare get a forged delivery too, posted once, that must
	// not verify (signed with a key no certificate has, or tampered).
	DuplicateShare, ReorderShare, ForgedShare float64
	ReorderDelay                              time.Duration
	// RollAfter events, the signing certificate is rotated, as PayPal
	// rotates its own: a new key and chain under the same root, at a new
	// cert URL (CertName-2, ...); the old URLs keep serving (0: never).
	RollAfter int
}

// check reports what is wrong with c.
func (c *EventsConfig) check() error {
	if err := sim.CheckLoopbackURL("paypal events url", "events", c.URL); err != nil {
		return err
	}
	if c.WebhookID == "" || strings.ContainsAny(c.WebhookID, " \t\r\n|") {
		return errors.New("paypal events need the receiving webhook's id (PAYPAL_WEBHOOK_ID) to sign them for: no spaces or '|'")
	}
	if c.RollAfter < 0 {
		return fmt.Errorf("paypal events roll after %d: want 0 or more", c.RollAfter)
	}
	if c.Backoff < 0 || c.MaxBackoff < 0 || c.ReorderDelay < 0 {
		return fmt.Errorf("paypal events backoff %v, max backoff %v, reorder delay %v: want zero or more", c.Backoff, c.MaxBackoff, c.ReorderDelay)
	}
	for _, s := range []float64{c.DuplicateShare, c.ReorderShare, c.ForgedShare} {
		if !(s >= 0 && s <= 1) {
			return fmt.Errorf("paypal events share %v: want 0 to 1", s)
		}
	}
	return nil
}

// eventJSON is PayPal's event envelope, its fields in PayPal's order.
type eventJSON struct {
	ID              string     `json:"id"`
	EventVersion    string     `json:"event_version"`
	CreateTime      string     `json:"create_time"`
	ResourceType    string     `json:"resource_type"`
	ResourceVersion string     `json:"resource_version"`
	EventType       string     `json:"event_type"`
	Summary         string     `json:"summary"`
	Resource        refundJSON `json:"resource"`
	Links           []linkJSON `json:"links"`
}

// events sends PayPal's webhook events through the core's sender.
type events struct {
	*sim.Events
	cfg    EventsConfig
	certs  *wire.Certs     // the first chain: its root is every chain's
	signer wire.Signer     // the first chain's
	forger *rsa.PrivateKey // signs forged deliveries; nil without ForgedShare
	host   *http.Server    // serves the chain over HTTPS
	addr   string          // the host's 127.0.0.1:port

	// settles are the timers of PENDING refunds' final events.
	mu        sync.Mutex
	settles   map[*time.Timer]bool
	closed    bool
	scheduled sim.Gauge

	// signers are the chains made so far, by roll; chains serves them by
	// cert name. Apart from mu: making a chain takes a while.
	certMu  sync.Mutex
	signers []wire.Signer
	chains  map[string][]byte

	transmissions, fetches, finals atomic.Int64
}

func newEvents(core *sim.Core, cfg EventsConfig) (*events, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	cfg.ReorderDelay = cmp.Or(cfg.ReorderDelay, sim.StripeEventsReorderDelayDefault)
	now := time.Now() // the receiver's clock checks the chain, not the simulator's
	certs, err := wire.NewCerts(now.Add(-24*time.Hour), now.Add(365*24*time.Hour))
	if err != nil {
		return nil, err
	}
	e := &events{cfg: cfg, certs: certs, settles: map[*time.Timer]bool{}, chains: map[string][]byte{CertName: certs.ChainPEM}}
	if cfg.ForgedShare > 0 {
		if e.forger, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			return nil, err
		}
	}
	if err := e.serveCerts(); err != nil {
		return nil, err
	}
	e.signer = wire.Signer{Key: certs.Key, CertURL: "https://" + e.addr + wire.CertPath + CertName}
	e.signers = []wire.Signer{e.signer}
	e.Events = sim.NewEvents(core, cfg.URL, cfg.Backoff, cfg.MaxBackoff)
	return e, nil
}

// serveCerts starts the HTTPS host of the chain on a free loopback port.
func (e *events) serveCerts() error {
	loopback := net.IPv4(127, 0, 0, 1)
	cert, err := e.certs.ServerCert(loopback)
	if err != nil {
		return err
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		return fmt.Errorf("paypal events: certificate host: %w", err)
	}
	e.addr = ln.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+wire.CertPath+"{name}", func(w http.ResponseWriter, r *http.Request) {
		e.certMu.Lock()
		chain, ok := e.chains[r.PathValue("name")]
		e.certMu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		e.fetches.Add(1)
		w.Header().Set("Content-Type", "application/x-pem-file")
		w.Write(chain)
	})
	e.host = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go e.host.Serve(ln) // returns ErrServerClosed on close
	return nil
}

// close stops the settle timers, the notifier and the certificate host.
func (e *events) close() {
	e.mu.Lock()
	e.closed = true
	for t := range e.settles {
		if t.Stop() {
			e.scheduled.Add(-1)
		}
	}
	clear(e.settles)
	e.mu.Unlock()
	e.Close()
	e.host.Close()
}

// eventTypes are the events PayPal sends for a refund now in a status
// other than COMPLETED's EventCaptureRefunded.
var eventTypes = map[string]string{StatusPending: EventRefundPending, StatusFailed: EventRefundFailed}

// made tells of new refund r as the refund call answered it (the caller
// holds r.cp.mu), and schedules the event of a PENDING one's settling.
func (s *Server) madeRefund(r *refund, base string, now time.Time) {
	e := s.events
	if e == nil {
		return
	}
	e.send(r.object(base, now), now)
	if r.initial != StatusPending || r.settleAt.IsZero() {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	e.scheduled.Add(1)
	var t *time.Timer
	t = time.AfterFunc(r.settleAt.Sub(now), func() {
		defer e.scheduled.Add(-1)
		e.mu.Lock()
		delete(e.settles, t)
		closed := e.closed
		e.mu.Unlock()
		if closed {
			return
		}
		at := s.now()
		if at.Before(r.settleAt) { // a clock a test holds back: the status it settles to
			at = r.settleAt
		}
		r.cp.mu.Lock()
		obj := r.object(base, at)
		r.cp.mu.Unlock()
		e.finals.Add(1)
		e.send(obj, at)
	})
	e.settles[t] = true
}

// send makes the event of refund obj and queues its deliveries.
func (e *events) send(obj refundJSON, now time.Time) {
	k := e.Next()
	id := sim.Padded("WH-SIM", 17, int(k))
	typ := cmp.Or(eventTypes[obj.Status], EventCaptureRefunded)
	body := sim.MustJSON(eventJSON{ID: id, EventVersion: "1.0", CreateTime: stamp(now), ResourceType: "refund", ResourceVersion: "2.0",
		EventType: typ, Summary: "A " + obj.Amount.Value + " " + obj.Amount.CurrencyCode + " refund is " + strings.ToLower(obj.Status),
		Resource: obj, Links: []linkJSON{{Href: "https://api.sandbox.paypal.com/v1/notifications/webhooks-events/" + id, Rel: "self", Method: "GET"}}})
	due := time.Now()
	signer := e.signerFor(k)
	kn := sim.EventKnobs{ReorderShare: e.cfg.ReorderShare, ForgedShare: e.cfg.ForgedShare, DuplicateShare: e.cfg.DuplicateShare, ReorderDelay: e.cfg.ReorderDelay,
		Reorder: sim.KnobPayPalEventsReorder, Forged: sim.KnobPayPalEventsForged, ForgedKind: sim.KnobPayPalEventsForgedKind, Duplicate: sim.KnobPayPalEventsDuplicate}
	e.Send(k, due, body, kn, func(h http.Header, wrong bool) {
		s := signer
		if wrong {
			s.Key = e.forger
		}
		e.sign(h, body, s)
	}, statusSwaps, nil)
}

// signerFor is the signer of event k: the chain of its roll, made when
// the first event of the roll is (RollAfter events to a chain). A chain
// that cannot be made keeps the last one (the roll is the simulator's
// knob, not the API's behaviour).
func (e *events) signerFor(k int64) wire.Signer {
	e.certMu.Lock()
	defer e.certMu.Unlock()
	if e.cfg.RollAfter == 0 {
		return e.signers[0]
	}
	for roll := int((k - 1) / int64(e.cfg.RollAfter)); len(e.signers) <= roll; {
		c, err := e.certs.Renew()
		if err != nil {
			break
		}
		name := fmt.Sprintf("%s-%d", CertName, len(e.signers)+1)
		e.chains[name] = c.ChainPEM
		e.signers = append(e.signers, wire.Signer{Key: c.Key, CertURL: "https://" + e.addr + wire.CertPath + name})
	}
	return e.signers[min(int((k-1)/int64(e.cfg.RollAfter)), len(e.signers)-1)]
}

// sign sets an attempt's headers: a transmission of its own, signed now
// as PayPal signs (with the certificate's key, or a forger's).
func (e *events) sign(h http.Header, body []byte, s wire.Signer) {
	n := e.transmissions.Add(1)
	tid := fmt.Sprintf("%08x-5a0c-11ef-8000-%012x", n, n*7919)
	h.Set("User-Agent", "PayPal/AUHD-214.0-58843461 (refundkit simulator)")
	s.Sign(body, e.cfg.WebhookID, tid, time.Now()).Set(h)
}

// statusSwaps tamper with what a forged event says of the refund: its status.
var statusSwaps = [][2]string{{`"status":"COMPLETED"`, `"status":"FAILED"`}, {`"status":"FAILED"`, `"status":"COMPLETED"`}, {`"status":"PENDING"`, `"status":"COMPLETED"`}}

// EventStats count PayPal's webhook events and their deliveries.
type EventStats struct {
	sim.EventCounts
	// Settled are events of PENDING refunds settling; SettlesScheduled,
	// those still to come.
	Settled          int64 `json:"settled"`
	SettlesScheduled int64 `json:"settles_scheduled"`
	// CertFetches are GETs of the signing chains (a receiver caches each).
	CertFetches int64 `json:"cert_fetches"`
	// CertRolls are the rotations of the signing certificate (RollAfter).
	CertRolls int64 `json:"cert_rolls,omitempty"`
}

func (e *events) stats() EventStats {
	e.certMu.Lock()
	rolls := int64(len(e.signers) - 1)
	e.certMu.Unlock()
	return EventStats{EventCounts: e.Counts(), Settled: e.finals.Load(), SettlesScheduled: e.scheduled.N(), CertFetches: e.fetches.Load(), CertRolls: rolls}
}

// EventsCerts is what a receiver of the simulator's events trusts: the
// root of the signing chain (also the root of the certificate host's
// HTTPS), the one host its cert URLs name (127.0.0.1), and that URL. ok is
// false without Config.Events.URL.
func (s *Server) EventsCerts() (rootPEM []byte, host, certURL string, ok bool) {
	if s.events == nil {
		return nil, "", "", false
	}
	h, _, _ := net.SplitHostPort(s.events.addr)
	return bytes.Clone(s.events.certs.RootPEM), h, s.events.signer.CertURL, true
}

// EventStats returns the events' counts so far (zero without events).
func (s *Server) EventStats() EventStats {
	if s.events == nil {
		return EventStats{}
	}
	return s.events.stats()
}

// FlushEvents waits until every PENDING refund due to settle has settled
// and every event made is delivered (the requests behind a gateway
// timeout settled first), or ctx ends. A long PayPalPendingFor holds it
// that long.
func (s *Server) FlushEvents(ctx context.Context) (EventStats, error) {
	var err error
	if e := s.events; e != nil {
		err = s.core.Flush(ctx, e.scheduled.Wait, e.Flush)
	} else {
		err = s.core.Settle(ctx)
	}
	return s.EventStats(), err
}

// Close stops sending events and serving the certificate; those not yet
// accepted stay pending.
func (s *Server) Close() {
	if s.events != nil {
		s.events.close()
	}
}
