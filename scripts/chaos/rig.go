package main

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/stripesim"
)

// rig is one run of one scenario: a seed, a simulator, a work directory,
// and the tally it adds its findings to.
type rig struct {
	m    *matrix
	t    *tally
	seed uint64
	rng  *rand.Rand
	dir  string
	sim  *stripesim.Server
	// charges the simulator holds, by charge id and by payment intent.
	charges map[string]stripesim.Charge

	mu       sync.Mutex
	keys     map[string]bool // idempotency keys the simulator reserved
	keyLog   []string        // the same, in the order they came
	creates  atomic.Int64    // refund creations that reserved a fresh key
	onCreate atomic.Pointer[func(n int64, key string)]
	cleanups []func()

	// meant are the plans whose refunds are meant to stay at the
	// simulator, and extra the refunds meant on charges besides theirs
	// (an old script's): what the per-charge check allows.
	meant []*plan
	extra map[string]int
	// dups are the refunds beyond what is meant, by charge, counted so far.
	dups map[string]int
	// retired are journals a scenario replaced or deleted on purpose: their
	// intents still count for the write-ahead check.
	retired []string
}

// abort unwinds a scenario run after a setup failure it cannot go on from;
// the failure is already counted as a problem.
type abort struct{}

func (m *matrix) newRig(t *tally, seed uint64) (*rig, error) {
	dir, err := os.MkdirTemp(m.work, fmt.Sprintf("%s-%d-", t.Name, seed))
	if err != nil {
		return nil, err
	}
	return &rig{
		m: m, t: t, seed: seed, dir: dir,
		rng:     rand.New(rand.NewPCG(seed, uint64(len(t.Name)))),
		charges: map[string]stripesim.Charge{},
		keys:    map[string]bool{},
		extra:   map[string]int{},
		dups:    map[string]int{},
	}, nil
}

// runScenario runs sc on r, turning an abort into the problem it recorded.
func runScenario(sc *scenario, r *rig, sz sizes) {
	defer func() {
		if v := recover(); v != nil {
			if _, ok := v.(abort); !ok {
				panic(v)
			}
		}
	}()
	sc.Run(r, sz)
}

func (r *rig) fatalf(format string, args ...any) {
	r.t.problemf(format, args...)
	panic(abort{})
}

func (r *rig) must(err error) {
	if err != nil {
		r.fatalf("setup: %v", err)
	}
}

// path names a file in the rig's directory.
func (r *rig) path(name string) string { return filepath.Join(r.dir, name) }

// serve starts the simulator with charges and faults.
func (r *rig) serve(charges []stripesim.Charge, faults stripesim.Faults) {
	sim, err := stripesim.Start(stripesim.Config{Charges: charges, Faults: faults, Seed: int64(r.seed)})
	r.must(err)
	r.sim = sim
	for _, ch := range charges {
		r.charges[ch.ID] = ch
		if ch.PaymentIntent != "" {
			r.charges[ch.PaymentIntent] = ch
		}
	}
	sim.SetCreateHook(func(key string) {
		r.mu.Lock()
		r.keys[key] = true
		r.keyLog = append(r.keyLog, key)
		r.mu.Unlock()
		n := r.creates.Add(1)
		if fn := r.onCreate.Load(); fn != nil {
			(*fn)(n, key)
		}
	})
}

// keyCount is how many keys the simulator has reserved so far.
func (r *rig) keyCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.keyLog)
}

// keysSince returns the keys reserved after the first n.
func (r *rig) keysSince(n int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.keyLog[n:]...)
}

// setOnCreate makes fn run inside every refund creation that reserves a key,
// with the request held in flight until fn returns; nil removes it.
func (r *rig) setOnCreate(fn func(n int64, key string)) {
	if fn == nil {
		r.onCreate.Store(nil)
		return
	}
	r.onCreate.Store(&fn)
}

func (r *rig) cleanup(fn func()) { r.cleanups = append(r.cleanups, fn) }

// close checks every file left for the key, then undoes what the run set up.
func (r *rig) close() {
	r.scanFiles()
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	if r.sim != nil {
		r.sim.Close()
	}
	os.RemoveAll(r.dir)
}

