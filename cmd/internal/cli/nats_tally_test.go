package cli

import (
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund/stripesim"
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
	tally := regexp.MustCompile(`(?m)^refund: checkpoint: batch crash: (\d+) items \(([^)]*)\), by all workers$`)
	summary := regexp.MustCompile(`(?m)^refund: \d+ items?: (\d+) refunded, \d+ skipped, (\d+) failed, (\d+) in_doubt;`)
	for name, p := range ws {
		msg := p.Stderr.String()
		s := summary.FindStringSubmatch(msg)
		m := tally.FindStringSubmatch(msg)
		if s == nil || m == nil {
			t.Fatalf("%s exited %d without its summary or the batch's tally: %s", name, p.Code, msg)
		}
		t.Logf("%s: exit %d; this run: %s refunded, %s in doubt; the batch: %s", name, p.Code, s[1], s[3], m[2])
		if n, _ := strconv.Atoi(s[3]); n == 0 {
			t.Errorf("%s left no item in doubt: every call it sent was answered 500, so the test proved nothing: %s", name, msg)
		}
		if want := strconv.Itoa(items); m[1] != want || m[2] != want+" refunded" {
			t.Errorf("%s ended before the batch was done: its tally counts %s items (%s), want %s (%[4]s refunded): %s", name, m[1], m[2], want, msg)
		}
		if p.Code != ExitOK {
			t.Errorf("%s exited %d, want 0: every item of the batch is refunded: %s", name, p.Code, msg)
		}
		if strings.Contains(msg, "not done") {
			t.Errorf("%s: a stale hint after the batch is done: %s", name, msg)
		}
	}
	r.checkExactlyOnce()
}
