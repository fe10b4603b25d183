package main

// The fault rows on Stripe: kill -9 and SIGTERM mid-batch, a 429 storm,
// 500s and lost answers with a network cut (partition), a full disk.

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

const whatKill9 = "`refund -j 8` over a batch of thousands of items is killed with SIGKILL again and again. " +
	"Half the kills come from inside the simulator's create hook, with a refund call in flight: the process is gone before the simulator goes on to commit the refund, so the journal holds the intent and not the outcome. " +
	"The other half land at a random time after start (start-up, journal load and torn-tail repair, intents, fsyncs, outcomes). " +
	"Before each run the journal's complete records are snapshotted and the run must leave them byte for byte; a run without kills must then finish with exit 0."

// runKill9 kills refund at random moments until the kill budget is spent,
// then lets it finish.
func runKill9(r *rig, sz sizes) {
	p := r.newBatch(sz.KillItems, stripesim.Faults{}, "kill9")
	j := r.path("j.jsonl")
	inFlight, timed := r.signalRuns(syscall.SIGKILL, sz.Kills, p, j, func(pr *proc) bool {
		return r.expectExit(pr, "a run under kill -9", 0, -int(syscall.SIGKILL))
	})
	r.t.inject("kill -9 with a call in flight", inFlight)
	r.t.inject("kill -9 at a random time", timed)
	st := r.sim.Stats()
	if r.prov.name() == provPayPal {
		r.t.note("seed %d: %d kills (%d with a call in flight) over %d items: %d refund calls, of which %d held a request id; %d answers replayed to a request id sent again, %d 409s while the first was in flight; %d refunds created; %d access tokens",
			r.seed, inFlight+timed, inFlight, len(p.Items), st.Requests[r.prov.createRoute()], r.sim.Creates(), st.Replayed, st.KeyInUse, st.RefundsCreated, st.PayPal.TokensIssued)
	} else {
		r.t.note("seed %d: %d kills (%d with a call in flight) over %d items: %d create calls, of which %d reserved a key and %d were cut mid-body by a kill (refused 400, nothing created); %d in-doubt lookups; %d refunds created",
			r.seed, inFlight+timed, inFlight, len(p.Items), st.Requests[r.prov.createRoute()], r.sim.Creates(), st.InvalidRequests, st.Requests[r.prov.lookupRoute()], st.RefundsCreated)
	}
	r.finish(p, j)
}

const whatSigterm = "A deploy: `refund -j 8` gets SIGTERM mid-batch, from inside the simulator's create hook (a call in flight) or at a random time, and must exit 143 (128 + SIGTERM's 15) having journaled the outcome of every call it sent: " +
	"after each signal, every item the simulator holds a refund for must be journaled as refunded (nothing abandoned in flight). The restart goes on until a run exits 0. " +
	"refund installs its handler first thing, before it opens the journal, so even a SIGTERM during start-up exits 143; one that lands in the instant before (process start) would end it like a kill, killed by the signal rather than exiting: that is accepted and counted, since no call is made before the handler is in place, and the run after it must be as safe as after a kill."

// runSigterm sends SIGTERM mid-batch again and again, then lets the run
// finish.
func runSigterm(r *rig, sz sizes) {
	p := r.newBatch(sz.TermItems, stripesim.Faults{}, "sigterm")
	j := r.path("j.jsonl")
	signals, early := 0, 0
	// The call goes on after the signal: it must be journaled.
	r.signalRuns(syscall.SIGTERM, sz.Terms, p, j, func(pr *proc) bool {
		switch pr.Code {
		case exitTerminated:
			signals++
			if !strings.Contains(pr.Stderr.String(), "finishing the calls in flight") {
				r.t.Errorf("after SIGTERM, refund did not say it finishes the calls in flight: %s", firstLines(pr.Stderr.String(), 3))
			}
			r.checkNothingAbandoned(p, j)
			return true
		case -int(syscall.SIGTERM):
			// Signalled before its handler was installed: the process
			// died at once, like a kill -9, and must be as safe.
			early++
			return true
		}
		r.expectExit(pr, "a run under SIGTERM", 0, exitTerminated)
		return false
	})
	if early > 0 {
		r.t.note("seed %d: %d of the SIGTERMs arrived before refund installed its handler, at process start, and ended it like a kill", r.seed, early)
	}
	r.t.inject("SIGTERM", signals+early)
	r.finish(p, j)
}

