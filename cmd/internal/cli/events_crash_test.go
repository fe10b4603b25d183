package cli

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund/sim"
	"github.com/refundkit/refundkit/refund/sim/paypalsim"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// eventsKills is one provider's side of checkEventsSurviveKills.
type eventsKills struct {
	name     string    // the provider, in messages
	r        *crashRig // its plan, simulator and refund's environment
	receiver []string  // webhook's flags, but --listen
	refund   []string  // refund's flags, but the journal, --rate and the plan
	events   string    // where the receiver keeps the events
	counts   func() sim.EventCounts
	flush    func(context.Context) error
	untold   func() int64 // pending refunds whose end no receiver accepted yet
}

// TestStripeEventsReceiverAndRefundKilledAtRandom: Stripe refunds that go
// pending, their events sent to a receiver that is killed with -9 again
// and again while Stripe retries (some twice, some out of order, some
// forged, the secret rolled mid-batch), and refund killed with -9 with a
// call in flight. Once every event is delivered, one more refund over the
// kept events settles what is still pending with no request to Stripe;
// every item has exactly one refund and the audit is clean.
func TestStripeEventsReceiverAndRefundKilledAtRandom(t *testing.T) {
	const items = 40
	const oldSecret, newSecret = "whsec_crash_old_0123456789", "whsec_crash_new_9876543210"
	addr := freeAddr(t)
	r := newCrashRigWith(t, items, stripesim.Config{
		Faults: stripesim.Faults{StripePendingShare: 1, StripePendingFor: 50 * time.Millisecond, LatencyJitter: time.Millisecond,
			StripeEventsDuplicateShare: 0.3, StripeEventsReorderShare: 0.3, StripeEventsReorderDelay: 20 * time.Millisecond,
			StripeEventsForgedShare: 0.2},
		Events: stripesim.EventsConfig{URL: "http://" + addr + "/stripe/events", Secrets: []string{oldSecret, newSecret},
			RollAfter: 25, RollOverlap: 3, Backoff: 5 * time.Millisecond, MaxBackoff: 40 * time.Millisecond},
	})
	r.env = []string{"STRIPE_WEBHOOK_SECRET=" + newSecret + "," + oldSecret}
	events := filepath.Join(r.dir, "events.jsonl")
	checkEventsSurviveKills(t, addr, items, eventsKills{
		name: "Stripe", r: r, receiver: []string{"--stripe", events}, events: events,
		counts: func() sim.EventCounts { return r.sim.EventStats().EventCounts },
		flush:  func(ctx context.Context) error { _, err := r.sim.FlushEvents(ctx); return err },
		untold: func() int64 { return r.sim.EventStats().PendingUntold },
	})
}

// TestPayPalEventsReceiverAndRefundKilledAtRandom: the same with PayPal:
// refunds PENDING, their signed events (some twice, some out of order,
// some forged, the signing certificate rolled mid-batch) sent to a
// receiver killed with -9 again and again, refund killed with a call in
// flight. PayPal's refunds stay PENDING longer than a run lasts, so that
// the last run leaves some for the events to settle.
func TestPayPalEventsReceiverAndRefundKilledAtRandom(t *testing.T) {
	const items = 30
	const webhookID = "WH-CRASH-PAYPAL-1"
	addr := freeAddr(t)
	r := newCrashRigWith(t, 0, stripesim.Config{
		Faults: stripesim.Faults{PayPalPendingShare: 1, PayPalPendingFor: 3 * time.Second, LatencyJitter: time.Millisecond},
		PayPal: paypalsim.Config{
			Captures: paypalsim.GenerateCaptures(items, 3),
			Events: paypalsim.EventsConfig{URL: "http://" + addr + "/paypal/events", WebhookID: webhookID, RollAfter: 20,
				Backoff: 5 * time.Millisecond, MaxBackoff: 40 * time.Millisecond, DuplicateShare: 0.3, ReorderShare: 0.3, ForgedShare: 0.2},
		},
	})
	root, _, _, ok := r.sim.PayPal().EventsCerts()
	if !ok {
		t.Fatal("the simulator serves no PayPal certificates")
	}
	rootFile := filepath.Join(r.dir, "root.pem")
	var plan strings.Builder
	for i := 1; i <= items; i++ {
		w := crashrig.Want{Item: fmt.Sprintf("i%d", i), Capture: fmt.Sprintf("CAPSIM%011d", i)}
		fmt.Fprintf(&plan, `{"batch":%q,"item":%q,"capture":%q}`+"\n", crashBatch, w.Item, w.Capture)
		r.want = append(r.want, w)
	}
	for f, b := range map[string][]byte{rootFile: root, r.plan: []byte(plan.String())} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r.env = []string{"PAYPAL_CLIENT_ID=crash_pp_id", "PAYPAL_CLIENT_SECRET=crash_pp_secret", "PAYPAL_API_BASE=" + r.sim.URL(),
		"PAYPAL_WEBHOOK_ID=" + webhookID, "PAYPAL_CERT_ROOT_FILE=" + rootFile}
	events := filepath.Join(r.dir, "events.jsonl")
	pp := r.sim.PayPal()
	checkEventsSurviveKills(t, addr, items, eventsKills{
		name: "PayPal", r: r, receiver: []string{"--paypal", events}, refund: []string{"--provider", "paypal"}, events: events,
		counts: func() sim.EventCounts { return pp.EventStats().EventCounts },
		flush:  func(ctx context.Context) error { _, err := pp.FlushEvents(ctx); return err },
		untold: func() int64 { return pp.EventStats().SettlesScheduled },
	})
	if st := pp.EventStats(); st.CertRolls == 0 {
		t.Errorf("events %+v: want the signing certificate rolled mid-batch", st)
	}
}