// scanFiles counts a problem for every file under the rig's directory
// (journals, torn tails set aside, plans, outputs) that holds the key.
func (r *rig) scanFiles() {
	filepath.WalkDir(r.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err == nil && bytes.Contains(b, []byte(secretPart)) {
			r.t.problemf("the API key is in %s", filepath.Base(path))
		}
		return nil
	})
}

// proc is one run of a binary.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stdout bytes.Buffer
	stderr bytes.Buffer
	exited chan struct{}
	// code is the exit status, or minus the signal that killed it.
	code int
}

// start runs bin with args, stdin from in (nil: none), the fake key and
// the simulator's URL in its environment. It does not wait.
func (r *rig) start(in io.Reader, bin string, args ...string) *proc {
	path := r.m.bins[bin]
	if path == "" {
		r.fatalf("setup: bin/%s is not built", bin)
	}
	p := &proc{name: bin, cmd: exec.Command(path, args...), exited: make(chan struct{})}
	p.cmd.Dir = r.dir
	p.cmd.Stdin = in
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	env := []string{"STRIPE_API_KEY=" + secretKey}
	if r.sim != nil {
		env = append(env, "STRIPE_API_BASE="+r.sim.URL())
	}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STRIPE_") {
			env = append(env, kv)
		}
	}
	p.cmd.Env = env
	r.must(p.cmd.Start())
	return p
}

// wait waits for p and checks its output for the key and for panics;
// p.exited is closed once all that is done.
func (r *rig) wait(p *proc) int {
	defer close(p.exited)
	p.code = exitCode(p.cmd.Wait())
	for stream, b := range map[string][]byte{"stdout": p.stdout.Bytes(), "stderr": p.stderr.Bytes()} {
		if bytes.Contains(b, []byte(secretPart)) {
			r.t.problemf("the API key is in the %s of %s", stream, p.name)
		}
	}
	if bytes.Contains(p.stderr.Bytes(), []byte("panic:")) || bytes.Contains(p.stderr.Bytes(), []byte("goroutine ")) {
		r.t.problemf("%s panicked: %s", p.name, firstLines(p.stderr.String(), 3))
	}
	if p.name == "refund" {
		r.t.countRun()
	}
	return p.code
}

// run starts bin and waits for it.
func (r *rig) run(in io.Reader, bin string, args ...string) *proc {
	p := r.start(in, bin, args...)
	r.wait(p)
	return p
}

// startRefund starts refund over a plan file at full speed, -j 8 unless
// extra says otherwise.
func (r *rig) startRefund(journalPath, planPath string, extra ...string) *proc {
	args := append([]string{"--journal", journalPath, "--rate", "0", "--progress", "never", "-j", "8"}, extra...)
	return r.start(nil, "refund", append(args, planPath)...)
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return -int(ws.Signal())
		}
		return ee.ExitCode()
	}
	if err != nil {
		return -1000
	}
	return 0
}

// expectExit counts a problem unless p exited with one of want.
func (r *rig) expectExit(p *proc, what string, want ...int) bool {
	for _, w := range want {
		if p.code == w {
			return true
		}
	}
	r.t.problemf("%s: %s exited %d, want %v: %s", what, p.name, p.code, want, firstLines(p.stderr.String(), 4))
	return false
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(strings.TrimSpace(s), "\n", n+1)
	if len(lines) > n {
		lines = append(lines[:n], "...")
	}
	return strings.Join(lines, " | ")
}

// plan is a batch as bin/plan wrote it, with what each refund must be.
type plan struct {
	Path  string
	Batch string
	Items []plannedItem
	index map[string]int
}

type plannedItem struct {
	refund.Item
	// Want is the amount the item's refund must have.
	Want int64
}

func (p *plan) lookup(item string) (*plannedItem, bool) {
	i, ok := p.index[item]
	if !ok {
		return nil, false
	}
	return &p.Items[i], true
}

