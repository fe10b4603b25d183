package crashrig

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Striker signals the process under test from inside the simulator's
// create hook when the count of reserved keys reaches a mark: the moment a
// refund call is in flight. With SIGKILL it waits for the process to be
// gone before the request goes on, so the simulator commits a refund whose
// outcome the journal can never have. Install its Hook with Sim.OnCreate,
// alone or inside a hook that does more.
type Striker struct {
	sig     syscall.Signal
	current atomic.Pointer[Proc]
	mark    atomic.Int64 // 0: disarmed
	struck  atomic.Int64

	mu    sync.Mutex
	ready chan struct{} // Prime's: closed once ArmAt names the process
}

// NewStriker makes a striker that sends sig.
func NewStriker(sig syscall.Signal) *Striker { return &Striker{sig: sig} }

// Hook is the striker's part of a create hook.
func (s *Striker) Hook(n int64, _ string) {
	at := s.mark.Load()
	if at == 0 || n < at {
		return
	}
	if s.current.Load() == nil {
		// Primed, and the process not named yet: its call waits here
		// the moment it takes its starter to name it.
		s.mu.Lock()
		ready := s.ready
		s.mu.Unlock()
		if ready == nil {
			return
		}
		select {
		case <-ready:
		case <-time.After(time.Minute): // a starter that never armed
			return
		}
	}
	p := s.current.Load()
	if p == nil || !s.mark.CompareAndSwap(at, 0) {
		return
	}
	if p.Cmd.Process.Signal(s.sig) != nil {
		return // it has exited already
	}
	s.struck.Add(1)
	if s.sig == syscall.SIGKILL {
		<-p.exited
	}
}

// Arm makes the striker hit p within the next gap keys sim reserves, at a
// point drawn from rng.
func (s *Striker) Arm(sim *Sim, p *Proc, rng *rand.Rand, gap int) {
	s.ArmAt(p, sim.Creates()+1+rng.Int64N(int64(max(gap, 1))))
}

// ArmAt makes the striker hit p at the at-th key the simulator reserves.
func (s *Striker) ArmAt(p *Proc, at int64) {
	s.current.Store(p)
	s.mark.Store(at)
	s.release()
}

// Prime sets the mark before the process under test starts, ArmAt naming
// it once it has: a call that reaches the mark in between waits for it. On
// a busy machine a run may otherwise make every call before its starter
// arms the striker, and is never struck.
func (s *Striker) Prime(at int64) {
	s.mu.Lock()
	s.ready = make(chan struct{})
	s.mu.Unlock()
	s.current.Store(nil)
	s.mark.Store(at)
}

// Disarm is called once the process has exited.
func (s *Striker) Disarm() {
	s.mark.Store(0)
	s.current.Store(nil)
	s.release()
}

func (s *Striker) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ready != nil {
		close(s.ready)
		s.ready = nil
	}
}

// Struck is how many times the striker has signalled a running process.
func (s *Striker) Struck() int64 { return s.struck.Load() }

// Hold parks refund calls at the simulator, inside its create hook, with
// their keys reserved and nothing committed: the N calls that reserve keys
// from number At on wait there until Free. Held is closed once all N are
// parked.
type Hold struct {
	At, N   int64
	mu      sync.Mutex
	keys    []string
	held    chan struct{}
	release chan struct{}
	once    sync.Once
}

// NewHold makes a hold of n calls from the at-th on. Free it at the end at
// the latest: the simulator's Close waits for its hook.
func NewHold(at, n int64) *Hold {
	return &Hold{At: at, N: n, held: make(chan struct{}), release: make(chan struct{})}
}

// Park is the hold's part of a create hook: a call in its range waits.
func (h *Hold) Park(n int64, key string) {
	if n < h.At || n >= h.At+h.N {
		return
	}
	h.mu.Lock()
	h.keys = append(h.keys, key)
	if len(h.keys) == int(h.N) {
		close(h.held)
	}
	h.mu.Unlock()
	<-h.release
}

// Held is closed once all N calls are parked.
func (h *Hold) Held() <-chan struct{} { return h.held }

// Parked are the keys of the calls parked so far.
func (h *Hold) Parked() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.keys...)
}

// Free lets the parked calls go on; later calls of the range pass.
func (h *Hold) Free() { h.once.Do(func() { close(h.release) }) }
