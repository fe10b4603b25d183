package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/refundkit/refundkit/refund/checkpoint/postgres"
	"github.com/refundkit/refundkit/refund/checkpoint/postgres/pgtest"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// These tests run many real `refund --journal postgres://...` processes
// (this test binary re-executed, see TestMain) over one PostgreSQL
// checkpoint and the crash rig's simulator, kill, pause and cut them off
// from the database, and check at the simulator and in the checkpoint that
// every item was refunded exactly once.

// pgLease is the workers' lease: short, so that a dead or paused worker's
// items pass to another within the test.
const pgLease = 2 * time.Second

// pgRig is the crash rig with a PostgreSQL checkpoint in place of the
// journal file, and a connection of the test's own to read it.
type pgRig struct {
	*crashRig
	url string
	db  *pgxpool.Pool
}

// newPGRig makes a crash rig of items whose checkpoint is a fresh database
// on the package's server.
func newPGRig(t *testing.T, items int, faults stripesim.Faults) *pgRig {
	t.Helper()
	_, dbURL := newPGDB(t, pgServer(t))
	return newPGRigAt(t, dbURL, items, faults)
}

// newPGRigAt makes a crash rig of items whose checkpoint is the database
// at url.
func newPGRigAt(t *testing.T, dbURL string, items int, faults stripesim.Faults) *pgRig {
	t.Helper()
	db, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close) // before the database is dropped
	return &pgRig{crashRig: newCrashRig(t, items, faults), url: dbURL, db: db}
}

// start launches a worker named worker on the plan, fed on stdin, with
// pgLease; it does not wait.
func (r *pgRig) start(worker string, args ...string) *crashrig.Proc {
	return r.startPlan(r.plan, worker, args...)
}

func (r *pgRig) startPlan(plan, worker string, args ...string) *crashrig.Proc {
	r.t.Helper()
	return startWorker(r.t, r.crashRig, r.url, plan, worker, nil, args...)
}

