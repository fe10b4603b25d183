package cli

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// TestNATSBudgetSharedByLiveWorkers is TestPGBudgetSharedByLiveWorkers on
// the NATS checkpoint: three workers with no --share and no --rate on one
// checkpoint, the simulator enforcing Stripe's test-mode limits (25
// requests/s for the account). Each takes a third of 0.8; one is killed
// with SIGKILL mid-batch, and once its presence runs out the other two take
// half each. Together they stay under the account's limit: the simulator
// answers (almost) no request 429.
func TestNATSBudgetSharedByLiveWorkers(t *testing.T) {
	const items = 150
	const lease = 3 * time.Second
	r := newNATSRig(t, items, stripesim.Faults{RateLimits: stripesim.RateLimits{Mode: stripesim.RateLimitsTest}})
	ws := map[string]*crashrig.Proc{}
	t.Cleanup(func() {
		for _, p := range ws {
			p.Cmd.Process.Kill()
			<-p.Exited()
		}
	})
	for _, w := range []string{"A", "B", "C"} {
		in, err := os.Open(r.plan)
		if err != nil {
			t.Fatal(err)
		}
		p, err := crashrig.Start(crashrig.Cmd{
			Bin:   r.bin,
			Args:  []string{"--journal", r.url, "--lease", lease.String(), "--worker", w, "-j", "4", "-v"},
			Stdin: in,
			Env:   crashrig.Env(scriptKey, r.sim.URL()),
		})
		in.Close()
		if err != nil {
			t.Fatal(err)
		}
		go p.Wait()
		ws[w] = p
	}
	nc, err := nats.Connect(r.srv.URL(""))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// The account's live workers, as the presence stream holds them.
	accountWorkers := func() int {
		s, err := js.Stream(context.Background(), "refundkit_crash_workers")
		if err != nil {
			return -1
		}
		info, err := s.Info(context.Background(), jetstream.WithSubjectFilter("refundkit.crash.workers.account.>"))
		if err != nil {
			return -1
		}
		return len(info.State.Subjects)
	}
	await := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second) // a failure timeout
		for !cond() {
			for name, p := range ws {
				select {
				case <-p.Exited():
					t.Fatalf("waiting for %s: %s exited %d: %s", what, name, p.Code, &p.Stderr)
				default:
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("not within 90s: %s", what)
			}
			time.Sleep(20 * time.Millisecond) // polling the server and the simulator
		}
	}
	await("three workers of the account", func() bool { return accountWorkers() == 3 })
	await("30 refunds made", func() bool { return r.sim.Creates() >= 30 })
	atKill := r.sim.Stats()
	ws["C"].Cmd.Process.Kill()
	<-ws["C"].Exited()
	delete(ws, "C")
	await("C's presence gone", func() bool { return accountWorkers() == 2 })
	for _, w := range []string{"A", "B"} {
		waitExit(t, ws[w], 120*time.Second)
		msg := ws[w].Stderr.String()
		if ws[w].Code != ExitOK {
			t.Errorf("%s exited %d, want 0: %s", w, ws[w].Code, msg)
		}
		for _, n := range []int{3, 2} {
			if !strings.Contains(msg, fmt.Sprintf("pacing: the live workers of this account split --share workers=%d share=0.8", n)) {
				t.Errorf("%s never said it shared the account with %d workers: %s", w, n, lastLines(msg, 20))
			}
		}
	}
	st := r.sim.Stats()
	var requests int64
	for _, n := range st.Requests {
		requests += n
	}
	limited := st.RateLimitedReasons["global-rate"] + st.RateLimitedReasons["endpoint-rate"]
	t.Logf("%d requests, %d answered 429 (%v); %d before the kill", requests, limited, st.RateLimitedReasons, atKill.RateLimited)
	if limited*100 > 3*requests {
		t.Errorf("%d of %d requests answered 429 (%v): the workers together asked more than the account allows", limited, requests, st.RateLimitedReasons)
	}
	r.checkExactlyOnce()
}
