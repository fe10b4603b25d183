package crashrig

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
	"github.com/refundkit/refundkit/refund/sim/adyensim"
	"github.com/refundkit/refundkit/refund/sim/paypalsim"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
)

// Sim is the simulator on loopback (Stripe's, PayPal's and Adyen's APIs
// on one port), with a log of the idempotency keys its refund creations
// reserved (Stripe's and Adyen's Idempotency-Key, PayPal's
// PayPal-Request-Id), in order, and a
// hook run inside each such creation while the request is held in flight.
type Sim struct {
	*stripesim.Server
	mu       sync.Mutex
	keyLog   []string
	creates  atomic.Int64
	onCreate atomic.Pointer[func(n int64, key string)]
}

// StartSim starts a simulator on a free loopback port; Close stops it.
func StartSim(cfg stripesim.Config) (*Sim, error) {
	srv, err := stripesim.Start(cfg)
	if err != nil {
		return nil, err
	}
	s := &Sim{Server: srv}
	srv.SetCreateHook(s.created)
	srv.PayPal().SetCreateHook(s.created)
	srv.Adyen().SetCreateHook(s.created)
	return s, nil
}

func (s *Sim) created(key string) {
	s.mu.Lock()
	s.keyLog = append(s.keyLog, key)
	s.mu.Unlock()
	n := s.creates.Add(1)
	if fn := s.onCreate.Load(); fn != nil {
		(*fn)(n, key)
	}
}

// OnCreate makes fn run inside every refund creation that reserves a key,
// of either API, with n the count of keys reserved so far (this one
// included); the request is held in flight until fn returns. nil removes
// it.
func (s *Sim) OnCreate(fn func(n int64, key string)) {
	if fn == nil {
		s.onCreate.Store(nil)
		return
	}
	s.onCreate.Store(&fn)
}

// SetCreateHook is OnCreate for a hook that wants only the key: it
// stands in for the server's own, which would bypass the log.
func (s *Sim) SetCreateHook(fn func(key string)) {
	if fn == nil {
		s.OnCreate(nil)
		return
	}
	s.OnCreate(func(_ int64, key string) { fn(key) })
}

// Creates is how many keys refund creations have reserved so far.
func (s *Sim) Creates() int64 { return s.creates.Load() }

// Keys are the keys reserved so far, in order.
func (s *Sim) Keys() []string { return s.KeysSince(0) }

// KeysSince are the keys reserved after the first n.
func (s *Sim) KeysSince(n int64) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keyLog[n:]...)
}

// Refund is a refund of either API as the checks see it: what it refunds,
// whether it holds money, and whose it is.
type Refund struct {
	ID string
	// Payment is the charge (Stripe), capture (PayPal) or payment
	// pspReference (Adyen) it refunds;
	// PaymentIntent is the charge's payment intent, if any.
	Payment, PaymentIntent string
	Amount                 int64
	Status                 string // the API's own
	// Live: it holds money (Stripe: not canceled or failed; PayPal:
	// COMPLETED or PENDING; Adyen: received or refunded, as its delivered
	// notifications tell).
	Live bool
	// Failed: it ended without moving money for good (Stripe failed,
	// PayPal FAILED; Adyen refused, failed or reversed): its item is
	// failed, never to be refunded again.
	Failed bool
	// Key is the idempotency key (request id) of the request that made it.
	Key string
	// Batch, Item and Attempt are refundkit's, "" when the refund says
	// none: Stripe's metadata; PayPal shows no metadata the simulator
	// keeps apart, so its request id, refundkit's key, says them.
	Batch, Item, Attempt string
}

// AllRefunds are the refunds of every API, Stripe's first, then PayPal's,
// then Adyen's, each API's oldest first.
func (s *Sim) AllRefunds() []Refund {
	var out []Refund
	for _, rf := range s.Refunds() {
		out = append(out, Refund{ID: rf.ID, Payment: rf.Charge, PaymentIntent: rf.PaymentIntent, Amount: rf.Amount,
			Status: rf.Status, Live: rf.Status != stripesim.StatusCanceled && rf.Status != stripesim.StatusFailed,
			Failed: rf.Status == stripesim.StatusFailed, Key: rf.IdempotencyKey,
			Batch: rf.Metadata[refund.MetaBatch], Item: rf.Metadata[refund.MetaItem], Attempt: rf.Metadata[refund.MetaAttempt]})
	}
	for _, rf := range s.PayPal().Refunds() {
		out = append(out, paypalRefund(rf))
	}
	for _, rf := range s.Adyen().Refunds() {
		out = append(out, adyenRefund(rf))
	}
	return out
}

func adyenRefund(rf adyensim.Refund) Refund {
	failed := rf.Status == adyensim.OutcomeRefused || rf.Status == adyensim.OutcomeFailed || rf.Status == adyensim.OutcomeReversed
	out := Refund{ID: rf.ID, Payment: rf.Payment, Amount: rf.Amount, Status: rf.Status, Live: !failed, Failed: failed,
		Key: rf.IdempotencyKey}
	if batch, item, attempt, ok := wire.ParseReference(rf.Reference); ok {
		out.Batch, out.Item, out.Attempt = batch, item, strconv.Itoa(attempt)
	}
	return out
}

func paypalRefund(rf paypalsim.Refund) Refund {
	out := Refund{ID: rf.ID, Payment: rf.Capture, Amount: rf.Amount, Status: rf.Status,
		Live:   rf.Status == paypalsim.StatusCompleted || rf.Status == paypalsim.StatusPending,
		Failed: rf.Status == paypalsim.StatusFailed, Key: rf.RequestID}
	if batch, item, attempt, ok := ParseKey(rf.RequestID); ok {
		out.Batch, out.Item, out.Attempt = batch, item, attempt
	}
	return out
}

// BatchRefunds are the refunds of batch, live or not, by item.
func (s *Sim) BatchRefunds(batch string) map[string][]Refund {
	by := map[string][]Refund{}
	for _, rf := range s.AllRefunds() {
		if rf.Batch == batch {
			by[rf.Item] = append(by[rf.Item], rf)
		}
	}
	return by
}

// LiveRefunds are the refunds of batch that hold money, by item.
func (s *Sim) LiveRefunds(batch string) map[string][]Refund {
	live := map[string][]Refund{}
	for item, rs := range s.BatchRefunds(batch) {
		for _, rf := range rs {
			if rf.Live {
				live[item] = append(live[item], rf)
			}
		}
	}
	return live
}