// signalRuns runs refund over p until a run exits 0, sending sig to runs
// until budget of them count (counted says which), and returns how many
// of those were struck by the hook and by the timer. Even rounds are struck
// from inside the create hook, a call in flight; odd ones at a random time
// up to as long as the last hook signal took to come, so it lands anywhere
// from start-up to as far in, whatever the machine's speed. The gap
// spreads the signals over about half the batch. Each run must keep the
// journal's complete records.
func (r *rig) signalRuns(sig syscall.Signal, budget int, p *plan, j string, counted func(pr *proc) bool) (hooked, timed int) {
	s := r.newStriker(sig)
	gap := max(2, len(p.Items)/(budget+1))
	delay := 20 * time.Millisecond
	for round := 0; ; round++ {
		if round > 3*budget+20 {
			r.fatalf("not done after %d runs", round)
		}
		signalling := hooked+timed < budget
		byHook := signalling && round%2 == 0
		snap := crashrig.TakeSnapshot(j)
		started := time.Now()
		pr := r.startRefund(j, p.Path)
		var timer *time.Timer
		switch {
		case byHook:
			s.Arm(r.sim, pr.Proc, r.rng, gap)
		case signalling:
			timer = time.AfterFunc(time.Duration(r.rng.Int64N(int64(delay)+1)), func() { pr.Cmd.Process.Signal(sig) })
		}
		r.wait(pr)
		s.Disarm()
		if timer != nil {
			timer.Stop()
		}
		r.checkKept(snap)
		if pr.Code == 0 {
			return hooked, timed // every item settled
		}
		took := time.Since(started)
		switch {
		case !counted(pr):
		case byHook:
			hooked++
			delay = took
		default:
			timed++
		}
	}
}

// checkNothingAbandoned: after a SIGTERM, every refund the simulator holds
// for the batch is journaled: the calls in flight were finished and their
// outcomes written before the exit.
func (r *rig) checkNothingAbandoned(p *plan, path string) {
	st, _, err := journal.Load(path)
	if err != nil {
		r.t.Errorf("load the journal after SIGTERM: %v", err)
		return
	}
	for item, rs := range r.sim.LiveRefunds(p.Batch) {
		if s, _ := st.Lookup(p.Batch, item); s.Status != journal.StatusRefunded {
			r.t.Errorf("after SIGTERM, refund %s of item %s exists but the journal says %v: a call was abandoned in flight", rs[0].ID, item, s.Status)
		}
	}
}

const whatRateLimit = "Half of all API requests are answered 429 rate_limit. `refund -j 8 -v` must finish every item with exit 0 in one run, " +
	"backing off with jitter and retrying (a create with the same key, or the look-up before it): its summary's rate-limited count must equal the simulator's count of 429 answers, every 429 must be followed by a logged retry with a delay, and no item may fail. " +
	"Each item now costs a look-up and a create, both subject to the storm, so a run takes longer than before the look-up."

// retryRE is the line refund -v logs before each retry: of a create (with
// the same key) or of a look-up.
var retryRE = regexp.MustCompile(`retrying (?:the look-up|(?:the create )?with the same key) .*status=(\d+) .*after=(\S+)`)

