package main

// The PostgreSQL rows: many `refund` workers share one checkpoint
// (`--journal postgres://...`), each claiming items under a lease, while
// workers die, stop, come and go, and the database itself goes down. The
// promise is the same as the file journal's: every item refunded exactly
// once, and no record the database held is lost.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund/postgres"
	"github.com/refundkit/refundkit/refund/postgres/pgtest"
	"github.com/refundkit/refundkit/refund/stripesim"
)

// pgCluster is the one PostgreSQL server of a matrix, started by the first
// PostgreSQL row with fsync on (a commit costs what it costs in
// production); each row's seed gets a fresh database on it.
type pgCluster struct {
	once sync.Once
	srv  *pgtest.Server
	err  error
}

func (c *pgCluster) server() (*pgtest.Server, error) {
	c.once.Do(func() { c.srv, c.err = pgtest.Start(pgtest.Options{Fsync: true}) })
	return c.srv, c.err
}

func (c *pgCluster) stop() {
	if c.srv != nil {
		c.srv.Stop()
	}
}

// Leases of the rows' workers: short, so a dead worker's items pass to
// another within seconds, yet many renewals (every third) long.
const (
	pgLease      = 3 * time.Second
	pgShortLease = 2 * time.Second // the SIGSTOP and database rows wait it out
)

// pgBatch is a plan worked by many refund processes on one database.
type pgBatch struct {
	r     *rig
	p     *plan
	srv   *pgtest.Server
	url   string
	pool  *pgxpool.Pool // the rig's own connections, for its checks
	lease time.Duration

	mu      sync.Mutex
	seq     int                  // workers started
	workers map[string]*pgWorker // by --worker name
}

// pgWorker is one refund process on the checkpoint.
type pgWorker struct {
	*proc
	name string
	done <-chan struct{} // closed once it exited and was checked
}

// newPGBatch makes a fresh database for the rig and a batch of n payments
// planned with partial refunds, so a second refund of a payment would
// succeed and nothing hides a duplicate.
func (r *rig) newPGBatch(n int, faults stripesim.Faults, batch string, lease time.Duration) *pgBatch {
	srv, err := r.m.pg.server()
	if err != nil {
		if errors.Is(err, pgtest.ErrNoServerBinary) {
			r.fatalf("setup: the PostgreSQL rows need a PostgreSQL server: apt-get install postgresql, or set REFUNDKIT_PG_BIN: %v", err)
		}
		r.fatalf("setup: start PostgreSQL: %v", err)
	}
	ctx := context.Background()
	name := fmt.Sprintf("chaos_%s_%d", strings.ReplaceAll(r.t.Name, "-", "_"), r.seed)
	url, err := srv.CreateDB(ctx, name)
	r.must(err)
	r.cleanup(func() { srv.DropDB(context.Background(), name) })
	// The schema, so the rig can read the tables before any worker has
	// run (readers make none).
	r.must(postgres.Migrate(ctx, url))
	pool, err := pgxpool.New(ctx, url)
	r.must(err)
	r.cleanup(pool.Close)
	b := &pgBatch{r: r, srv: srv, url: url, pool: pool, lease: lease, workers: map[string]*pgWorker{}}
	// Registered after the pool's: runs before it, so no worker outlives
	// the rig (a setup failure aborts a row with workers running).
	r.cleanup(b.killAll)
	b.p = r.newPartialBatch(n, faults, batch)
	return b
}

// start starts a worker on the checkpoint, named w1, w2... in claims.
func (b *pgBatch) start(extra ...string) *pgWorker {
	b.mu.Lock()
	b.seq++
	name := fmt.Sprintf("w%d", b.seq)
	b.mu.Unlock()
	args := append([]string{"--lease", b.lease.String(), "--worker", name}, extra...)
	pr := b.r.startRefund(b.url, b.p.Path, args...)
	w := &pgWorker{proc: pr, name: name}
	w.done = b.r.background(pr)
	b.mu.Lock()
	b.workers[name] = w
	b.mu.Unlock()
	return w
}

// running is the worker of that name if it has not exited.
func (b *pgBatch) running(name string) *pgWorker {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.workers[name]
	if w == nil {
		return nil
	}
	select {
	case <-w.Exited():
		return nil
	default:
		return w
	}
}

// live are the workers that have not exited, by name.
func (b *pgBatch) live() []*pgWorker {
	b.mu.Lock()
	names := make([]string, 0, len(b.workers))
	for name := range b.workers {
		names = append(names, name)
	}
	b.mu.Unlock()
	var out []*pgWorker
	for _, name := range names {
		if w := b.running(name); w != nil {
			out = append(out, w)
		}
	}
	return out
}

