package stripesim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v76"
	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/refundkit/refundkit/refund/sim"
)

// Stripe's event types the simulator sends.
const (
	EventRefundCreated       = "refund.created"
	EventRefundUpdated       = "refund.updated"
	EventRefundFailed        = "refund.failed"
	EventChargeRefundUpdated = "charge.refund.updated"
)

// EventsConfig is where and how Stripe's webhook events go.
type EventsConfig struct {
	// URL (loopback) receives every event, POSTed as Stripe does; none
	// when empty.
	URL string
	// Secrets are the endpoint's signing secrets (whsec_...), in the order
	// they are rolled to; the first signs until RollAfter events were made.
	Secrets []string
	// RollAfter rolls the secret every RollAfter events (0: never): the
	// next in Secrets signs from then on, and the one before too for the
	// RollOverlap events that follow, as Stripe signs with every active
	// secret while an old one expires. The last of Secrets is never rolled.
	RollAfter, RollOverlap int
	// Backoff is the wait before an event's first resend, doubling up to
	// MaxBackoff (0: 50ms, 5s).
	Backoff, MaxBackoff time.Duration
}

// check reports what is wrong with c, naming no secret.
func (c *EventsConfig) check() error {
	if err := sim.CheckLoopbackURL("events url", "events", c.URL); err != nil {
		return err
	}
	if len(c.Secrets) == 0 {
		return errors.New("stripe events need a signing secret (whsec_...) to sign them")
	}
	for i, s := range c.Secrets {
		if rest, ok := strings.CutPrefix(s, "whsec_"); !ok || rest == "" || strings.ContainsAny(rest, " \t,") {
			return fmt.Errorf("stripe signing secret %d of %d: want whsec_ and more, no spaces or commas", i+1, len(c.Secrets))
		}
	}
	if c.RollAfter < 0 || c.RollOverlap < 0 || c.Backoff < 0 || c.MaxBackoff < 0 {
		return fmt.Errorf("stripe events roll after %d, overlap %d, backoff %v, max backoff %v: want zero or more",
			c.RollAfter, c.RollOverlap, c.Backoff, c.MaxBackoff)
	}
	return nil
}

// event is Stripe's event object, its fields in Stripe's order.
type event struct {
	ID              string       `json:"id"`
	Object          string       `json:"object"`
	APIVersion      string       `json:"api_version"`
	Created         int64        `json:"created"`
	Data            eventData    `json:"data"`
	Livemode        bool         `json:"livemode"`
	PendingWebhooks int          `json:"pending_webhooks"`
	Request         eventRequest `json:"request"`
	Type            string       `json:"type"`
}

type eventData struct {
	Object             refundObject   `json:"object"`
	PreviousAttributes map[string]any `json:"previous_attributes,omitempty"`
}

// eventRequest is the API request that caused the event; null for
// changes Stripe made by itself (a pending refund settling).
type eventRequest struct {
	ID             *string `json:"id"`
	IdempotencyKey *string `json:"idempotency_key"`
}

// events sends Stripe's webhook events through the core's sender.
type events struct {
	*sim.Events
	core *sim.Core
	cfg  EventsConfig
}

func newEvents(core *sim.Core, cfg EventsConfig) (*events, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	cfg.Secrets = append([]string(nil), cfg.Secrets...)
	return &events{Events: sim.NewEvents(core, cfg.URL, cfg.Backoff, cfg.MaxBackoff), core: core, cfg: cfg}, nil
}

// secrets are the secrets that sign event number k (from 1).
func (e *events) secrets(k int64) []string {
	all, n := e.cfg.Secrets, int64(e.cfg.RollAfter)
	if n <= 0 || len(all) == 1 {
		return all[:1]
	}
	i := min((k-1)/n, int64(len(all)-1))
	if i > 0 && k-1-i*n < int64(e.cfg.RollOverlap) {
		return all[i-1 : i+1]
	}
	return all[i : i+1]
}