// startWorker launches `refund --journal checkpoint` named worker, with
// plan on stdin and more in its environment.
func startWorker(t *testing.T, r *crashRig, checkpoint, plan, worker string, more []string, args ...string) *crashrig.Proc {
	t.Helper()
	in, err := os.Open(plan)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close() // the child has its own copy
	lease := pgLease
	if r.lease > 0 {
		lease = r.lease
	}
	p, err := crashrig.Start(crashrig.Cmd{
		Bin:   r.bin,
		Args:  append([]string{"--journal", checkpoint, "--lease", lease.String(), "--worker", worker, "--rate", "0"}, args...),
		Stdin: in,
		Env:   crashrig.Env(scriptKey, r.sim.URL(), more...),
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitExit waits for p, started with `go p.Wait()`, for at most d; a run
// still going then is killed and fails the test.
func waitExit(t *testing.T, p *crashrig.Proc, d time.Duration) {
	t.Helper()
	select {
	case <-p.Exited():
	case <-time.After(d):
		p.Cmd.Process.Kill()
		<-p.Exited()
		t.Fatalf("%s still running after %v (killed): %s", p.Cmd.Args, d, &p.Stderr)
	}
}

// claim is who holds an item's claim in the checkpoint, under which
// generation, and the item's status.
func (r *pgRig) claim(item string) (holder string, gen int64, status string) {
	r.t.Helper()
	var h *string
	err := r.db.QueryRow(context.Background(), `SELECT claimed_by, claim_gen, status FROM refundkit.items WHERE batch = $1 AND item = $2`,
		crashBatch, item).Scan(&h, &gen, &status)
	if err != nil {
		r.t.Fatalf("claim of %s: %v", item, err)
	}
	if h != nil {
		holder = *h
	}
	return holder, gen, status
}

// records counts the checkpoint's records.
func (r *pgRig) records() int {
	r.t.Helper()
	var n int
	if err := r.db.QueryRow(context.Background(), `SELECT count(*) FROM refundkit.records`).Scan(&n); err != nil {
		r.t.Fatal(err)
	}
	return n
}

// export writes the checkpoint's records to a journal file, through the
// checkpoint's own Export, for the rig's journal checks.
func (r *pgRig) export() string {
	r.t.Helper()
	ctx := context.Background()
	cp, err := postgres.Open(ctx, r.url, postgres.Options{}, true)
	if err != nil {
		r.t.Fatal(err)
	}
	defer cp.Close()
	path := filepath.Join(r.dir, fmt.Sprintf("export-%d.jsonl", time.Now().UnixNano()))
	f, err := os.Create(path)
	if err != nil {
		r.t.Fatal(err)
	}
	defer f.Close()
	if _, _, err := cp.Export(ctx, f, []string{crashBatch}); err != nil {
		r.t.Fatal(err)
	}
	return path
}

// checkExactlyOnce is the end of a batch: at the simulator each planned
// charge has exactly one refund (live or not, so no second one was ever
// made), every key was reserved once (a key sent again was replayed, not
// run again); the checkpoint holds a refunded record of each of those very
// refunds and an intent before every call, and every item is refunded and
// under no live claim.
func (r *pgRig) checkExactlyOnce() {
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
	// A worker that died or halted after its item's last write leaves its
	// claim behind, run out: harmless, since a settled item is never
	// claimed again. A live one after the batch is a worker still at work.
	var open, live int
	if err := r.db.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE status <> 'refunded'),
			count(*) FILTER (WHERE claimed_by IS NOT NULL AND lease_until > clock_timestamp())
		FROM refundkit.items WHERE batch = $1`, crashBatch).Scan(&open, &live); err != nil {
		r.t.Fatal(err)
	}
	if open != 0 || live != 0 {
		r.t.Errorf("after the batch: %d items not refunded and %d under a live claim in the checkpoint", open, live)
	}
}

// liveWorkers are the running workers by name, for the killers.
type liveWorkers struct {
	mu sync.Mutex
	m  map[string]*crashrig.Proc
}

func (l *liveWorkers) set(name string, p *crashrig.Proc) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p == nil {
		delete(l.m, name)
		return
	}
	l.m[name] = p
}

func (l *liveWorkers) get(name string) *crashrig.Proc {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m[name]
}

// any is one of the running workers, drawn with draw, or nil.
func (l *liveWorkers) any(draw func(int64) int64) *crashrig.Proc {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.m) == 0 {
		return nil
	}
	i := draw(int64(len(l.m)))
	for _, p := range l.m {
		if i == 0 {
			return p
		}
		i--
	}
	return nil
}

func (l *liveWorkers) killAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.m {
		p.Cmd.Process.Kill()
	}
}

// TestPGFourWorkersKilledAtRandom: four workers share a batch; some are
// killed (SIGKILL) with a refund call in flight at the simulator, held
// there until the process is gone so that the refund is made with only
// its intent in the checkpoint, others at random moments (loading the
// plan, claiming, waiting for others' leases), and each is restarted under
// a new name until it finds nothing left. Every charge ends refunded
// exactly once.
func TestPGFourWorkersKilledAtRandom(t *testing.T) {
	const items, workers = 240, 4
	const inFlightKills, timedKills = 10, 4
	r := newPGRig(t, items, stripesim.Faults{LatencyJitter: 2 * time.Millisecond, RateLimitShare: 0.03, DropAfterCommitShare: 0.02, GatewayTimeoutShare: 0.03})
	live := &liveWorkers{m: map[string]*crashrig.Proc{}}
	rng := rand.New(rand.NewPCG(13, 14))
	var rngMu sync.Mutex
	draw := func(n int64) int64 {
		rngMu.Lock()
		defer rngMu.Unlock()
		return rng.Int64N(n)
	}

	// Kill the sender of the call at the mark: the worker the checkpoint
	// says holds the item's claim (it asked, just before it sent).
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
		var holder string // in the simulator's goroutine: no t.Fatal
		if r.db.QueryRow(context.Background(), `SELECT coalesce(claimed_by, '') FROM refundkit.items WHERE batch = $1 AND item = $2`,
			crashBatch, item).Scan(&holder) != nil {
			return
		}
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
	// A hung batch fails here rather than at go test's timeout.
	hung := time.AfterFunc(150*time.Second, func() {
		t.Errorf("the batch is not done after 150s: killing every worker")
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
				if gen > inFlightKills+timedKills+5 {
					t.Errorf("worker slot %d: not done after %d runs", s, gen)
					return
				}
				name := fmt.Sprintf("w%d.%d", s, gen)
				p := r.start(name, "-j", "8")
				live.set(name, p)
				p.Wait()
				live.set(name, nil)
				runs.Add(1)
				switch {
				case p.Code == 0:
					return
				case p.Code == -int(syscall.SIGKILL):
				case p.Code == ExitJournal && strings.Contains(p.Stderr.String(), "lost"):
					// Not paused, but starved past its lease on a busy
					// machine: it halted before sending more, as it must.
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

// lastLines is the last n lines of s, for messages.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// TestPGWorkerPausedPastItsLeaseSendsNothingMore: a worker stopped
// (SIGSTOP) while it holds a claim loses it when its lease runs out;
// another worker takes the item and finishes the batch. Continued
// (SIGCONT), the first sends nothing more for the item and halts naming
// the lost claim. It is stopped
//   - with its refund call in flight (held at the simulator): continued,
//     it gets the answer and cannot record it;
//   - with its look-up in flight, just before its call: continued, it
//     cannot journal its intent, and so does not send;
//   - with a 429 for its call on the way (its intent journaled): continued,
//     it asks whether it still holds the claim before sending again, and
//     does not.
func TestPGWorkerPausedPastItsLeaseSendsNothingMore(t *testing.T) {
	for _, at := range []string{"call", "look-up", "retry"} {
		t.Run(at, func(t *testing.T) {
			const items = 12
			r := newPGRig(t, items, stripesim.Faults{})
			held := make(chan string, 1) // the item whose request is held
			free := make(chan struct{})
			var once sync.Once
			release := func() { once.Do(func() { close(free) }) }
			t.Cleanup(release) // before the simulator closes
			// A reaches the simulator through a proxy that counts its
			// refund calls (a call under a key already used is replayed,
			// and reserves nothing the simulator counts).
			px := newSimProxy(t, r.sim.URL())
			switch at {
			case "call":
				hold := crashrig.NewHold(1, 1)
				r.sim.OnCreate(func(n int64, key string) {
					if n == 1 {
						_, item, _, _ := crashrig.ParseKey(key)
						held <- item
					}
					hold.Park(n, key)
				})
				go func() { <-free; hold.Free() }()
			case "look-up":
				px.hold.Store(&proxyHold{method: http.MethodGet, held: held, free: free})
			case "retry":
				px.hold.Store(&proxyHold{method: http.MethodPost, refuse: true, held: held, free: free})
			}
			env := []string{"STRIPE_API_BASE=" + px.url}

			a := startWorker(t, r.crashRig, r.url, r.plan, "A", env, "-j", "1")
			go a.Wait()
			t.Cleanup(func() { a.Cmd.Process.Signal(syscall.SIGCONT); a.Cmd.Process.Kill() })
			var item string
			select {
			case item = <-held:
			case <-a.Exited():
				t.Fatalf("A exited %d before its %s was held: %s", a.Code, at, &a.Stderr)
			}
			holder, genA, _ := r.claim(item)
			if holder != "A" {
				t.Fatalf("item %s, whose %s A sent, is claimed by %q", item, at, holder)
			}
			if err := a.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			// kill returns before every thread has stopped: the answer
			// must not reach a thread still running.
			waitStopped(t, a.Cmd.Process.Pid)
			creates := r.sim.Creates()
			release() // answered; the answer waits in A's socket

			// B waits for A's lease to run out, takes the item and
			// finishes the batch while A sleeps.
			b := r.start("B", "-j", "4")
			go b.Wait()
			waitExit(t, b, 60*time.Second)
			if b.Code != 0 {
				t.Fatalf("B exited %d: %s", b.Code, &b.Stderr)
			}
			holder, genB, status := r.claim(item)
			if holder != "" || genB <= genA || status != "refunded" {
				t.Fatalf("after B: item %s claimed by %q, generation %d (A's was %d), status %s: B did not take it over", item, holder, genB, genA, status)
			}
			if at != "call" && r.sim.Creates() == creates {
				t.Fatal("B made no refund call: A's item was not left to it unsent")
			}

			creates = r.sim.Creates()
			sent := px.creates.Load()
			if sent != 1 && at != "look-up" || sent != 0 && at == "look-up" {
				t.Fatalf("A sent %d refund calls before it was stopped", sent)
			}
			before := r.records()
			if err := a.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			waitExit(t, a, 30*time.Second)
			if a.Code != ExitJournal {
				t.Fatalf("A exited %d after its claim was taken, want %d: %s", a.Code, ExitJournal, &a.Stderr)
			}
			if msg := a.Stderr.String(); !strings.Contains(msg, fmt.Sprintf("claim of item %q", item)) || !strings.Contains(msg, "lost") {
				t.Errorf("A's message does not name the lost claim of %s: %s", item, msg)
			}
			t.Logf("A continued: %s", lastLines(a.Stderr.String(), 3))
			if n := px.creates.Load(); n != sent {
				t.Errorf("A sent %d refund calls after it was continued, want none", n-sent)
			}
			if n := r.sim.Creates(); n != creates {
				t.Errorf("the simulator reserved %d keys after A was continued, want none: %q", n-creates, r.sim.KeysSince(creates))
			}
			if n := r.records(); n != before {
				t.Errorf("the checkpoint gained %d records after A was continued, want none", n-before)
			}
			var late int
			if err := r.db.QueryRow(context.Background(), `SELECT count(*) FROM refundkit.records WHERE worker = 'A' AND claim_gen <> $1`, genA).Scan(&late); err != nil {
				t.Fatal(err)
			}
			if late != 0 {
				t.Errorf("%d records of A under a claim generation not its own", late)
			}
			r.checkExactlyOnce()
		})
	}
}

// simProxy stands between one worker and the simulator: it counts the
// worker's refund calls, and can hold its first request of a kind.
type simProxy struct {
	url      string
	requests atomic.Int64 // all of them
	creates  atomic.Int64 // POST /v1/refunds
	hold     atomic.Pointer[proxyHold]
}

// proxyHold holds the first request of method to /v1/refunds (or GET of a
// charge, the look-up): it sends
// the request's item on held and waits for free, then forwards it, or
// (refuse) answers 429 itself, as the API does when it sheds load: a
// call that made nothing, to be sent again under its key.
type proxyHold struct {
	method string
	refuse bool
	held   chan<- string
	free   <-chan struct{}
	taken  atomic.Bool
}

func newSimProxy(t *testing.T, sim string) *simProxy {
	t.Helper()
	target, err := url.Parse(sim)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	px := &simProxy{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		px.requests.Add(1)
		isRefunds := strings.HasPrefix(req.URL.Path, "/v1/refunds")
		if req.Method == http.MethodPost && isRefunds {
			px.creates.Add(1)
		}
		// The look-up: a charge read with its refunds, or a listing.
		charge, isCharge := strings.CutPrefix(req.URL.Path, "/v1/charges/")
		h := px.hold.Load()
		if h == nil || req.Method != h.method || !isRefunds && !(isCharge && req.Method == http.MethodGet) || !h.taken.CompareAndSwap(false, true) {
			proxy.ServeHTTP(w, req)
			return
		}
		body, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
		if !isCharge {
			charge = req.URL.Query().Get("charge")
		}
		if form, err := url.ParseQuery(string(body)); err == nil && form.Has("charge") {
			charge = form.Get("charge")
		}
		n, err := strconv.Atoi(strings.TrimPrefix(charge, "ch_sim"))
		if err != nil {
			t.Errorf("the request held names no charge of the plan: %s %s", req.URL, body)
		}
		h.held <- fmt.Sprint("i", n) // ch_simN is item iN's charge
		<-h.free
		if !h.refuse {
			proxy.ServeHTTP(w, req)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Request-Id", "req_proxy429")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"error":{"type":"invalid_request_error","code":"rate_limit","message":"Too many requests hit the API too quickly."}}`)
	}))
	t.Cleanup(srv.Close)
	px.url = srv.URL
	return px
}

