package cli

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund/checkpoint/natsjs"
	"github.com/refundkit/refundkit/refund/checkpoint/natsjs/natstest"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// These tests run real `refund --journal nats://...` processes (this test
// binary re-executed, see TestMain) over a NATS JetStream checkpoint on a
// real nats-server of their own and the crash rig's simulator; they kill
// and pause the workers and the server, and check at the simulator and in
// the checkpoint's export that every item was refunded exactly once.

// natsLease is the workers' lease (the queue's ack-wait): short, so that a
// dead or paused worker's items pass to another within the test.
const natsLease = 2 * time.Second

type natsRig struct {
	*crashRig
	srv *natstest.Server
	url string

	readerOnce sync.Once
	reader     *natsjs.Checkpoint // opened on first use, once a worker made the checkpoint
}

func newNATSRig(t *testing.T, items int, faults stripesim.Faults) *natsRig {
	t.Helper()
	srv, err := natstest.Start(natstest.Options{SyncAlways: true})
	if err != nil {
		t.Fatalf("the NATS tests need nats-server (make test installs it): %v", err)
	}
	t.Cleanup(func() { srv.Stop() })
	return &natsRig{crashRig: newCrashRig(t, items, faults), srv: srv, url: srv.URL("crash") + "?monitor=" + srv.MonitorURL()}
}

func (r *natsRig) start(worker string, env []string, args ...string) *crashrig.Proc {
	r.t.Helper()
	in, err := os.Open(r.plan)
	if err != nil {
		r.t.Fatal(err)
	}
	defer in.Close()
	lease := natsLease
	if r.lease > 0 {
		lease = r.lease
	}
	p, err := crashrig.Start(crashrig.Cmd{
		Bin:   r.bin,
		Args:  append([]string{"--journal", r.url, "--lease", lease.String(), "--worker", worker, "--rate", "0"}, args...),
		Stdin: in,
		Env:   crashrig.Env(scriptKey, r.sim.URL(), env...),
	})
	if err != nil {
		r.t.Fatal(err)
	}
	return p
}

// open opens the checkpoint read-only, for the test's own reads.
func (r *natsRig) open() *natsjs.Checkpoint {
	r.t.Helper()
	cp, err := natsjs.Open(context.Background(), r.url, natsjs.Options{}, true)
	if err != nil {
		r.t.Fatal(err)
	}
	return cp
}

// holder is the worker the checkpoint says claimed item last, and the
// claim's generation; "" when the checkpoint cannot be read. Not before a
// worker made the checkpoint: a reader opened earlier finds it empty.
func (r *natsRig) holder(item string) (string, int64) {
	r.readerOnce.Do(func() {
		cp, err := natsjs.Open(context.Background(), r.url, natsjs.Options{}, true)
		if err == nil {
			r.reader = cp
			r.t.Cleanup(func() { cp.Close() })
		}
	})
	if r.reader == nil {
		return "", 0
	}
	info, ok, err := r.reader.Inspect(context.Background(), crashBatch, item)
	if err != nil || !ok {
		return "", 0
	}
	return info.Worker, info.Gen
}

// export writes the checkpoint's records to a journal file through its own
// Export, as audit reads them.
func (r *natsRig) export() string {
	r.t.Helper()
	cp := r.open()
	defer cp.Close()
	path := filepath.Join(r.dir, fmt.Sprintf("export-%d.jsonl", time.Now().UnixNano()))
	f, err := os.Create(path)
	if err != nil {
		r.t.Fatal(err)
	}
	defer f.Close()
	if _, _, err := cp.Export(context.Background(), f, []string{crashBatch}); err != nil {
		r.t.Fatal(err)
	}
	return path
}

// checkExactlyOnce: at the simulator each planned charge has exactly one
// refund and every key was reserved once; the export holds a refunded
// record of each and an intent before every call; audit of the checkpoint
// itself, against the plan it stores, is clean.
func (r *natsRig) checkExactlyOnce() {
	r.t.Helper()
	path := r.export()
	r.sim.CheckOnce(r.t, crashBatch, r.want, path)
	r.sim.CheckIntents(r.t, crashBatch, path)
	for item, rs := range r.sim.BatchRefunds(crashBatch) {
		if len(rs) != 1 {
			r.t.Errorf("item %s: %d refunds at the simulator, want 1", item, len(rs))
		}
	}
	seen := map[string]bool{}
	for _, k := range r.sim.Keys() {
		if seen[k] {
			r.t.Errorf("key %s reserved twice at the simulator", k)
		}
		seen[k] = true
	}
	audit := exec.Command("audit", r.url)
	out, err := audit.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "no findings") {
		r.t.Errorf("audit %s: %v: %s", r.url, err, out)
	}
}