func (b *pgBatch) killAll() {
	for _, w := range b.live() {
		w.Cmd.Process.Signal(syscall.SIGCONT)
		w.Cmd.Process.Kill()
		<-w.done
	}
}

// holder is the worker whose claim of the item behind key is in the
// database now: the one that sent the call (it checks its claim before
// every request).
func (b *pgBatch) holder(key string) *pgWorker {
	batch, item, _, ok := parseKey(key)
	if !ok {
		return nil
	}
	var name *string
	if err := b.pool.QueryRow(context.Background(), `SELECT claimed_by FROM refundkit.items WHERE batch = $1 AND item = $2`, batch, item).Scan(&name); err != nil || name == nil {
		return nil
	}
	return b.running(*name)
}

// addLost counts records lost, from any goroutine.
func (t *tally) addLost(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.Lost += n
}

// pgSnapshot is every record the database holds, by sequence number.
type pgSnapshot map[int64]string

func (b *pgBatch) snapshot() (pgSnapshot, error) {
	rows, err := b.pool.Query(context.Background(), `SELECT seq, rec FROM refundkit.records`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	s := pgSnapshot{}
	for rows.Next() {
		var seq int64
		var rec string
		if err := rows.Scan(&seq, &rec); err != nil {
			return nil, err
		}
		s[seq] = rec
	}
	return s, rows.Err()
}

// checkKept adds to the tally the records of s the database no longer
// holds as they were. It may run on any goroutine.
func (b *pgBatch) checkKept(s pgSnapshot, what string) {
	now, err := b.snapshot()
	if err != nil {
		b.r.t.Errorf("%s: read the database's records: %v", what, err)
		return
	}
	lost := 0
	for seq, rec := range s {
		if now[seq] != rec {
			lost++
		}
	}
	if lost > 0 {
		b.r.t.addLost(lost)
		b.r.t.Errorf("%s: the database lost %d of the %d records it held before", what, lost, len(s))
	}
}

// crew keeps slots workers running: each that exits with one of again is
// replaced by a new one (once gate lets it: nil, or a function that waits
// until the database is up), until every slot's last worker exited 0.
// Any other exit is a problem, and ends its slot. It returns the exits by
// code.
func (b *pgBatch) crew(slots int, what string, gate func(), again ...int) map[int]int {
	exits := make(chan *pgWorker, slots)
	launch := func() {
		if gate != nil {
			gate()
		}
		w := b.start()
		go func() { <-w.done; exits <- w }()
	}
	for range slots {
		launch()
	}
	ends := map[int]int{}
	limit := 4*slots + 20*len(b.p.Items)/max(1, slots)
	for running, runs := slots, slots; running > 0; {
		w := <-exits
		running--
		if b.r.finished(w.proc, ends, what, again...) || !isOneOf(w.Code, again) {
			continue
		}
		if runs++; runs > limit {
			b.r.fatalf("%s: not done after %d workers", what, runs)
		}
		launch()
		running++
	}
	return ends
}

func isOneOf(code int, codes []int) bool {
	for _, c := range codes {
		if c == code {
			return true
		}
	}
	return false
}

// finish is the end of a PostgreSQL row: the database exported as the
// journal lines it holds, checked as a file journal is (exactly once at
// the simulator, an intent before every key, audit clean, of the export and
// of postgres:// itself); every refund
// at the simulator recorded as refunded; every item's status in the items
// table refunded.
func (b *pgBatch) finish(forPerson map[string]bool) {
	r := b.r
	path := r.path("export.jsonl")
	b.export(path)
	st, torn, err := journal.Load(path)
	r.must(err)
	if torn != nil {
		r.t.Errorf("the export of the database has a torn tail: %v", torn)
	}
	lost := 0
	for item, rs := range r.sim.LiveRefunds(b.p.Batch) {
		is, ok := st.Lookup(b.p.Batch, item)
		if !ok || ((is.Status != journal.StatusRefunded || is.Refund != rs[0].ID) && !forPerson[item]) {
			lost++
		}
	}
	if lost > 0 {
		r.t.addLost(lost)
		r.t.Errorf("%d refunds at the simulator have no refunded record in the database", lost)
	}
	// The record that settles an item ends its claim; a killed worker's
	// claims of items still open run out with their lease.
	var open int
	r.must(b.pool.QueryRow(context.Background(), `SELECT count(*) FROM refundkit.items WHERE batch = $1 AND status <> 'refunded'`, b.p.Batch).Scan(&open))
	if open > len(forPerson) {
		r.t.Errorf("the items table holds %d items not refunded at the end, want %d", open, len(forPerson))
	}
	r.checkOnceForPerson(b.p, forPerson, path)
	if len(forPerson) == 0 {
		r.audit(b.p, path)  // the export, as a file journal
		r.audit(b.p, b.url) // the checkpoint itself: audit postgres://...
	}
}

// export writes the database's records to path as a journal file holds
// them (postgres.Export).
func (b *pgBatch) export(path string) {
	ctx := context.Background()
	cp, err := postgres.Open(ctx, b.url, postgres.Options{}, true)
	b.r.must(err)
	defer cp.Close()
	f, err := os.Create(path)
	b.r.must(err)
	defer f.Close()
	_, _, err = cp.Export(ctx, f, []string{b.p.Batch})
	b.r.must(err)
	b.r.must(f.Close())
}

const whatPGKill9 = "Four `refund -j 8` workers share one PostgreSQL checkpoint (`--journal postgres://... --lease 3s`; the database has fsync on) and are killed with SIGKILL again and again, each killed one replaced by a new worker until every worker has exited 0. " +
	"Half the kills come from inside the simulator's create hook: the worker whose claim the database shows for the item being refunded is killed with its call in flight, and the simulator commits the refund after it is gone; the other half hit a random live worker at a random time. " +
	"The dead worker's items pass to the others once its lease runs out, and each is looked up before anything is sent. Before each kill the database's records are snapshotted and must all be there, unchanged, after; at the end the database, exported as journal lines, must account for every refund at the simulator."

func runPGKill9(r *rig, sz sizes) {
	b := r.newPGBatch(sz.PGKillItems, stripesim.Faults{LatencyJitter: time.Millisecond}, "pg-kill9", pgLease)
	var inFlight, timed atomic.Int64
	budget := int64(sz.PGKills)
	spent := func() bool { return inFlight.Load()+timed.Load() >= budget }
	gap := int64(max(2, len(b.p.Items)/(sz.PGKills/2+1)))
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(r.seed, 9))
	mark := 1 + rng.Int64N(gap)
	var snaps []pgSnapshot
	r.sim.OnCreate(func(n int64, key string) {
		mu.Lock()
		defer mu.Unlock()
		if n < mark || spent() || inFlight.Load() >= budget/2 {
			return
		}
		mark = n + 1 + rng.Int64N(gap)
		w := b.holder(key)
		if w == nil {
			return
		}
		if snap, err := b.snapshot(); err == nil {
			snaps = append(snaps, snap)
		}
		w.Cmd.Process.Kill()
		<-w.Exited()
		inFlight.Add(1)
	})
	defer r.sim.OnCreate(nil)

	stopTimed := make(chan struct{})
	timedDone := make(chan struct{})
	go func() {
		defer close(timedDone)
		trng := rand.New(rand.NewPCG(r.seed, 10))
		for timed.Load() < budget-budget/2 && !spent() {
			select {
			case <-stopTimed:
				return
			case <-time.After(time.Duration(20+trng.IntN(300)) * time.Millisecond):
			}
			if live := b.live(); len(live) > 0 {
				live[trng.IntN(len(live))].Cmd.Process.Kill()
				timed.Add(1)
			}
		}
	}()
	before, err := b.snapshot()
	r.must(err)
	ends := b.crew(4, "a worker under kill -9", nil, -int(syscall.SIGKILL))
	close(stopTimed)
	<-timedDone
	b.checkKept(before, "after the kills")
	mu.Lock()
	for _, s := range snaps {
		b.checkKept(s, "after a kill with a call in flight")
	}
	mu.Unlock()
	r.t.inject("kill -9 with a call in flight", int(inFlight.Load()))
	r.t.inject("kill -9 at a random time", ends[-int(syscall.SIGKILL)]-int(inFlight.Load()))
	st := r.sim.Stats()
	r.t.note("seed %d: 4 workers, %d items; %d workers killed (%d with a call in flight) and replaced; %d create calls, %d look-ups, %d refunds created",
		r.seed, len(b.p.Items), ends[-int(syscall.SIGKILL)], inFlight.Load(), st.Requests[r.prov.createRoute()], st.Requests[r.prov.lookupRoute()], st.RefundsCreated)
	b.finish(nil)
}

