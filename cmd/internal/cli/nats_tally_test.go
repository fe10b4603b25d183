package cli

import (
	"sync"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// TestNATSExitFollowsTheBatchTally is TestPGExitFollowsTheBatchTally on
// the NATS checkpoint: two workers, every refund call answered 500 after
// the refund is made. Each leaves the items it sent in doubt and gives
// them back; the other takes them at once and adopts their refunds. Both
// wait while the other may still settle an item they gave back, print the
// whole batch refunded and exit 0.
func TestNATSExitFollowsTheBatchTally(t *testing.T) {
	const items = 30
	r := newNATSRig(t, items, stripesim.Faults{ErrorAfterCommitShare: 1})
	var mu sync.Mutex
	senders := map[string]bool{}
	both := make(chan struct{})
	var bothOnce sync.Once
	t.Cleanup(func() { bothOnce.Do(func() { close(both) }) })
	r.sim.OnCreate(func(_ int64, key string) {
		_, item, _, ok := crashrig.ParseKey(key)
		if !ok {
			return
		}
		holder, _ := r.holder(item)
		mu.Lock()
		senders[holder] = true
		if len(senders) >= 2 {
			bothOnce.Do(func() { close(both) })
		}
		mu.Unlock()
		<-both
	})
	ws := map[string]*crashrig.Proc{"A": r.start("A", nil, "-j", "2", "--lease", "10s"), "B": r.start("B", nil, "-j", "2", "--lease", "10s")}
	for _, p := range ws {
		go p.Wait()
	}
	for _, p := range ws {
		waitExit(t, p, 120*time.Second)
	}
	checkExitsFollowTally(t, ws, items)
	r.checkExactlyOnce()
}