func runRateLimit(r *rig, sz sizes) {
	n, share := sz.StormItems, 0.5
	if r.prov.name() == provPayPal {
		// PayPal's backoff starts at 500ms and goes to 30s, and an item
		// costs four requests (the capture, its order, the refund, a
		// token's share): a storm of half would take minutes.
		n, share = sz.PayPalStormItems, paypalStormShare
	}
	p := r.newBatch(n, stripesim.Faults{RateLimitShare: share}, "storm")
	j := r.path("j.jsonl")

	started := time.Now()
	pr := r.startRefund(j, p.Path, "-v")
	r.wait(pr)
	took := time.Since(started)
	r.expectExit(pr, "a run through a 429 storm", 0)
	sum, ok := parseSummary(pr.Stderr.String())
	if !ok {
		r.t.Errorf("no summary from refund: %s", firstLines(pr.Stderr.String(), 3))
	}
	st := r.sim.Stats()
	var waits, longest time.Duration
	retries429 := 0
	for _, m := range retryRE.FindAllStringSubmatch(pr.Stderr.String(), -1) {
		d, err := time.ParseDuration(m[2])
		if err != nil || d <= 0 {
			r.t.Errorf("a retry without a backoff: %s", m[0])
			continue
		}
		if m[1] == "429" {
			retries429++
		}
		waits += d
		longest = max(longest, d)
	}
	switch {
	case st.RateLimited == 0:
		r.t.Errorf("the simulator answered no 429: the storm did not happen")
	case int64(sum.RateLimited) != st.RateLimited:
		r.t.Errorf("refund's summary counts %d rate-limited answers, the simulator gave %d", sum.RateLimited, st.RateLimited)
	case retries429 != sum.RateLimited || sum.Retried < sum.RateLimited:
		r.t.Errorf("%d answers were 429 but %d retries were logged (%d in the summary)", sum.RateLimited, retries429, sum.Retried)
	}
	if sum.Failed > 0 || sum.InDoubt > 0 {
		r.t.Errorf("%d items failed and %d were left in doubt by 429s", sum.Failed, sum.InDoubt)
	}
	r.t.inject("429 answers", int(st.RateLimited))
	r.t.note("seed %d: %d items, %d requests of which %d answered 429; refund's summary: %d rate-limited, %d retried; backoff %s in all, longest %s, run %s",
		r.seed, len(p.Items), r.prov.requests(st), st.RateLimited, sum.RateLimited, sum.Retried,
		waits.Round(time.Millisecond), longest.Round(time.Millisecond), took.Round(time.Millisecond))
	r.must(r.sim.SetFaults(stripesim.Faults{})) // audit asks a calm simulator
	r.finish(p, j)
}

const whatErrors = "Refund creations are answered 500 without a refund (saved under the key), 500 after committing the refund (saved too), or committed and then left unanswered with the connection closed, each for a share of the requests; " +
	"between runs the simulator forgets every idempotency key, as Stripe does after 24 hours, so a resumed run cannot lean on replays. " +
	"Runs with faults on are killed with SIGKILL at a random refund call (so items are left in doubt whose keys then expire), then one runs to its end with the faults still on (exit 0, or 1 with items left in doubt). " +
	"After the first killed run comes a network cut: refund talks through a relay that, at a refund call drawn at random, closes every connection (the calls in flight lose their answers, the simulator commits them) and lets nothing through after; that run must halt with exit 6 (Stripe does not answer) instead of sending on. " +
	"Then a run without faults: an item Stripe answered its own 500 for (indeterminate: Stripe may still complete it) is looked up and, if still not found, left in doubt with nothing sent (exit 1); last, the same run with `--resend-after-500` must exit 0. " +
	"Go's HTTP transport silently re-sends a request that carries an Idempotency-Key when a reused keep-alive connection turns out dead; that is safe, and the simulator replays the saved answer."

