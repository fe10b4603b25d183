package crashrig

import (
	"sync"
	"sync/atomic"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/stripesim"
)

// Sim is the Stripe simulator on loopback, with a log of the idempotency
// keys its refund creations reserved, in order, and a hook run inside each
// such creation while the request is held in flight.
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
// with n the count of keys reserved so far (this one included); the
// request is held in flight until fn returns. nil removes it.
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

// LiveRefunds are the refunds of batch that hold money (not canceled, not
// failed), by item.
func (s *Sim) LiveRefunds(batch string) map[string][]stripesim.Refund {
	live := map[string][]stripesim.Refund{}
	for _, rf := range s.Refunds() {
		if rf.Metadata[refund.MetaBatch] != batch || rf.Status == stripesim.StatusCanceled || rf.Status == stripesim.StatusFailed {
			continue
		}
		item := rf.Metadata[refund.MetaItem]
		live[item] = append(live[item], rf)
	}
	return live
}