// writeCharges writes charges as the CSV a support team would export:
// every 5th a partial refund of half the charge, every 7th named by its
// payment intent.
func (r *rig) writeCharges(name string, charges []stripesim.Charge) string {
	return r.writeChargesCSV(name, charges, false)
}

// writePartialCharges is writeCharges with a third of every charge
// refunded: a second refund of a charge would succeed, so Stripe's own
// "already refunded" check hides no duplicate.
func (r *rig) writePartialCharges(name string, charges []stripesim.Charge) string {
	return r.writeChargesCSV(name, charges, true)
}

func (r *rig) writeChargesCSV(name string, charges []stripesim.Charge, partial bool) string {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	w.Write([]string{"charge", "payment_intent", "amount", "currency", "reason"})
	for i, ch := range charges {
		row := []string{ch.ID, "", "", "usd", refund.Reasons[i%len(refund.Reasons)]}
		if i%7 == 3 && ch.PaymentIntent != "" {
			row[0], row[1] = "", ch.PaymentIntent
		}
		switch {
		case partial:
			row[2] = strconv.FormatInt(ch.Amount/3, 10)
		case i%5 == 0:
			row[2] = strconv.FormatInt(ch.Amount/2, 10)
		}
		w.Write(row)
	}
	w.Flush()
	path := r.path(name)
	r.must(os.WriteFile(path, b.Bytes(), 0o600))
	return path
}

// makePlan runs bin/plan over a charges file and reads back the items.
func (r *rig) makePlan(name, batch, chargesPath string, extra ...string) *plan {
	p := r.run(nil, "plan", append([]string{"--batch", batch, chargesPath}, extra...)...)
	if p.code != 0 {
		r.fatalf("setup: plan exited %d: %s", p.code, firstLines(p.stderr.String(), 3))
	}
	path := r.path(name)
	r.must(os.WriteFile(path, p.stdout.Bytes(), 0o600))
	pl := &plan{Path: path, Batch: batch, index: map[string]int{}}
	sc := bufio.NewScanner(bytes.NewReader(p.stdout.Bytes()))
	for sc.Scan() {
		var it plannedItem
		r.must(json.Unmarshal(sc.Bytes(), &it.Item))
		ch, ok := r.charges[it.Charge+it.PaymentIntent]
		if !ok {
			r.fatalf("setup: plan names %s, which the simulator does not hold", it.Charge+it.PaymentIntent)
		}
		it.Want = it.Amount
		if it.Want == 0 {
			it.Want = ch.Amount
			for _, s := range ch.Refunds {
				it.Want -= s.Amount
			}
		}
		pl.index[it.Item.Item] = len(pl.Items)
		pl.Items = append(pl.Items, it)
	}
	return pl
}

var summaryRE = regexp.MustCompile(`refund: (\d+) items: (\d+) refunded, (\d+) skipped, (\d+) failed, (\d+) in_doubt.*; (\d+) create and (\d+) list calls, (\d+) retried, (\d+) rate-limited, (\d+) reconciled, (\d+) new keys`)

// summary is refund's summary line on stderr, parsed.
type summary struct {
	Items, Refunded, Skipped, Failed, InDoubt int
	Creates, Lists, Retried, RateLimited      int
	Reconciled, NewKeys                       int
}

func parseSummary(stderr string) (summary, bool) {
	m := summaryRE.FindStringSubmatch(stderr)
	if m == nil {
		return summary{}, false
	}
	n := make([]int, len(m))
	for i := 1; i < len(m); i++ {
		n[i], _ = strconv.Atoi(m[i])
	}
	return summary{n[1], n[2], n[3], n[4], n[5], n[6], n[7], n[8], n[9], n[10], n[11]}, true
}

// striker signals the refund process under test from inside the
// simulator's create hook, when the count of reserved keys reaches a mark:
// the moment a refund call is in flight. With SIGKILL it waits for the
// process to be gone before the request goes on, so the simulator commits
// a refund whose outcome the journal can never have.
type striker struct {
	sig     syscall.Signal
	current atomic.Pointer[proc]
	mark    atomic.Int64 // 0: disarmed
}

