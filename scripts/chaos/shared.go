package main

// Rows over a shared checkpoint: many `refund` workers on one checkpoint
// (PostgreSQL, `--journal postgres://...`, or NATS JetStream,
// `--journal nats://...`), each claiming items under a lease, while
// workers die, stop, come and go, and the checkpoint's server goes down.
// The rows run the same on either: a sharedCheckpoint is how the rig reads
// one beside the workers and takes its server down. The promise is the
// file journal's: every item refunded exactly once, and no record the
// checkpoint held is lost.

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
)

// sharedCheckpoint is a checkpoint as the rig sees it beside the workers.
type sharedCheckpoint interface {
	// url is refund's --journal.
	url() string
	// claim is what the checkpoint holds of an item's claim now.
	claim(batch, item string) (itemClaim, error)
	// unrefunded counts the batch's planned items not refunded.
	unrefunded(batch string) (int, error)
	// snapshot is every record the checkpoint holds, each under a name no
	// later record takes.
	snapshot() (recordSnapshot, error)
	// export writes the batches' records to path as a journal file holds
	// them (the checkpoint's own Export, as audit reads it).
	export(path string, batches ...string) error
	// down stops the checkpoint's server: a crash (no clean shutdown) or a
	// clean stop; up starts it again on the same store and reconnects the
	// rig's own reads.
	down(crash bool) error
	up() error
}

// itemClaim is an item's claim: the worker whose claim is live ("" once
// the item is settled or given back) and its generation, which every new
// claim bumps.
type itemClaim struct {
	Worker string
	Gen    int64
}

// Leases of the rows' workers: short, so a dead worker's items pass to
// another within seconds, yet many renewals (every third) long.
const (
	sharedLease      = 3 * time.Second
	sharedShortLease = 2 * time.Second // the SIGSTOP and server rows wait it out
)

// onShared runs a row on the checkpoints open makes.
func onShared(open func(r *rig, name string) sharedCheckpoint, run func(*rig, sizes)) func(*rig, sizes) {
	return func(r *rig, sz sizes) {
		r.shared = open
		run(r, sz)
	}
}

// sharedBatch is a plan worked by many refund processes on one checkpoint.
type sharedBatch struct {
	r     *rig
	p     *plan
	cp    sharedCheckpoint
	lease time.Duration
	// args are flags every worker of the batch takes; auditPlan is the
	// plan audit reads the checkpoint with (nil: p).
	args      []string
	auditPlan *plan

	mu      sync.Mutex
	seq     *int                     // workers started, over every batch on the checkpoint
	workers map[string]*sharedWorker // by --worker name
}

// sharedWorker is one refund process on the checkpoint.
type sharedWorker struct {
	*proc
	name   string
	done   <-chan struct{} // closed once it exited and was checked
	doomed atomic.Bool     // a killer has taken it: see doom
}

// doom reports whether the caller is the one killer of w: two killers
// never kill one worker, so each kill is counted once, by whoever sent it.
func (w *sharedWorker) doom() bool { return w.doomed.CompareAndSwap(false, true) }

// newSharedBatch makes a fresh checkpoint for the rig and a batch of n
// payments planned with partial refunds, so a second refund of a payment
// would succeed and nothing hides a duplicate.
func (r *rig) newSharedBatch(n int, faults stripesim.Faults, batch string, lease time.Duration) *sharedBatch {
	return r.sharedBatchOf(r.newPartialBatch(n, faults, batch), lease)
}

// sharedBatchOf is plan p (its payments served by the simulator already)
// on a fresh checkpoint.
func (r *rig) sharedBatchOf(p *plan, lease time.Duration) *sharedBatch {
	b := &sharedBatch{r: r, p: p, cp: r.shared(r, "main"), lease: lease, seq: new(int), workers: map[string]*sharedWorker{}}
	// Registered after the checkpoint's: runs before its cleanups, so no
	// worker outlives the rig (a setup failure aborts a row with workers
	// running).
	r.cleanup(b.killAll)
	return b
}

// on is a batch of plan p on checkpoint cp, its workers named on from
// b's (the checkpoint knows a name once).
func (b *sharedBatch) on(cp sharedCheckpoint, p *plan) *sharedBatch {
	nb := &sharedBatch{r: b.r, p: p, cp: cp, lease: b.lease, seq: b.seq, workers: map[string]*sharedWorker{}}
	b.r.cleanup(nb.killAll)
	return nb
}