// freeAddr is a loopback address free a moment ago, where a receiver
// listens run after run.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// checkEventsSurviveKills runs k's batch, every refund pending, its
// events sent to a receiver at addr that is killed with -9 again and
// again, and refund killed with -9 with a call in flight; once every
// event is delivered, one more refund over the kept events settles what
// is still pending with no request to the provider; every item has
// exactly one refund and the audit is clean.
func checkEventsSurviveKills(t *testing.T, addr string, items int, k eventsKills) {
	t.Helper()
	const refundKills, receiverKills = 8, 12
	r := k.r
	webhookBin, err := exec.LookPath("webhook")
	if err != nil {
		t.Fatal(err)
	}
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
			Args: append([]string{"--listen", addr}, k.receiver...), Env: crashrig.Env(scriptKey, "", r.env...)})
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
			target := k.counts().Delivered + 1 + draw.Int64N(6)
			for k.counts().Delivered < target {
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
		p, stderr := r.start(path, append([]string{"-j", "4"}, k.refund...)...)
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
	// the provider settles the refunds and sends their events.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	flushed := make(chan error, 1)
	go func() { flushed <- k.flush(ctx) }()
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
		t.Fatalf("events not all delivered: %v (%+v)", err, k.counts())
	}
	ev := k.counts()
	if ev.ForgedAccepted != 0 || k.untold() != 0 || ev.Forged == 0 || ev.Duplicates == 0 {
		t.Fatalf("events %+v: want forged ones refused, duplicates sent, every pending refund's end told", ev)
	}
	last.Cmd.Process.Signal(syscall.SIGINT)
	<-last.Exited()
	if last.Code != 0 {
		t.Fatalf("receiver stopped with SIGINT exited %d: %s", last.Code, last.Stderr.String())
	}

	// The rerun over the kept events: nothing is asked of the provider.
	before := r.sim.Stats().Requests
	p, stderr := r.start(path, append([]string{"--notifications", k.events}, k.refund...)...)
	p.Wait()
	if p.Code != 0 {
		t.Fatalf("rerun with the events exited %d: %s", p.Code, stderr)
	}
	after := r.sim.Stats().Requests
	for ep, n := range after {
		if n != before[ep] {
			t.Errorf("the rerun asked %s %s %d times: want no request", k.name, ep, n-before[ep])
		}
	}
	if got := strings.Count(p.Stdout.String(), `"status":"pending"`); got != 0 {
		t.Errorf("%d items still pending after the rerun: %s", got, stderr)
	}
	if !regexp.MustCompile(`; [1-9][0-9]* refunds? settled by ` + k.name + `'s events, with no request`).MatchString(stderr.String()) {
		t.Errorf("the rerun settled nothing from the events (every refund ended before it): %s", stderr)
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