// signature is Stripe-Signature for body at t under secrets.
func signature(t time.Time, body []byte, secrets []string) string {
	var b strings.Builder
	b.WriteString("t=")
	b.WriteString(strconv.FormatInt(t.Unix(), 10))
	for _, s := range secrets {
		fmt.Fprintf(&b, ",v1=%x", webhook.ComputeSignature(t, body, s))
	}
	return b.String()
}

// forgedSecret signs forged deliveries: no endpoint has it.
const forgedSecret = "whsec_forged_by_the_refundkit_simulator"

// statusSwaps tamper with what a forged event says of the refund: its status.
var statusSwaps = [][2]string{{`"status":"succeeded"`, `"status":"failed"`}, {`"status":"failed"`, `"status":"succeeded"`}, {`"status":"pending"`, `"status":"succeeded"`}}

// send makes an event of type typ about obj and queues its deliveries
// under the knobs f; done, if set, is told once a receiver accepts one.
func (e *events) send(f *sim.Faults, typ string, obj refundObject, prev map[string]any, req eventRequest, now time.Time, done func()) {
	k := e.Next()
	body := sim.MustJSON(event{ID: sim.Padded("evt_sim", 14, int(k)), Object: "event", APIVersion: stripe.APIVersion,
		Created: now.Unix(), Data: eventData{Object: obj, PreviousAttributes: prev}, PendingWebhooks: 1, Request: req, Type: typ})
	due := time.Now().Add(f.StripeEventsDelay)
	if f.StripeEventsJitter > 0 {
		due = due.Add(time.Duration(e.core.Draw(uint64(k), sim.KnobStripeEventsJitter) * float64(f.StripeEventsJitter)))
	}
	secrets := e.secrets(k)
	kn := sim.EventKnobs{ReorderShare: f.StripeEventsReorderShare, ForgedShare: f.StripeEventsForgedShare, DuplicateShare: f.StripeEventsDuplicateShare,
		ReorderDelay: cmp.Or(f.StripeEventsReorderDelay, sim.StripeEventsReorderDelayDefault),
		Reorder:      sim.KnobStripeEventsReorder, Forged: sim.KnobStripeEventsForged, ForgedKind: sim.KnobStripeEventsForgedKind, Duplicate: sim.KnobStripeEventsDuplicate}
	// Each attempt is signed at its own time, as Stripe signs.
	e.Send(k, due, body, kn, func(h http.Header, wrong bool) {
		s := secrets
		if wrong {
			s = []string{forgedSecret}
		}
		h.Set("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks; refundkit simulator)")
		h.Set("Stripe-Signature", signature(time.Now(), body, s))
	}, statusSwaps, done)
}

// EventStats count Stripe's webhook events and their deliveries.
type EventStats struct {
	sim.EventCounts
	// PendingUntold are refunds made pending whose final status no
	// receiver has accepted a refund.updated of yet (with no URL: all).
	PendingUntold int64 `json:"pending_untold"`
	// SettlesScheduled are pending refunds still to settle.
	SettlesScheduled int64 `json:"settles_scheduled"`
}

// EventStats returns the events' counts so far.
func (s *Server) EventStats() EventStats {
	var c sim.EventCounts
	if s.events != nil {
		c = s.events.Counts()
	}
	return EventStats{EventCounts: c, PendingUntold: s.untold.N(), SettlesScheduled: s.settles.scheduled.N()}
}

// FlushEvents waits until every pending refund due to settle has settled
// and every event made is delivered (the requests behind a gateway
// timeout settled first), or ctx ends. A refund pending for a long
// StripePendingFor holds it that long.
func (s *Server) FlushEvents(ctx context.Context) (EventStats, error) {
	var flush func(context.Context) error
	if s.events != nil {
		flush = s.events.Flush
	}
	err := s.core.Flush(ctx, s.settles.scheduled.Wait, flush)
	return s.EventStats(), err
}
