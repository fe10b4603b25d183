package stripe

// Stripe's side of the one receiver (cmd webhook): each event verified
// under the endpoint's signing secrets and kept before it is answered 2xx,
// which is what ends Stripe's retries. The receiving itself is
// refund/provider/events' Receiver.

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/refundkit/refundkit/refund/provider/events"
)

// EventsPath is the path Stripe's events are served at by default.
const EventsPath = "/stripe/events"

// ReceiverConfig configures a Receiver.
type ReceiverConfig struct {
	Secrets      []string      // the endpoint's signing secrets: several while one is rolled
	Tolerance    time.Duration // how old a signature may be (default Tolerance, 300 s)
	Events       EventStore    // a file opened for writing, or a table
	MaxBody      int64         // default 1 MiB
	StoreTimeout time.Duration // bounds an Add (default 30 s)
	Now          func() time.Time
	Logf         func(format string, args ...any)
}

// Receiver serves POSTs of Stripe's events. It is safe for concurrent use.
type Receiver = events.Receiver[Kept]

// Reasons an event is refused, as ReceiverStats names them.
const (
	RefusedSignature  = "signature"              // 401: no Stripe-Signature, none of its v1= verifies, or too old (a replay)
	RefusedTooLarge   = events.RefusedTooLarge   // 413
	RefusedBadRequest = events.RefusedBadRequest // 400: signed, but not an event refundkit reads
	RefusedMethod     = events.RefusedMethod     // 405
)

// ReceiverStats are a Receiver's counters.
type ReceiverStats = events.ReceiverStats

func NewReceiver(cfg ReceiverConfig) (*Receiver, error) {
	if len(cfg.Secrets) == 0 {
		return nil, errors.New("no signing secret")
	}
	if cfg.Events == nil {
		return nil, errors.New("no events file")
	}
	cfg.Tolerance = cmp.Or(cfg.Tolerance, Tolerance)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	secrets := append([]string(nil), cfg.Secrets...)
	return events.NewReceiver(events.ReceiverConfig[Kept]{
		Provider: "Stripe",
		Noun:     "event",
		Reasons:  []string{RefusedSignature},
		Verify: func(_ context.Context, h http.Header, body []byte) error {
			if err := VerifyEvent(body, h.Get(SignatureHeader), secrets, cfg.Tolerance); err != nil {
				return events.Refuse(http.StatusUnauthorized, RefusedSignature, "Stripe-Signature: "+err.Error())
			}
			return nil
		},
		Read: func(h http.Header, body []byte) (Kept, string, error) {
			ev, err := ReadEvent(body)
			if err != nil {
				return Kept{}, "", err
			}
			k := Kept{V: KeptVersion, Received: cfg.Now().UTC(), Signature: h.Get(SignatureHeader), Payload: string(body)}
			return k, events.EventName(ev.ID, ev.Type), nil
		},
		Keep:         cfg.Events.Add,
		MaxBody:      cfg.MaxBody,
		StoreTimeout: cfg.StoreTimeout,
		Logf:         cfg.Logf,
	})
}