func runErrors(r *rig, sz sizes) {
	faults := stripesim.Faults{
		ErrorBeforeCommitShare: 0.1,
		ErrorAfterCommitShare:  0.1,
		DropAfterCommitShare:   0.1,
		LatencyJitter:          time.Millisecond,
	}
	p := r.newBatch(sz.FaultItems, faults, "errors")
	j := r.path("j.jsonl")

	var total summary
	expiries, forgotten, kills := 0, 0, 0
	kill := r.newStriker(syscall.SIGKILL)
	gap := max(2, len(p.Items)/(sz.FaultRounds+1))
	runOnce := func(killing bool, extra []string, what string, want ...int) *proc {
		snap := crashrig.TakeSnapshot(j)
		pr := r.startRefund(j, p.Path, extra...)
		if killing {
			kill.Arm(r.sim, pr.Proc, r.rng, gap)
		}
		r.wait(pr)
		kill.Disarm()
		r.checkKept(snap)
		if pr.Code == -int(syscall.SIGKILL) {
			kills++
			return pr
		}
		r.expectExit(pr, what, want...)
		if s, ok := parseSummary(pr.Stderr.String()); ok {
			total.InDoubt += s.InDoubt
			total.Reconciled += s.Reconciled
			total.NewKeys += s.NewKeys
			total.Retried += s.Retried
		}
		return pr
	}
	// Killed runs leave items in doubt whose keys then expire: the next
	// run must find their refunds by listing, not by replay.
	blackouts := 0
	for round := 0; round < sz.FaultRounds; round++ {
		pr := runOnce(true, nil, "a run with 500s and dropped answers", 0, exitFailed, exitStripe)
		if n := r.sim.ForgetKeys(); n > 0 {
			expiries++
			forgotten += n
		}
		if pr.Code == 0 {
			break
		}
		if round == 0 {
			blackouts += r.blackout(gap)
			r.sim.OnCreate(kill.Hook)
		}
	}
	runOnce(false, nil, "a run with 500s and dropped answers", 0, exitFailed, exitStripe)
	r.sim.ForgetKeys()

	// An item Stripe answered its own 500 for stays in doubt, with nothing
	// sent, until a person says a new key may go.
	r.must(r.sim.SetFaults(stripesim.Faults{}))
	after := runOnce(false, nil, "the run after the faults stopped", 0, exitFailed)
	waiting := 0
	if s, ok := parseSummary(after.Stderr.String()); ok {
		waiting = s.InDoubt
		if s.NewKeys > 0 {
			r.t.Errorf("the run after the faults stopped used %d new keys without --resend-after-500", s.NewKeys)
		}
	}
	if after.Code == exitFailed {
		runOnce(false, []string{"--resend-after-500"}, "the run with --resend-after-500", 0)
	}

	st := r.sim.Stats()
	r.t.injectFaults(st, false)
	r.t.inject("key expiries", expiries)
	r.t.inject("kill -9 with a call in flight", kills)
	r.t.inject("network cuts (halted, exit 6)", blackouts)
	r.t.note("seed %d: %d items; %d 500s before and %d after commit, %d answers dropped; %d keys forgotten in %d expiries; %d answers replayed (the transport's re-sends and saved 500s); over the runs %d items left in doubt, %d reconciled by listing, %d new keys, %d retries; %d items waited in doubt after a 500 for --resend-after-500",
		r.seed, len(p.Items), st.ErrorsBeforeCommit, st.ErrorsAfterCommit, st.Dropped, forgotten, expiries, st.Replayed,
		total.InDoubt, total.Reconciled, total.NewKeys, total.Retried, waiting)
	r.finish(p, j)
}

// blackout runs refund through a relay that cuts the network at one of
// its refund calls, drawn at random: the calls in flight lose their
// answers (the simulator still commits them) and nothing gets through
// after. The run must halt as unable to reach Stripe (exit 6) instead of
// sending on. It returns 1 if it did.
func (r *rig) blackout(gap int) int {
	link := r.newPartition()
	mark := r.sim.Creates() + 1 + r.rng.Int64N(int64(max(1, gap)))
	r.sim.OnCreate(func(n int64, _ string) {
		if n == mark {
			link.setCut(true)
		}
	})
	defer r.sim.OnCreate(nil)
	snap := crashrig.TakeSnapshot(r.path("j.jsonl"))
	pr := r.startRefund(r.path("j.jsonl"), r.path("plan.jsonl"), "--api-base", link.URL())
	r.wait(pr)
	r.checkKept(snap)
	link.setCut(false)
	if !r.expectExit(pr, "a run cut off from Stripe", exitStripe) {
		return 0
	}
	if !strings.Contains(pr.Stderr.String(), "did not answer") {
		r.t.Errorf("the halt does not say Stripe did not answer: %s", firstLines(pr.Stderr.String(), 3))
	}
	return 1
}

