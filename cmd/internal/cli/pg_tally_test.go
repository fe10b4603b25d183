package cli

// The exit of a worker on a shared checkpoint follows its batch's tally
// (issue 19, case 9), through the real binaries.

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// TestPGExitFollowsTheBatchTally: two workers share a batch and Stripe
// answers every refund call 500 after it made the refund. Each worker
// leaves the items it sent in doubt, and the other adopts them in the same
// run (its look-up finds their refunds). Both printed "30 items (30
// refunded), by all workers" and exited 1, with a hint that a rerun would
// look the items up. The exit follows the batch's tally: 0, with no rerun
// hint; and a worker with nothing left to claim waits while the other may
// still settle an item it left in doubt, so neither ends before the batch
// is done.
func TestPGExitFollowsTheBatchTally(t *testing.T) {
	const items = 30
	r := newPGRig(t, items, stripesim.Faults{ErrorAfterCommitShare: 1})

	// Each worker's first calls are held until both have sent one, so that
	// both work on the batch at once (a worker alone would leave its items
	// in doubt and end before the other started).
	var mu sync.Mutex
	senders := map[string]bool{}
	both := make(chan struct{})
	var bothOnce sync.Once
	t.Cleanup(func() { bothOnce.Do(func() { close(both) }) }) // before the simulator closes
	r.sim.OnCreate(func(_ int64, key string) {
		_, item, _, ok := crashrig.ParseKey(key)
		if !ok {
			return
		}
		var holder string // in the simulator's goroutine: no t.Fatal
		if r.db.QueryRow(context.Background(), `SELECT coalesce(claimed_by, '') FROM refundkit.items WHERE batch = $1 AND item = $2`,
			crashBatch, item).Scan(&holder) != nil {
			return
		}
		mu.Lock()
		senders[holder] = true
		if len(senders) >= 2 {
			bothOnce.Do(func() { close(both) })
		}
		mu.Unlock()
		<-both
	})

	// A lease longer than the rig's: a worker starved on a busy machine
	// must not look gone to the other, which would then end first.
	ws := map[string]*crashrig.Proc{"A": r.start("A", "-j", "2", "--lease", "10s"), "B": r.start("B", "-j", "2", "--lease", "10s")}
	for _, p := range ws {
		go p.Wait()
	}
	for _, p := range ws {
		waitExit(t, p, 120*time.Second)
	}

	checkExitsFollowTally(t, ws, items)
	r.checkExactlyOnce()
}

// checkExitsFollowTally: every worker of ws printed its summary and the
// batch's tally, all items refunded, left some items in doubt (or the
// test proved nothing), said they were settled since, and exited 0.
func checkExitsFollowTally(t *testing.T, ws map[string]*crashrig.Proc, items int) {
	t.Helper()
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
		if strings.Contains(msg, "a rerun looks them up") || strings.Contains(msg, "not done") {
			t.Errorf("%s: a stale hint after the batch is done: %s", name, msg)
		}
		if !strings.Contains(msg, "settled since") {
			t.Errorf("%s does not say that the items it left in doubt were settled since: %s", name, msg)
		}
	}
}