// newStriker installs the striker's hook; it is removed when the rig
// closes.
func (r *rig) newStriker(sig syscall.Signal) *striker {
	s := &striker{sig: sig}
	s.install(r)
	r.cleanup(func() { r.setOnCreate(nil) })
	return s
}

// install (re)installs the striker's hook, after another took its place.
func (s *striker) install(r *rig) { r.setOnCreate(s.hook) }

// hook is the striker's part of a create hook, for hooks that do more.
func (s *striker) hook(n int64, _ string) {
	if at := s.mark.Load(); at > 0 && n >= at && s.mark.CompareAndSwap(at, 0) {
		if pr := s.current.Load(); pr != nil {
			pr.cmd.Process.Signal(s.sig)
			if s.sig == syscall.SIGKILL {
				<-pr.exited
			}
		}
	}
}

// arm makes the striker hit pr within the next gap keys the simulator
// reserves, at a point drawn from the rig's seed.
func (s *striker) arm(r *rig, pr *proc, gap int) {
	s.armAt(pr, r.creates.Load()+1+r.rng.Int64N(int64(max(gap, 1))))
}

// armAt makes the striker hit pr at the at-th key the simulator reserves.
func (s *striker) armAt(pr *proc, at int64) {
	s.current.Store(pr)
	s.mark.Store(at)
}

// disarm is called once the process has exited.
func (s *striker) disarm() {
	s.mark.Store(0)
	s.current.Store(nil)
}

// hold parks refund calls at the simulator, inside its create hook, with
// their keys reserved and nothing committed: the n calls that reserve keys
// from number at on wait there until free. held is closed once all n are
// parked.
type hold struct {
	at, n   int64
	mu      sync.Mutex
	keys    []string
	held    chan struct{}
	release chan struct{}
	once    sync.Once
}

// newHold makes a hold of n calls from the at-th on; it is freed when the
// rig closes at the latest (the simulator's Close waits for its hook).
func (r *rig) newHold(at, n int64) *hold {
	h := &hold{at: at, n: n, held: make(chan struct{}), release: make(chan struct{})}
	r.cleanup(h.free)
	return h
}

// holdNext makes a hold of 1 to most calls, starting within the next gap
// keys the simulator reserves, in a batch that reserves total keys in all
// (each item's key once: no faults, no keys forgotten); nil when none is
// left to hold. It never asks for calls that will not come, so held
// closes unless the run ends first.
func (r *rig) holdNext(total, gap, most int) *hold {
	at := r.creates.Load() + 1 + r.rng.Int64N(int64(max(gap, 1)))
	n := min(1+r.rng.Int64N(int64(most)), int64(total)-at+1)
	if n <= 0 {
		return nil
	}
	return r.newHold(at, n)
}

// park is the hold's part of a create hook: a call in its range waits.
func (h *hold) park(n int64, key string) {
	if n < h.at || n >= h.at+h.n {
		return
	}
	h.mu.Lock()
	h.keys = append(h.keys, key)
	if len(h.keys) == int(h.n) {
		close(h.held)
	}
	h.mu.Unlock()
	<-h.release
}

// parked are the keys of the calls parked so far.
func (h *hold) parked() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.keys...)
}

// free lets the parked calls go on; later calls of the range pass.
func (h *hold) free() { h.once.Do(func() { close(h.release) }) }

// background waits for p on a goroutine of its own; the channel is closed
// once it has exited and been checked.
func (r *rig) background(p *proc) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		r.wait(p)
		close(done)
	}()
	return done
}

// parseKey splits an idempotency key refundkit made into its batch, item
// and attempt (a batch has no colon; an item may).
func parseKey(key string) (batch, item string, attempt int, ok bool) {
	rest, ok := strings.CutPrefix(key, "refundkit:")
	if !ok {
		return "", "", 0, false
	}
	batch, rest, ok = strings.Cut(rest, ":")
	i := strings.LastIndexByte(rest, ':')
	if !ok || i < 0 {
		return "", "", 0, false
	}
	attempt, err := strconv.Atoi(rest[i+1:])
	if err != nil {
		return "", "", 0, false
	}
	return batch, rest[:i], attempt, true
}
