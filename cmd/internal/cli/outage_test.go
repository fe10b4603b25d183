package cli

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund/checkpoint/postgres/pgtest"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// A checkpoint outage shorter than the lease costs nothing: the workers
// retry what the outage failed (fenced as ever) until the claims' leases
// would run out by their own clocks, the checkpoint answers again before,
// and every worker goes on and ends with exit 0. These tests stop the
// checkpoint's server with refund calls held at the simulator, answer the
// calls while it is down (so their outcomes must wait for it), and start
// it again on its store.

// outageLease is generous: a busy machine's slow restart stays well
// inside it.
const outageLease = 10 * time.Second

// outageWorkers runs three workers of -j 4 on the rig's plan (start names
// the checkpoint), parks three refund calls from the 30th on, calls down
// while they are parked, frees them, calls up, and checks that every
// worker ended with exit 0, none having halted, and that one of them said
// it rode the outage out (say).
func outageWorkers(t *testing.T, r *crashRig, start func(worker string) *crashrig.Proc, down, up func() error, say string) {
	t.Helper()
	hold := crashrig.NewHold(30, 3)
	t.Cleanup(hold.Free)
	r.sim.OnCreate(hold.Park)
	var ws []*crashrig.Proc
	for i := range 3 {
		p := start(fmt.Sprint("w", i))
		go p.Wait()
		ws = append(ws, p)
	}
	select {
	case <-hold.Held():
	case <-ws[0].Exited():
		t.Fatalf("a worker exited %d before the calls were held: %s", ws[0].Code, &ws[0].Stderr)
	case <-time.After(120 * time.Second):
		t.Fatal("the 30th call never came")
	}
	creates := r.sim.Creates()
	began := time.Now()
	if err := down(); err != nil {
		t.Fatal(err)
	}
	hold.Free() // answered while the checkpoint is down: the outcomes wait for it
	if err := up(); err != nil {
		t.Fatal(err)
	}
	outage := time.Since(began)
	if outage >= outageLease/2 {
		t.Fatalf("the outage lasted %v, not well under the lease (%v): the test proves nothing", outage, outageLease)
	}
	rode := false
	for i, p := range ws {
		waitExit(t, p, 180*time.Second)
		msg := p.Stderr.String()
		if p.Code != 0 || strings.Contains(msg, "lost") {
			t.Errorf("worker %d exited %d after an outage of %v inside a lease of %v, want 0 and no claim lost: %s", i, p.Code, outage, outageLease, lastLines(msg, 6))
		}
		rode = rode || strings.Contains(msg, say)
	}
	if !rode {
		t.Errorf("no worker says %q: did any meet the outage?", say)
	}
	t.Logf("outage of %v with %d calls made before it, %d in all", outage, creates, r.sim.Creates())
}

// TestNATSServerDownShorterThanTheLease: the single nats-server is killed
// (SIGKILL) or stopped (SIGTERM) mid-batch and started again on its store
// at once.
func TestNATSServerDownShorterThanTheLease(t *testing.T) {
	for _, mode := range []string{"kill", "term"} {
		t.Run(mode, func(t *testing.T) {
			r := newNATSRig(t, 90, stripesim.Faults{LatencyJitter: time.Millisecond})
			r.lease = outageLease
			down := r.srv.Kill
			if mode == "term" {
				down = r.srv.Shutdown
			}
			outageWorkers(t, r.crashRig, func(w string) *crashrig.Proc { return r.start(w, nil, "-j", "4") },
				down, r.srv.Restart, "servers answer again")
			r.checkExactlyOnce()
		})
	}
}

// TestPGServerRestartedShorterThanTheLease: the PostgreSQL server is
// stopped (fast shutdown: its connections are dropped, open transactions
// rolled back) mid-batch and started again at once.
func TestPGServerRestartedShorterThanTheLease(t *testing.T) {
	srv, err := pgtest.Start(pgtest.Options{})
	if err != nil {
		t.Fatalf("a PostgreSQL server of its own (it is restarted): %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Error(err)
		}
	})
	_, dbURL := newPGDB(t, srv)
	r := newPGRigAt(t, dbURL, 90, stripesim.Faults{LatencyJitter: time.Millisecond})
	r.lease = outageLease
	outageWorkers(t, r.crashRig, func(w string) *crashrig.Proc { return r.start(w, "-j", "4") },
		srv.Down, srv.Up, "answers again")
	r.checkExactlyOnce()
}