// TestNATSFourWorkersKilledAtRandom: four workers share a batch on one
// queue; some are killed (SIGKILL) with a refund call in flight at the
// simulator, held there until the process is gone so that the refund is
// made with only its intent in the checkpoint, others at random moments,
// and each is restarted under a new name until it finds nothing left, with
// faults at the provider (429s, answers dropped after the refund is made,
// 504s). Every charge ends refunded exactly once.
func TestNATSFourWorkersKilledAtRandom(t *testing.T) {
	const items, workers = 200, 4
	const inFlightKills, timedKills = 8, 4
	r := newNATSRig(t, items, stripesim.Faults{LatencyJitter: 2 * time.Millisecond, RateLimitShare: 0.03, DropAfterCommitShare: 0.02, GatewayTimeoutShare: 0.03})
	live := &liveWorkers{m: map[string]*crashrig.Proc{}}
	rng := rand.New(rand.NewPCG(23, 24))
	var rngMu sync.Mutex
	draw := func(n int64) int64 {
		rngMu.Lock()
		defer rngMu.Unlock()
		return rng.Int64N(n)
	}
	var mark, left, struck atomic.Int64
	mark.Store(1 + draw(12))
	left.Store(inFlightKills)
	r.sim.OnCreate(func(n int64, key string) {
		at := mark.Load()
		if n < at || left.Load() <= 0 || !mark.CompareAndSwap(at, math.MaxInt64) {
			return
		}
		defer mark.Store(n + 4 + draw(16))
		_, item, _, ok := crashrig.ParseKey(key)
		if !ok {
			return
		}
		holder, _ := r.holder(item)
		p := live.get(holder)
		if p == nil || p.Cmd.Process.Signal(syscall.SIGKILL) != nil {
			return
		}
		left.Add(-1)
		struck.Add(1)
		<-p.Exited() // the refund is made once the sender is gone
	})
	done := make(chan struct{})
	var timed atomic.Int64
	go func() {
		for range timedKills {
			select {
			case <-time.After(time.Duration(300+draw(900)) * time.Millisecond):
			case <-done:
				return
			}
			if p := live.any(draw); p != nil && p.Cmd.Process.Signal(syscall.SIGKILL) == nil {
				timed.Add(1)
			}
		}
	}()
	hung := time.AfterFunc(240*time.Second, func() {
		t.Errorf("the batch is not done after 240s: killing every worker")
		live.killAll()
	})
	defer hung.Stop()
	var wg sync.WaitGroup
	var runs, lost atomic.Int64
	for s := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for gen := 0; ; gen++ {
				if gen > inFlightKills+timedKills+8 {
					t.Errorf("worker slot %d: not done after %d runs", s, gen)
					return
				}
				name := fmt.Sprintf("w%d.%d", s, gen)
				p := r.start(name, nil, "-j", "8")
				live.set(name, p)
				p.Wait()
				live.set(name, nil)
				runs.Add(1)
				switch {
				case p.Code == 0:
					return
				case p.Code == -int(syscall.SIGKILL):
				case p.Code == ExitFailed:
					// Items it left in doubt (a 504, a killed worker's
					// item it could not yet settle): the next run looks
					// them up.
				case p.Code == ExitJournal && strings.Contains(p.Stderr.String(), "lost"):
					lost.Add(1)
					t.Logf("%s lost a claim (renewal late under load): %s", name, lastLines(p.Stderr.String(), 3))
				default:
					t.Errorf("%s exited %d: %s", name, p.Code, &p.Stderr)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	if t.Failed() {
		return
	}
	if struck.Load() < inFlightKills/2 {
		t.Fatalf("only %d workers were killed with a call in flight: the test proved little", struck.Load())
	}
	r.checkExactlyOnce()
	t.Logf("%d runs: %d killed with a call in flight, %d at random moments, %d halted on a lost claim; %d keys for %d items",
		runs.Load(), struck.Load(), timed.Load(), lost.Load(), r.sim.Creates(), items)
}

// TestNATSWorkerPausedPastItsAckWaitSendsNothingMore: worker A is stopped
// (SIGSTOP) with its refund call held at the simulator; its ack-wait runs
// out, the server delivers the item to worker B, which claims it (its
// generation bumped), looks it up and finishes the batch. Continued, A gets
// its answer, cannot record it (its write is fenced by the revision B
// moved on) and halts naming the lost claim, having sent nothing more.
func TestNATSWorkerPausedPastItsAckWaitSendsNothingMore(t *testing.T) {
	const items = 12
	r := newNATSRig(t, items, stripesim.Faults{})
	held := make(chan string, 1)
	hold := crashrig.NewHold(1, 1)
	r.sim.OnCreate(func(n int64, key string) {
		if n == 1 {
			_, item, _, _ := crashrig.ParseKey(key)
			held <- item
		}
		hold.Park(n, key)
	})
	var freed sync.Once
	free := func() { freed.Do(hold.Free) }
	t.Cleanup(free)

	a := r.start("A", nil, "-j", "1")
	go a.Wait()
	t.Cleanup(func() { a.Cmd.Process.Signal(syscall.SIGCONT); a.Cmd.Process.Kill() })
	var item string
	select {
	case item = <-held:
	case <-a.Exited():
		t.Fatalf("A exited %d before its call was held: %s", a.Code, &a.Stderr)
	}
	if err := a.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	_, genA := r.holder(item)
	creates := r.sim.Creates()

	b := r.start("B", nil, "-j", "4")
	go b.Wait()
	// B takes the item once A's ack-wait is out: wait for its claim.
	for {
		if w, gen := r.holder(item); w == "B" && gen > genA {
			break
		}
		select {
		case <-b.Exited():
			t.Fatalf("B exited %d before it claimed %s: %s", b.Code, item, &b.Stderr)
		case <-time.After(50 * time.Millisecond): // polling the checkpoint for B's claim
		}
	}
	free() // A's held call is made now, or B's look-up finds it
	waitExit(t, b, 120*time.Second)
	if b.Code != 0 {
		t.Fatalf("B exited %d: %s", b.Code, &b.Stderr)
	}
	sentByB := r.sim.Creates() - creates
	if err := a.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitExit(t, a, 60*time.Second)
	if a.Code != ExitJournal || !strings.Contains(a.Stderr.String(), "lost") {
		t.Errorf("A exited %d, want %d naming the lost claim: %s", a.Code, ExitJournal, &a.Stderr)
	}
	if n := r.sim.Creates() - creates - sentByB; n != 0 {
		t.Errorf("A sent %d refund calls after it was continued, want 0", n)
	}
	r.checkExactlyOnce()
}

// TestNATSServerKilledMidBatch: the NATS server is killed (SIGKILL)
// mid-batch with two workers on it, then restarted on the same store. The
// workers halt (nothing sent after a write that could not be stored) or
// ride out the restart; run again until done, every charge has exactly one
// refund and the records acknowledged before the kill are all there.
func TestNATSServerKilledMidBatch(t *testing.T) {
	const items = 120
	r := newNATSRig(t, items, stripesim.Faults{LatencyJitter: 2 * time.Millisecond})
	var killed atomic.Bool
	restarted := make(chan struct{})
	r.sim.OnCreate(func(n int64, key string) {
		if n == 40 && killed.CompareAndSwap(false, true) {
			go func() {
				r.srv.Kill()
				if err := r.srv.Restart(); err != nil {
					t.Errorf("restart nats-server: %v", err)
				}
				close(restarted)
			}()
		}
	})
	var wg sync.WaitGroup
	for s := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for gen := 0; gen < 10; gen++ {
				p := r.start(fmt.Sprintf("w%d.%d", s, gen), nil, "-j", "4")
				go p.Wait()
				waitExit(t, p, 120*time.Second)
				if p.Code == 0 && killed.Load() {
					<-restarted
					return
				}
				if p.Code != 0 && p.Code != ExitJournal && p.Code != ExitFailed {
					t.Errorf("worker exited %d: %s", p.Code, &p.Stderr)
					return
				}
				<-restartedOrNot(restarted, killed.Load())
			}
			t.Errorf("worker slot %d not done after 10 runs", s)
		}()
	}
	wg.Wait()
	if !killed.Load() {
		t.Fatal("the server was never killed: the test proved nothing")
	}
	r.checkExactlyOnce()
}

// restartedOrNot waits for the restart once the server was killed.
func restartedOrNot(restarted chan struct{}, killed bool) <-chan struct{} {
	if killed {
		return restarted
	}
	c := make(chan struct{})
	close(c)
	return c
}