const whatPGSigstop = "Three `refund -j 4` workers on one PostgreSQL checkpoint (`--lease 2s`). Inside the simulator's create hook, the worker holding the item's claim is stopped with SIGSTOP, its call in flight (the simulator commits the refund; the answer waits for a stopped process). " +
	"The rig waits until the database shows the item taken by another worker (so the stop lasted longer than the lease), then resumes the worker with SIGCONT: it must find its claim lost and halt with exit 3 (saying the claim was lost), writing and sending nothing more; a new worker replaces it. " +
	"The item's new holder looks it up and finds the refund, so nothing is refunded twice."

func runPGSigstop(r *rig, sz sizes) {
	b := r.newPGBatch(sz.PGStopItems, stripesim.Faults{LatencyJitter: time.Millisecond}, "pg-sigstop", pgShortLease)
	type stop struct {
		w          *pgWorker
		item       string
		batch, key string
		gen        int64 // the item's claim generation when its holder was stopped
	}
	stops := make(chan stop, sz.PGStops)
	var stopped atomic.Int64
	// One worker stopped at a time: the others must be left to take its
	// items over (all three stopped would wait on each other).
	var stoppedNow atomic.Bool
	rng := rand.New(rand.NewPCG(r.seed, 11))
	gap := int64(max(2, len(b.p.Items)*2/3/(sz.PGStops+1)))
	var mu sync.Mutex
	mark, over := 1+rng.Int64N(gap), false
	r.sim.OnCreate(func(n int64, key string) {
		mu.Lock()
		defer mu.Unlock()
		if over || n < mark || stopped.Load() >= int64(sz.PGStops) || stoppedNow.Load() {
			return
		}
		// A call whose holder cannot be stopped (none named, or gone)
		// leaves the mark where it is: the next call is tried, so a busy
		// machine's timing cannot leave the row with no stop at all.
		w := b.holder(key)
		if w == nil || w.Cmd.Process.Signal(syscall.SIGSTOP) != nil {
			r.m.logf("pg-sigstop: call %d (%s): no running holder to stop; the next call is tried", n, key)
			return
		}
		mark = n + 1 + rng.Int64N(gap)
		stoppedNow.Store(true)
		batch, item, _, _ := parseKey(key)
		var gen int64
		b.pool.QueryRow(context.Background(), `SELECT claim_gen FROM refundkit.items WHERE batch = $1 AND item = $2`, batch, item).Scan(&gen)
		stopped.Add(1)
		stops <- stop{w: w, batch: batch, item: item, key: key, gen: gen}
	})
	defer r.sim.OnCreate(nil)

	var halted, tookOver atomic.Int64
	resumer := make(chan struct{})
	go func() {
		defer close(resumer)
		for s := range stops {
			// Taken over: another claim of the item (its generation moved
			// on). Settled with the generation unchanged: the stopped
			// worker wrote its outcome before the stop landed (the answer
			// was already on its way), so it has lost nothing.
			var settledFirst bool
			taken := await(func() bool {
				var holder *string
				var gen int64
				err := b.pool.QueryRow(context.Background(), `SELECT claimed_by, claim_gen FROM refundkit.items WHERE batch = $1 AND item = $2`, s.batch, s.item).Scan(&holder, &gen)
				settledFirst = err == nil && holder == nil && gen == s.gen
				return err == nil && (gen > s.gen || settledFirst)
			}, nil, 10*b.lease+awaitGuard)
			switch {
			case settledFirst:
				stopped.Add(-1) // not a stop past the lease with the call in flight
				r.m.logf("pg-sigstop: item %s was settled by %s before its stop landed; the next call is tried", s.item, s.w.name)
				mu.Lock()
				mark = 0
				mu.Unlock()
			case taken:
				tookOver.Add(1)
			default:
				r.t.Errorf("item %s, whose worker %s was stopped, was not taken over by another worker within %s", s.item, s.w.name, 10*b.lease+awaitGuard)
			}
			s.w.Cmd.Process.Signal(syscall.SIGCONT)
			if settledFirst {
				// It goes on with its other items (the crew judges its
				// exit), and another worker may be stopped meanwhile.
				stoppedNow.Store(false)
				continue
			}
			<-s.w.done
			stoppedNow.Store(false)
			if r.expectExit(s.w.proc, "a worker resumed after its lease ran out", exitJournal) {
				halted.Add(1)
				if !strings.Contains(s.w.Stderr.String(), "lost") {
					r.t.Errorf("the resumed worker does not say its claim was lost: %s", firstLines(s.w.Stderr.String(), 3))
				}
			}
		}
	}()
	before, err := b.snapshot()
	r.must(err)
	ends := b.crew(3, "a worker that may be stopped", nil, exitJournal)
	mu.Lock()
	over = true // a request of a worker gone may still reach the hook
	close(stops)
	mu.Unlock()
	<-resumer
	b.checkKept(before, "after the stops")
	r.t.inject("SIGSTOP past the lease with a call in flight", int(stopped.Load()))
	r.t.inject("halts on a lost claim after SIGCONT", int(halted.Load()))
	r.t.note("seed %d: 3 workers, %d items; %d workers stopped with a call in flight, %d of their items taken over by another worker, %d halted with exit 3 when resumed and were replaced (%d in all)",
		r.seed, len(b.p.Items), stopped.Load(), tookOver.Load(), halted.Load(), ends[exitJournal])
	b.finish(nil)
}