// TestPGDatabaseRestartedMidBatch: the database goes away with a refund
// call in flight. Down: every worker halts (exit 3) at its next write and
// sends nothing unrecorded; once it is back, a rerun finishes the batch.
// Restart (down and up again at once): workers halt or ride it out. Either
// way the batch ends with every charge refunded once.
func TestPGDatabaseRestartedMidBatch(t *testing.T) {
	srv, err := pgtest.Start(pgtest.Options{})
	if err != nil {
		t.Fatalf("a PostgreSQL server of its own (it is restarted): %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Error(err)
		}
	})
	for _, mode := range []string{"down", "restart"} {
		t.Run(mode, func(t *testing.T) {
			const items = 60
			_, dbURL := newPGDB(t, srv)
			r := newPGRigAt(t, dbURL, items, stripesim.Faults{LatencyJitter: time.Millisecond})
			hold := crashrig.NewHold(10, 1)
			t.Cleanup(hold.Free)
			r.sim.OnCreate(hold.Park)
			ws := []*crashrig.Proc{r.start("A", "-j", "4"), r.start("B", "-j", "4")}
			for _, p := range ws {
				go p.Wait()
			}
			select {
			case <-hold.Held():
			case <-time.After(60 * time.Second):
				t.Fatalf("no 10th call: %s\n%s", &ws[0].Stderr, &ws[1].Stderr)
			}
			if mode == "down" {
				if err := srv.Down(); err != nil {
					t.Fatal(err)
				}
			} else if err := srv.Restart(); err != nil {
				t.Fatal(err)
			}
			hold.Free() // the call is answered; its answer cannot be recorded while the database is down
			for i, p := range ws {
				waitExit(t, p, 60*time.Second)
				switch {
				case p.Code == ExitJournal:
					// It halted mid-batch, or (started late) could not
					// connect at all: either way the checkpoint says so.
					if msg := p.Stderr.String(); !strings.Contains(msg, "postgres checkpoint") && !strings.Contains(msg, "lost") {
						t.Errorf("worker %d halted without saying why: %s", i, msg)
					}
				case p.Code == 0 && mode == "restart":
				default:
					t.Fatalf("worker %d exited %d with the database %s, want %d: %s", i, p.Code, mode, ExitJournal, &p.Stderr)
				}
			}
			if mode == "down" {
				if err := srv.Up(); err != nil {
					t.Fatal(err)
				}
			}
			for round := 0; ; round++ {
				if round == 3 {
					t.Fatal("the batch is not done after 3 reruns")
				}
				ws := []*crashrig.Proc{r.start(fmt.Sprint("A", round), "-j", "4"), r.start(fmt.Sprint("B", round), "-j", "4")}
				ok := true
				for _, p := range ws {
					go p.Wait()
				}
				for _, p := range ws {
					waitExit(t, p, 60*time.Second)
					if p.Code != 0 {
						ok = false
						t.Logf("rerun exited %d: %s", p.Code, lastLines(p.Stderr.String(), 3))
					}
				}
				if ok {
					break
				}
			}
			r.checkExactlyOnce()
		})
	}
}

// waitStopped waits until every thread of pid is stopped (state T in
// /proc/PID/task/*/stat): a group stop completes after kill returns.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		if err != nil || len(tasks) == 0 {
			t.Fatalf("threads of %d: %v", pid, err)
		}
		all := true
		for _, task := range tasks {
			b, err := os.ReadFile(task)
			if err != nil {
				continue // a thread gone
			}
			// "pid (comm) S ...": the state follows the last ')'.
			i := bytes.LastIndexByte(b, ')')
			if i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
				all = false
				break
			}
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d did not stop within 10s", pid)
		}
		time.Sleep(time.Millisecond)
	}
}
