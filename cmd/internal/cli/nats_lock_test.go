package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// TestNATSWorkerKilledHoldingAPaymentLock: two items per charge (partial
// refunds). Worker A (-j 1) is killed with its first item's call in flight,
// holding its charge's lock; worker B (-j 1) is delivered the other item of
// that charge while A's message is still out, so its only slot waits on
// the dead worker's lock. B ends A's claim once the lock's beat stopped,
// finishes the batch (A's item looked up, not sent again) and every item
// has exactly one refund of its planned amount.
func TestNATSWorkerKilledHoldingAPaymentLock(t *testing.T) {
	const charges = 4
	r := newNATSRig(t, charges, stripesim.Faults{})
	var b strings.Builder
	r.want = nil
	for c := 1; c <= charges; c++ {
		for half := 1; half <= 2; half++ {
			w := crashrig.Want{Item: fmt.Sprintf("i%d", 2*c-2+half), Charge: fmt.Sprintf("ch_sim%07d", c), Amount: 50}
			fmt.Fprintf(&b, `{"batch":%q,"item":%q,"charge":%q,"amount":50,"currency":"usd"}`+"\n", crashBatch, w.Item, w.Charge)
			r.want = append(r.want, w)
		}
	}
	r.plan = filepath.Join(r.dir, "plan-pairs.jsonl")
	if err := os.WriteFile(r.plan, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}

	a := r.start("A", nil, "-j", "1")
	go a.Wait()
	t.Cleanup(func() { a.Cmd.Process.Kill() })
	killed := make(chan string, 1)
	r.sim.OnCreate(func(n int64, key string) {
		if n != 1 {
			return
		}
		_, item, _, _ := crashrig.ParseKey(key)
		a.Cmd.Process.Signal(syscall.SIGKILL)
		<-a.Exited() // the refund is made once its sender is gone
		killed <- item
	})
	var first string
	select {
	case first = <-killed:
	case <-time.After(60 * time.Second): // a guard: A's first call comes at once
		t.Fatalf("A made no call (exit %d): %s", a.Code, &a.Stderr)
	}
	r.sim.OnCreate(nil)
	if first != "i1" {
		t.Fatalf("A's first call was for %s, want i1 (the queue's order)", first)
	}

	// B's slot is given i2 (i1's message is still A's until its ack-wait
	// runs out), whose charge's lock A held.
	for gen := 0; ; gen++ {
		if gen > 4 {
			t.Fatalf("B not done after %d runs", gen)
		}
		bw := r.start(fmt.Sprintf("B%d", gen), nil, "-j", "1")
		go bw.Wait()
		waitExit(t, bw, 120*time.Second)
		if bw.Code == 0 {
			if gen == 0 && !strings.Contains(bw.Stderr.String(), "was not renewed") {
				t.Errorf("B did not say it ended the dead worker's claim: %s", &bw.Stderr)
			}
			break
		}
		if bw.Code != ExitFailed {
			t.Fatalf("B%d exited %d: %s", gen, bw.Code, &bw.Stderr)
		}
	}
	r.checkExactlyOnce()
}