const whatDiskFull = "The journal lives on a small tmpfs the program mounts (root needed). `refund -j 8` runs until the tmpfs is full and must halt with exit 3, saying no space is left, " +
	"with no API call after the failed write: every key the simulator received has a journaled intent. The tmpfs is then remounted bigger (space freed) and the same command resumes; " +
	"this repeats until the batch is done, so each seed fills the disk many times at different records."

func runDiskFull(r *rig, sz sizes) {
	if os.Geteuid() != 0 {
		r.t.Skipped = "mounting a tmpfs needs root"
		return
	}
	p := r.newBatch(sz.DiskItems, stripesim.Faults{}, "diskfull")
	mnt := r.path("small")
	r.must(os.Mkdir(mnt, 0o700))
	// Sizes drawn from the seed, so the disk fills at other records on
	// every seed.
	size := sz.DiskStartK + 4*r.rng.IntN(sz.DiskStartK/4+1)
	first := size
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dk", size), "tmpfs", mnt).CombinedOutput(); err != nil {
		r.fatalf("setup: mount a tmpfs: %v: %s", err, out)
	}
	r.cleanup(func() { exec.Command("umount", mnt).Run() })
	j := mnt + "/j.jsonl"

	halts := 0
	for round := 0; ; round++ {
		if round > 4*len(p.Items) {
			r.fatalf("not done after %d runs", round)
		}
		snap := crashrig.TakeSnapshot(j)
		pr := r.startRefund(j, p.Path)
		r.wait(pr)
		r.checkKept(snap)
		if pr.Code == 0 {
			break
		}
		if r.expectExit(pr, "a run on a full disk", exitJournal) {
			halts++
			if !strings.Contains(pr.Stderr.String(), "no space left on device") {
				r.t.Errorf("the halt does not say the disk is full: %s", firstLines(pr.Stderr.String(), 3))
			}
		}
		r.checkIntents(p.Batch, j) // no call without a durable intent, even at the halt
		size += sz.DiskStepK/2 + 4*r.rng.IntN(sz.DiskStepK/8+1)
		if out, err := exec.Command("mount", "-o", fmt.Sprintf("remount,size=%dk", size), mnt).CombinedOutput(); err != nil {
			r.fatalf("setup: remount the tmpfs: %v: %s", err, out)
		}
	}
	r.t.inject("disk-full halts", halts)
	r.t.note("seed %d: %d items; the disk filled %d times, the tmpfs grew from %d KiB to %d KiB", r.seed, len(p.Items), halts, first, size)
	r.finish(p, j)
}

// partition is a TCP relay between refund and the simulator that can cut
// the network: cut closes every relayed connection (calls in flight lose
// their answers, though the simulator still commits them) and refuses new
// ones by closing them at once, until heal.
type partition struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]bool
}

func (r *rig) newPartition() *partition {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	r.must(err)
	p := &partition{ln: ln, target: r.sim.URL()[len("http://"):], conns: map[net.Conn]bool{}}
	go p.serve()
	r.cleanup(func() {
		ln.Close()
		p.setCut(true)
	})
	return p
}

// URL is the base URL to give refund as --api-base.
func (p *partition) URL() string { return "http://" + p.ln.Addr().String() }

func (p *partition) serve() {
	for {
		conn, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.relay(conn)
	}
}

func (p *partition) relay(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	if !p.track(client, server) {
		client.Close()
		server.Close()
		return
	}
	defer p.untrack(client, server)
	done := make(chan struct{}, 2)
	go func() { io.Copy(server, client); done <- struct{}{} }()
	go func() { io.Copy(client, server); done <- struct{}{} }()
	<-done
	client.Close()
	server.Close()
	<-done
}

func (p *partition) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	for _, c := range conns {
		p.conns[c] = true
	}
	return true
}

func (p *partition) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		delete(p.conns, c)
	}
}

// setCut cuts the network (closing every open connection) or heals it.
func (p *partition) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
	}
}
