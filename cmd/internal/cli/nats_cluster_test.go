package cli

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund/checkpoint/natsjs/natstest"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// TestNATSClusterLeaderKilledMidBatch: three workers share a batch on a
// checkpoint of 3 replicas (`?replicas=3`) on a three-node JetStream
// cluster on loopback, whose nodes keep the server's default
// sync_interval (3 replicas need no sync_always). Once the simulator has
// made a third of the refunds, the node leading the checkpoint's
// key-value stream (its records) is killed -9, with that refund call in
// flight; the batch must go on with two nodes until two thirds of the
// refunds are made, when the node is restarted on its store and must catch
// up. A worker whose write meets the election (the stream does not answer
// until a new leader is elected) halts with exit 3, sending nothing more;
// it, or one that left items in doubt (exit 1), is restarted under a new
// name until each finds nothing left. Every charge ends refunded exactly
// once, and audit of the checkpoint is clean.
func TestNATSClusterLeaderKilledMidBatch(t *testing.T) {
	const items, workers = 150, 3
	c, err := natstest.StartCluster(natstest.ClusterOptions{})
	if err != nil {
		t.Fatalf("the NATS tests need nats-server (make test installs it): %v", err)
	}
	t.Cleanup(func() { c.Stop() })
	const name = "cluster"
	r := &natsRig{crashRig: newCrashRig(t, items, stripesim.Faults{LatencyJitter: 2 * time.Millisecond}), url: c.URL(name) + "?replicas=3"}
	records := "KV_refundkit_" + name // the checkpoint's bucket: every item's records

	killAt, restartAt := int64(items/3), int64(2*items/3)
	var killed atomic.Int64
	killed.Store(-1)
	restarted := make(chan error, 1)
	r.sim.OnCreate(func(n int64, key string) {
		switch n {
		case killAt:
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			lead, err := c.Leader(ctx, records)
			if err != nil {
				t.Errorf("the leader of %s: %v", records, err)
				return
			}
			if err := c.Nodes[lead].Kill(); err != nil {
				t.Errorf("kill node %s: %v", c.Nodes[lead].Name, err)
				return
			}
			killed.Store(int64(lead))
		case restartAt:
			if lead := killed.Load(); lead >= 0 {
				go func() { restarted <- c.Nodes[lead].Restart() }()
			}
		}
	})

	live := &liveWorkers{m: map[string]*crashrig.Proc{}}
	hung := time.AfterFunc(240*time.Second, func() {
		t.Errorf("the batch is not done after 240s: killing every worker")
		live.killAll()
	})
	defer hung.Stop()
	start := time.Now()
	var wg sync.WaitGroup
	var runs, halts, doubts atomic.Int64
	for s := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for gen := 0; ; gen++ {
				if gen > 20 {
					t.Errorf("worker slot %d: not done after %d runs", s, gen)
					return
				}
				name := fmt.Sprintf("w%d.%d", s, gen)
				p := r.start(name, nil, "-j", "4")
				live.set(name, p)
				p.Wait()
				live.set(name, nil)
				runs.Add(1)
				if strings.Contains(p.Stderr.String(), "not durable") {
					t.Errorf("%s refused the cluster's durability: %s", name, &p.Stderr)
					return
				}
				switch p.Code {
				case 0:
					return
				case ExitJournal:
					halts.Add(1)
					t.Logf("%s halted: %s", name, lastLines(p.Stderr.String(), 4))
				case ExitFailed:
					doubts.Add(1) // items left in doubt: the next run looks them up
				default:
					t.Errorf("%s exited %d: %s", name, p.Code, &p.Stderr)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if t.Failed() {
		return
	}
	lead := killed.Load()
	if lead < 0 {
		t.Fatal("no node was killed: the test proved nothing")
	}
	if err := <-restarted; err != nil {
		t.Fatalf("restart node %s: %v", c.Nodes[lead].Name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, stream := range []string{records, "refundkit_" + name + "_work"} {
		if err := c.AwaitCurrent(ctx, stream, int(lead)); err != nil {
			t.Errorf("the restarted node did not catch up: %v", err)
		}
	}
	r.checkExactlyOnce()
	t.Logf("node %s (leader of %s) killed -9 at refund %d, restarted at %d; %d worker runs (%d halted, %d left items in doubt); the batch took %s",
		c.Nodes[lead].Name, records, killAt, restartAt, runs.Load(), halts.Load(), doubts.Load(), elapsed.Round(time.Millisecond))
}
