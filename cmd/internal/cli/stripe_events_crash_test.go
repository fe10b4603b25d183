package cli

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// TestStripeEventsReceiverAndRefundKilledAtRandom: Stripe refunds that go
// pending, their events sent to a receiver that is killed with -9 again
// and again while Stripe retries (some twice, some out of order, some
// forged, the secret rolled mid-batch), and refund killed with -9 with a
// call in flight. Once every event is delivered, one more refund over the
// kept events settles what is still pending with no request to Stripe;
// every item has exactly one refund and the audit is clean.
func TestStripeEventsReceiverAndRefundKilledAtRandom(t *testing.T) {
	const items, refundKills, receiverKills = 40, 8, 12
	const oldSecret, newSecret = "whsec_crash_old_0123456789", "whsec_crash_new_9876543210"
	webhookBin, err := exec.LookPath("webhook")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // the receiver listens here, run after run

	r := newCrashRigWith(t, items, stripesim.Config{
		Faults: stripesim.Faults{StripePendingShare: 1, StripePendingFor: 50 * time.Millisecond, LatencyJitter: time.Millisecond,
			StripeEventsDuplicateShare: 0.3, StripeEventsReorderShare: 0.3, StripeEventsReorderDelay: 20 * time.Millisecond,
			StripeEventsForgedShare: 0.2},
		Events: stripesim.EventsConfig{URL: "http://" + addr + "/stripe/events", Secrets: []string{oldSecret, newSecret},
			RollAfter: 25, RollOverlap: 3, Backoff: 5 * time.Millisecond, MaxBackoff: 40 * time.Millisecond},
	})
	events := filepath.Join(r.dir, "events.jsonl")
	secrets := "STRIPE_WEBHOOK_SECRET=" + newSecret + "," + oldSecret
	r.env = []string{secrets}
	rng := rand.New(rand.NewPCG(5, 8))

	// The receiver, killed with -9 after a random number of deliveries
	// until stop is closed; then run once more, to be stopped cleanly.
	stop := make(chan struct{})
	var recv struct {
		sync.Mutex
		killed int
		last   *crashrig.Proc
		fail   string
	}
	start := func() *crashrig.Proc {
		p, err := crashrig.Start(crashrig.Cmd{Bin: webhookBin, Dir: r.dir,
			Args: []string{"--listen", addr, "--stripe", events}, Env: crashrig.Env(scriptKey, "", secrets)})
		if err != nil {
			t.Error(err)
			return nil
		}
		go p.Wait()
		return p
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		draw := rand.New(rand.NewPCG(9, 4))
		for {
			p := start()
			if p == nil {
				return
			}
			recv.Lock()
			recv.last = p
			recv.Unlock()
			target := r.sim.EventStats().Delivered + 1 + draw.Int64N(6)
			for r.sim.EventStats().Delivered < target {
				select {
				case <-stop:
					return
				case <-p.Exited():
					recv.Lock()
					recv.fail = fmt.Sprintf("webhook exited %d by itself: %s", p.Code, p.Stderr.String())
					recv.Unlock()
					return
				case <-time.After(time.Millisecond): // look again: the sim has no hook on deliveries
				}
			}
			p.Cmd.Process.Signal(syscall.SIGKILL)
			<-p.Exited()
			recv.Lock()
			recv.killed++
			recv.Unlock()
		}
	}()

	path := filepath.Join(r.dir, "j.jsonl")
	kill := crashrig.NewStriker(syscall.SIGKILL)
	r.sim.OnCreate(kill.Hook)
	for round := 0; ; round++ {
		if round > refundKills+20 {
			t.Fatalf("not done after %d runs", round)
		}
		p, stderr := r.start(path, "-j", "4")
		if round < refundKills {
			kill.Arm(r.sim, p, rng, 6)
		}
		p.Wait()
		kill.Disarm()
		if p.Code == -int(syscall.SIGKILL) || p.Code == 0 && round < refundKills {
			continue
		}
		if p.Code != 0 {
			t.Fatalf("refund run %d exited %d: %s", round, p.Code, stderr)
		}
		break
	}
	// Keep killing the receiver until it was killed often enough, while
	// Stripe settles the refunds and sends their events.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	flushed := make(chan error, 1)
	go func() { _, err := r.sim.FlushEvents(ctx); flushed <- err }()
	for {
		recv.Lock()
		killed, fail := recv.killed, recv.fail
		recv.Unlock()
		if fail != "" {
			t.Fatal(fail)
		}
		if killed >= receiverKills {
			break
		}
		select {
		case err := <-flushed:
			flushed <- err // every event delivered before enough kills: kill no more
			killed = receiverKills
		case <-time.After(5 * time.Millisecond):
		}
		if killed >= receiverKills {
			break
		}
	}
	close(stop)
	wg.Wait()
	recv.Lock()
	last := recv.last
	recv.Unlock()
	if err := <-flushed; err != nil {
		t.Fatalf("events not all delivered: %v (%+v)", err, r.sim.EventStats())
	}
	ev := r.sim.EventStats()
	if ev.ForgedAccepted != 0 || ev.PendingUntold != 0 || ev.Forged == 0 || ev.Duplicates == 0 {
		t.Fatalf("events %+v: want forged ones refused, duplicates sent, every pending refund's end told", ev)
	}
	last.Cmd.Process.Signal(syscall.SIGINT)
	<-last.Exited()
	if last.Code != 0 {
		t.Fatalf("receiver stopped with SIGINT exited %d: %s", last.Code, last.Stderr.String())
	}

	// The rerun over the kept events: nothing is asked of Stripe.
	before := r.sim.Stats().Requests
	p, stderr := r.start(path, "--notifications", events)
	p.Wait()
	if p.Code != 0 {
		t.Fatalf("rerun with the events exited %d: %s", p.Code, stderr)
	}
	after := r.sim.Stats().Requests
	for ep, n := range after {
		if n != before[ep] {
			t.Errorf("the rerun asked Stripe %s %d times: want no request", ep, n-before[ep])
		}
	}
	if got := strings.Count(p.Stdout.String(), `"status":"pending"`); got != 0 {
		t.Errorf("%d items still pending after the rerun: %s", got, stderr)
	}
	r.checkExactlyOnce(path, items)
	r.checkIntentsCoverCalls(path)
	auditBin, err := exec.LookPath("audit")
	if err != nil {
		t.Fatal(err)
	}
	audit := exec.Command(auditBin, "--plan", r.plan, path)
	if out, err := audit.CombinedOutput(); err != nil {
		t.Fatalf("audit: %v: %s", err, out)
	}
	recv.Lock()
	t.Logf("receiver killed %d times, refund %d times with a call in flight; events %+v; rerun: %s", recv.killed, kill.Struck(), ev, lastLines(stderr.String(), 1))
	recv.Unlock()
}