// start starts a worker on the checkpoint, named w1, w2... in claims.
func (b *sharedBatch) start(extra ...string) *sharedWorker {
	b.mu.Lock()
	*b.seq++
	name := fmt.Sprintf("w%d", *b.seq)
	b.mu.Unlock()
	args := append(append([]string{"--lease", b.lease.String(), "--worker", name}, b.args...), extra...)
	pr := b.r.startRefund(b.cp.url(), b.p.Path, args...)
	w := &sharedWorker{proc: pr, name: name}
	w.done = b.r.background(pr)
	b.mu.Lock()
	b.workers[name] = w
	b.mu.Unlock()
	return w
}

// running is the worker of that name if it has not exited.
func (b *sharedBatch) running(name string) *sharedWorker {
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
func (b *sharedBatch) live() []*sharedWorker {
	b.mu.Lock()
	names := make([]string, 0, len(b.workers))
	for name := range b.workers {
		names = append(names, name)
	}
	b.mu.Unlock()
	var out []*sharedWorker
	for _, name := range names {
		if w := b.running(name); w != nil {
			out = append(out, w)
		}
	}
	return out
}

func (b *sharedBatch) killAll() {
	for _, w := range b.live() {
		w.Cmd.Process.Signal(syscall.SIGCONT)
		w.Cmd.Process.Kill()
		<-w.done
	}
}

// holder is the worker whose claim of the item behind key the checkpoint
// holds now: the one that sent the call (it checks its claim before every
// request).
func (b *sharedBatch) holder(key string) *sharedWorker {
	batch, item, _, ok := parseKey(key)
	if !ok {
		return nil
	}
	c, err := b.cp.claim(batch, item)
	if err != nil || c.Worker == "" {
		return nil
	}
	return b.running(c.Worker)
}

// addLost counts records lost, from any goroutine.
func (t *tally) addLost(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.Lost += n
}

// recordSnapshot is every record a checkpoint holds, by a name of its
// place (a PostgreSQL sequence number; a NATS item and index).
type recordSnapshot map[string]string

// checkKept adds to the tally the records of s the checkpoint no longer
// holds as they were. It may run on any goroutine.
func (b *sharedBatch) checkKept(s recordSnapshot, what string) {
	now, err := b.cp.snapshot()
	if err != nil {
		b.r.t.Errorf("%s: read the checkpoint's records: %v", what, err)
		return
	}
	gone := map[string]bool{}
	for at, rec := range s {
		if now[at] != rec {
			gone[at] = true
		}
	}
	// A read of a NATS bucket can miss an item written while it reads
	// (its watch's replay skips a value replaced meanwhile): what it
	// missed is read again. A record lost is missing from every read.
	for try := 0; len(gone) > 0 && try < 3; try++ {
		again, err := b.cp.snapshot()
		if err != nil {
			break
		}
		for at := range gone {
			if again[at] == s[at] {
				delete(gone, at)
			}
		}
	}
	if lost := len(gone); lost > 0 {
		b.r.t.addLost(lost)
		b.r.t.Errorf("%s: the checkpoint lost %d of the %d records it held before", what, lost, len(s))
	}
}

// crew keeps slots workers running: each that exits with one of again is
// replaced by a new one (once gate lets it: nil, or a function that waits
// until the server is up), until every slot's last worker exited 0. Any
// other exit is a problem, and ends its slot. It returns the exits by
// code.
func (b *sharedBatch) crew(slots int, what string, gate func(), again ...int) map[int]int {
	exits := make(chan *sharedWorker, slots)
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

// finish is the end of a shared row: the checkpoint exported as the
// journal lines it holds, checked as a file journal is (exactly once at
// the simulator, an intent before every key, audit clean, of the export
// and of the checkpoint's URL itself); every refund at the simulator
// recorded as refunded; every planned item refunded in the checkpoint.
// Items of forPerson are meant to be left for a person.
func (b *sharedBatch) finish(forPerson map[string]bool) {
	r := b.r
	path := b.exportFile()
	st, torn, err := journal.Load(path)
	r.must(err)
	if torn != nil {
		r.t.Errorf("the export of the checkpoint has a torn tail: %v", torn)
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
		r.t.Errorf("%d refunds at the simulator have no refunded record in the checkpoint", lost)
	}
	open, err := b.cp.unrefunded(b.p.Batch)
	r.must(err)
	if open > len(forPerson) {
		r.t.Errorf("the checkpoint holds %d items not refunded at the end, want %d", open, len(forPerson))
	}
	r.checkOnceForPerson(b.p, forPerson, path)
	if len(forPerson) == 0 {
		r.audit(b.p, path) // the export, as a file journal
		whole := b.p
		if b.auditPlan != nil {
			whole = b.auditPlan
		}
		r.audit(whole, b.cp.url()) // the checkpoint itself: audit postgres://... or nats://...
	}
}

// exportFile exports the batch's records to a new file of the rig's.
func (b *sharedBatch) exportFile() string {
	b.mu.Lock()
	*b.seq++
	path := b.r.path(fmt.Sprintf("export-%d.jsonl", *b.seq))
	b.mu.Unlock()
	b.r.must(b.cp.export(path, b.p.Batch))
	return path
}

// inFlightKiller kills, from inside the simulator's create hook, the
// worker whose claim the checkpoint shows for the item being refunded: its
// call is in flight, and the simulator commits the refund after it is
// gone. The checkpoint's records are snapshotted before each kill.
type inFlightKiller struct {
	b      *sharedBatch
	mu     sync.Mutex
	rng    *rand.Rand
	gap    int64
	mark   int64
	budget int64
	n      atomic.Int64
	snaps  []recordSnapshot
}

// killInFlight installs an inFlightKiller of kills kills spread over the
// batch's calls.
func (b *sharedBatch) killInFlight(kills int) *inFlightKiller {
	k := &inFlightKiller{b: b, rng: rand.New(rand.NewPCG(b.r.seed, 9)), budget: int64(kills)}
	k.gap = int64(max(2, len(b.p.Items)/(kills+1)))
	k.mark = 1 + k.rng.Int64N(k.gap)
	b.r.sim.OnCreate(k.hook)
	return k
}

func (k *inFlightKiller) hook(n int64, key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if n < k.mark || k.n.Load() >= k.budget {
		return
	}
	w := k.b.holder(key)
	if w != nil && !w.doom() {
		return // another killer has it: the next call is tried
	}
	k.mark = n + 1 + k.rng.Int64N(k.gap)
	if w == nil {
		return
	}
	if snap, err := k.b.cp.snapshot(); err == nil {
		k.snaps = append(k.snaps, snap)
	}
	w.Cmd.Process.Kill()
	<-w.Exited()
	k.n.Add(1)
}

// stop removes the hook, checks that the checkpoint kept every record it
// held before each kill, and returns the kills.
func (k *inFlightKiller) stop() int {
	k.b.r.sim.OnCreate(nil)
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, s := range k.snaps {
		k.b.checkKept(s, "after a kill with a call in flight")
	}
	return int(k.n.Load())
}

// crewKilled works the batch with slots workers, killing up to kills of
// them with a call in flight, each replaced until every slot's last
// worker exited 0; it returns the kills.
func (b *sharedBatch) crewKilled(slots, kills int, what string) int {
	before, err := b.cp.snapshot()
	b.r.must(err)
	k := b.killInFlight(kills)
	b.crew(slots, what, nil, -int(syscall.SIGKILL))
	n := k.stop()
	b.checkKept(before, "after "+what)
	return n
}

func runSharedKill9(r *rig, sz sizes) {
	b := r.newSharedBatch(sz.SharedKillItems, stripesim.Faults{LatencyJitter: time.Millisecond}, r.t.Name, sharedLease)
	timedBudget := int64(sz.SharedKills - sz.SharedKills/2)
	k := b.killInFlight(sz.SharedKills / 2)
	// Kills at random times: each of a worker seen running that no other
	// kill has taken, counted once its exit shows the SIGKILL landed (a
	// worker exiting on its own meanwhile is no kill), until the budget is
	// spent. The batch's second half of calls waits for the first that
	// landed, so no machine is too busy for one.
	var timed atomic.Int64
	landed := make(chan struct{})
	half := int64(len(b.p.Items) / 2)
	r.sim.OnCreate(func(n int64, key string) {
		if n > half {
			select {
			case <-landed:
			case <-time.After(awaitGuard):
			}
		}
		k.hook(n, key)
	})
	stopTimed := make(chan struct{})
	timedDone := make(chan struct{})
	go func() {
		defer close(timedDone)
		defer func() {
			if timed.Load() == 0 {
				close(landed) // none landed: nothing waits any longer
			}
		}()
		trng := rand.New(rand.NewPCG(r.seed, 10))
		for timed.Load() < timedBudget {
			select {
			case <-stopTimed:
				return
			case <-time.After(time.Duration(20+trng.IntN(300)) * time.Millisecond):
			}
			var free []*sharedWorker
			for _, w := range b.live() {
				if !w.doomed.Load() {
					free = append(free, w)
				}
			}
			if len(free) == 0 {
				continue
			}
			if w := free[trng.IntN(len(free))]; w.doom() {
				w.Cmd.Process.Kill()
				<-w.Exited()
				if w.Code == -int(syscall.SIGKILL) && timed.Add(1) == 1 {
					close(landed)
				}
			}
		}
	}()
	before, err := b.cp.snapshot()
	r.must(err)
	ends := b.crew(4, "a worker under kill -9", nil, -int(syscall.SIGKILL))
	close(stopTimed)
	<-timedDone
	inFlight := k.stop()
	b.checkKept(before, "after the kills")
	if killed := ends[-int(syscall.SIGKILL)]; killed != inFlight+int(timed.Load()) {
		r.t.Errorf("%d workers ended by kill -9, but %d kills with a call in flight and %d at random times landed", killed, inFlight, timed.Load())
	}
	r.t.inject("kill -9 with a call in flight", inFlight)
	r.t.inject("kill -9 at a random time", int(timed.Load()))
	st := r.sim.Stats()
	r.t.note("seed %d: 4 workers, %d items; %d workers killed (%d with a call in flight) and replaced; %d create calls, %d look-ups, %d refunds created",
		r.seed, len(b.p.Items), ends[-int(syscall.SIGKILL)], inFlight, st.Requests[r.prov.createRoute()], st.Requests[r.prov.lookupRoute()], st.RefundsCreated)
	b.finish(nil)
}

func runSharedSigstop(r *rig, sz sizes) {
	b := r.newSharedBatch(sz.SharedStopItems, stripesim.Faults{LatencyJitter: time.Millisecond}, r.t.Name, sharedShortLease)
	type stop struct {
		w           *sharedWorker
		batch, item string
		gen         int64 // the item's claim generation when its holder was stopped
	}
	stops := make(chan stop, sz.SharedStops)
	var stopped atomic.Int64
	// One worker stopped at a time: the others must be left to take its
	// items over (all three stopped would wait on each other).
	var stoppedNow atomic.Bool
	marks := newMarks(r, 11, len(b.p.Items), sz.SharedStops)
	marks.onCall(func(n int64, key string) bool {
		if stopped.Load() >= int64(sz.SharedStops) || stoppedNow.Load() {
			return false
		}
		// A call whose holder cannot be stopped (none named, or gone)
		// leaves the mark where it is: the next call is tried, so a busy
		// machine's timing cannot leave the row with no stop at all.
		w := b.holder(key)
		if w == nil || w.Cmd.Process.Signal(syscall.SIGSTOP) != nil {
			r.m.logf("%s: call %d (%s): no running holder to stop; the next call is tried", r.t.Name, n, key)
			return false
		}
		stoppedNow.Store(true)
		batch, item, _, _ := parseKey(key)
		c, _ := b.cp.claim(batch, item)
		stopped.Add(1)
		stops <- stop{w: w, batch: batch, item: item, gen: c.Gen}
		return true
	})
	defer r.sim.OnCreate(nil)

	var halted, tookOver, timedOut atomic.Int64
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
				c, err := b.cp.claim(s.batch, s.item)
				settledFirst = err == nil && c.Worker == "" && c.Gen == s.gen
				return err == nil && (c.Gen > s.gen || settledFirst)
			}, nil, 10*b.lease+awaitGuard)
			switch {
			case settledFirst:
				stopped.Add(-1) // not a stop past the lease with the call in flight
				r.m.logf("%s: item %s was settled by %s before its stop landed; the next call is tried", r.t.Name, s.item, s.w.name)
				marks.again()
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
				switch msg := s.w.Stderr.String(); {
				case strings.Contains(msg, "lost"):
				case strings.Contains(msg, "deadline exceeded"):
					// A read of the checkpoint timed out before the claim
					// was found lost: a halt all the same.
					timedOut.Add(1)
				default:
					r.t.Errorf("the resumed worker does not say its claim was lost: %s", firstLines(msg, 3))
				}
			}
		}
	}()
	before, err := b.cp.snapshot()
	r.must(err)
	ends := b.crew(3, "a worker that may be stopped", nil, exitJournal)
	marks.over(func() { close(stops) }) // a request of a worker gone may still reach the hook
	<-resumer
	b.checkKept(before, "after the stops")
	r.t.inject("SIGSTOP past the lease with a call in flight", int(stopped.Load()))
	r.t.inject("halts on a lost claim after SIGCONT", int(halted.Load()))
	r.t.note("seed %d: 3 workers, %d items; %d workers stopped with a call in flight, %d of their items taken over by another worker, %d halted with exit 3 when resumed (%d on a checkpoint read that timed out rather than naming the lost claim) and were replaced (%d in all)",
		r.seed, len(b.p.Items), stopped.Load(), tookOver.Load(), halted.Load(), timedOut.Load(), ends[exitJournal])
	b.finish(nil)
}
