package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/checkpoint/natsjs/natstest"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// rig is one run of one scenario: a seed, a simulator, a work directory,
// and the tally it adds its findings to.
type rig struct {
	m    *matrix
	t    *tally
	seed uint64
	rng  *rand.Rand
	dir  string
	sim  *crashrig.Sim
	// prov is the refund API the scenario runs refund against.
	prov provider
	// payments the simulator holds, by every id a plan may name them by:
	// charge, payment intent, capture.
	payments map[string]payment

	cleanups []func()

	// meant are the plans whose refunds are meant to stay at the
	// simulator, and extra the refunds meant on payments besides theirs
	// (an old script's), by payment id: what the per-payment check allows.
	meant []*plan
	extra map[string]int
	// dups are the refunds beyond what is meant, by payment, counted so far.
	dups map[string]int
	// retired are journals a scenario replaced or deleted on purpose: their
	// intents still count for the write-ahead check.
	retired []string

	// shared opens the row's shared checkpoints (PostgreSQL, NATS) by a
	// name of the rig's; natsSrv is the NATS server of a NATS row.
	shared  func(r *rig, name string) sharedCheckpoint
	natsSrv *natstest.Server
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
		rng:      rand.New(rand.NewPCG(seed, uint64(len(t.Name)))),
		payments: map[string]payment{},
		extra:    map[string]int{},
		dups:     map[string]int{},
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
	r.t.Errorf(format, args...)
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
	r.serveConfig(stripesim.Config{Charges: charges, Faults: faults})
}

// serveCharges starts the simulator with n charges of the rig's seed.
func (r *rig) serveCharges(n int, faults stripesim.Faults) []stripesim.Charge {
	charges := stripesim.GenerateCharges(n, int64(r.seed))
	r.serve(charges, faults)
	return charges
}

// needs skips a row when bin/name is not built.
func needs(name string, run func(*rig, sizes)) func(*rig, sizes) {
	return func(r *rig, sz sizes) {
		if r.m.bins[name] == "" {
			r.t.Skipped = "bin/" + name + " is not built"
			return
		}
		run(r, sz)
	}
}

// serveConfig starts the simulator with cfg, seeded with the rig's seed.
func (r *rig) serveConfig(cfg stripesim.Config) {
	cfg.Seed = int64(r.seed)
	sim, err := crashrig.StartSim(cfg)
	r.must(err)
	r.sim = sim
	for _, ch := range cfg.Charges {
		r.payments[ch.ID] = chargePayment(ch)
		if ch.PaymentIntent != "" {
			r.payments[ch.PaymentIntent] = chargePayment(ch)
		}
	}
	for _, cp := range cfg.PayPal.Captures {
		r.payments[cp.ID] = capturePayment(cp)
	}
	for _, ap := range cfg.Adyen.Payments {
		r.payments[ap.PSPReference] = payment{ID: ap.PSPReference, Amount: ap.Amount}
	}
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
		if err != nil {
			return nil
		}
		for _, sec := range secrets {
			if bytes.Contains(b, []byte(sec.part)) {
				r.t.Errorf("the %s is in %s", sec.name, filepath.Base(path))
			}
		}
		return nil
	})
}

// proc is one run of a binary, named for the messages.
type proc struct {
	*crashrig.Proc
	name string
}

// start runs bin with args in the rig's directory, stdin from in (nil:
// none), the fake credentials of both APIs and the simulator's URL in its
// environment. It does not wait.
func (r *rig) start(in io.Reader, bin string, args ...string) *proc {
	path := r.m.bins[bin]
	if path == "" {
		r.fatalf("setup: bin/%s is not built", bin)
	}
	base := ""
	if r.sim != nil {
		base = r.sim.URL()
	}
	p, err := crashrig.Start(crashrig.Cmd{Bin: path, Args: args, Dir: r.dir, Stdin: in, Env: simEnv(base)})
	r.must(err)
	return &proc{Proc: p, name: bin}
}

// wait waits for p and checks its output for the key and for panics.
func (r *rig) wait(p *proc) int {
	p.Wait()
	for stream, b := range map[string][]byte{"stdout": p.Stdout.Bytes(), "stderr": p.Stderr.Bytes()} {
		for _, sec := range secrets {
			if bytes.Contains(b, []byte(sec.part)) {
				r.t.Errorf("the %s is in the %s of %s", sec.name, stream, p.name)
			}
		}
	}
	if bytes.Contains(p.Stderr.Bytes(), []byte("panic:")) || bytes.Contains(p.Stderr.Bytes(), []byte("goroutine ")) {
		r.t.Errorf("%s panicked: %s", p.name, firstLines(p.Stderr.String(), 3))
	}
	if p.name == "refund" {
		r.t.countRun()
	}
	return p.Code
}

// run starts bin and waits for it.
func (r *rig) run(in io.Reader, bin string, args ...string) *proc {
	p := r.start(in, bin, args...)
	r.wait(p)
	return p
}

// startRefund starts refund over a plan file at full speed through the
// rig's provider, -j 8 unless extra says otherwise.
func (r *rig) startRefund(journalPath, planPath string, extra ...string) *proc {
	args := append([]string{"--journal", journalPath, "--rate", "0", "--progress", "never", "-j", "8"}, r.prov.args()...)
	args = append(args, extra...)
	return r.start(nil, "refund", append(args, planPath)...)
}

// runStruck runs refund over planPath to its end, struck by kill within
// the next gap keys the simulator reserves when strike says so, and checks
// that the run kept every record the journal held before it.
func (r *rig) runStruck(kill *crashrig.Striker, strike bool, gap int, journalPath, planPath string, extra ...string) *proc {
	snap := crashrig.TakeSnapshot(journalPath)
	// The mark counts from before the start, and is set before it: on a
	// busy machine the run may make its calls before this goroutine arms
	// the striker, and a mark counted or set from then would never be met.
	var mark int64
	if strike {
		mark = r.sim.Creates() + 1 + r.rng.Int64N(int64(max(gap, 1)))
		kill.Prime(mark) // a call at the mark before ArmAt waits for it
	}
	pr := r.startRefund(journalPath, planPath, extra...)
	if strike {
		kill.ArmAt(pr.Proc, mark)
	}
	r.wait(pr)
	kill.Disarm()
	r.checkKept(snap)
	return pr
}

// calm waits (a minute at most) for the requests still running at the
// simulator behind a gateway's timeout, then turns every fault off: what
// the checks and audit ask then is answered as it stands.
func (r *rig) calm() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r.must(r.sim.Settle(ctx))
	r.must(r.sim.SetFaults(stripesim.Faults{}))
}

// finished reports whether p, one of the runs of a loop that goes on until
// one exits 0, was that one. Any other exit must be one of again (each
// counted in ends, by code), or it is a problem; the loop goes on.
func (r *rig) finished(p *proc, ends map[int]int, what string, again ...int) bool {
	if p.Code == 0 {
		return true
	}
	if r.expectExit(p, what, append([]int{0}, again...)...) {
		ends[p.Code]++
	}
	return false
}

// expectExit counts a problem unless p exited with one of want.
func (r *rig) expectExit(p *proc, what string, want ...int) bool {
	for _, w := range want {
		if p.Code == w {
			return true
		}
	}
	r.t.Errorf("%s: %s exited %d, want %v: %s", what, p.name, p.Code, want, firstLines(p.Stderr.String(), 4))
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
	// Args are refund's own for this plan: --shard K/N for a shard that
	// reads the whole plan at Path and works Items.
	Args []string
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
	rows := [][]string{{"charge", "payment_intent", "amount", "currency", "reason"}}
	for i, ch := range charges {
		row := []string{ch.ID, "", exportAmount(i, ch.Amount, partial), "usd", refund.Reasons[i%len(refund.Reasons)]}
		if i%7 == 3 && ch.PaymentIntent != "" {
			row[0], row[1] = "", ch.PaymentIntent
		}
		rows = append(rows, row)
	}
	return r.writeCSV(name, rows)
}

// exportAmount is the amount column of the i-th payment of an export: a
// third of every payment when partial, else half of every 5th and the
// rest ("") of the others.
func exportAmount(i int, amount int64, partial bool) string {
	switch {
	case partial:
		return strconv.FormatInt(amount/3, 10)
	case i%5 == 0:
		return strconv.FormatInt(amount/2, 10)
	}
	return ""
}

// writeCSV writes rows as a CSV file in the rig's directory.
func (r *rig) writeCSV(name string, rows [][]string) string {
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	r.must(w.WriteAll(rows))
	path := r.path(name)
	r.must(os.WriteFile(path, b.Bytes(), 0o600))
	return path
}

// makePlan runs bin/plan over a charges file and reads back the items.
func (r *rig) makePlan(name, batch, chargesPath string, extra ...string) *plan {
	p := r.run(nil, "plan", append([]string{"--batch", batch, chargesPath}, extra...)...)
	if p.Code != 0 {
		r.fatalf("setup: plan exited %d: %s", p.Code, firstLines(p.Stderr.String(), 3))
	}
	path := r.path(name)
	r.must(os.WriteFile(path, p.Stdout.Bytes(), 0o600))
	pl := &plan{Path: path, Batch: batch, index: map[string]int{}}
	sc := bufio.NewScanner(bytes.NewReader(p.Stdout.Bytes()))
	for sc.Scan() {
		var it plannedItem
		r.must(json.Unmarshal(sc.Bytes(), &it.Item))
		pay, ok := r.payments[it.Target()]
		if !ok {
			r.fatalf("setup: plan names %s, which the simulator does not hold", it.Target())
		}
		it.Want = it.Amount
		if it.Want == 0 {
			it.Want = pay.Amount - pay.Refunded
		}
		pl.index[it.Item.Item] = len(pl.Items)
		pl.Items = append(pl.Items, it)
	}
	return pl
}

var summaryRE = regexp.MustCompile(`refund: (\d+) items(?: \([^)]*\))?: (\d+) refunded, (\d+) skipped, (\d+) failed, (\d+) in_doubt.*; (\d+) creates, (\d+) payment reads, (\d+) (?:refund lists|notification look-ups?), (\d+) refund reads, (\d+) retried, (\d+) rate-limited, (\d+) reconciled, (\d+) new keys`)

// summary is refund's summary line on stderr, parsed.
type summary struct {
	Items, Refunded, Skipped, Failed, InDoubt int
	Creates, Lists, Retried, RateLimited      int // Lists: every read (payment, refund list, refund)
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
	return summary{n[1], n[2], n[3], n[4], n[5], n[6], n[7] + n[8] + n[9], n[10], n[11], n[12], n[13]}, true
}

// newStriker makes a striker that sends sig and installs its hook; it is
// removed when the rig closes.
func (r *rig) newStriker(sig syscall.Signal) *crashrig.Striker {
	s := crashrig.NewStriker(sig)
	r.sim.OnCreate(s.Hook)
	r.cleanup(func() { r.sim.OnCreate(nil) })
	return s
}

// newHold makes a hold of n calls from the at-th on; it is freed when the
// rig closes at the latest (the simulator's Close waits for its hook).
func (r *rig) newHold(at, n int64) *crashrig.Hold {
	h := crashrig.NewHold(at, n)
	r.cleanup(h.Free)
	return h
}

// parkCreates makes the simulator's create hook park each call in the
// hold the returned pointer holds (none while it is nil), until the
// caller removes the hook.
func (r *rig) parkCreates() *atomic.Pointer[crashrig.Hold] {
	var cur atomic.Pointer[crashrig.Hold]
	r.sim.OnCreate(func(n int64, key string) {
		if h := cur.Load(); h != nil {
			h.Park(n, key)
		}
	})
	return &cur
}

// holdNext makes a hold of 1 to most calls, starting within the next gap
// keys the simulator reserves, in a batch that reserves total keys in all
// (each item's key once: no faults, no keys forgotten); nil when none is
// left to hold. It never asks for calls that will not come, so Held
// closes unless the run ends first.
func (r *rig) holdNext(total, gap, most int) *crashrig.Hold {
	at := r.sim.Creates() + 1 + r.rng.Int64N(int64(max(gap, 1)))
	n := min(1+r.rng.Int64N(int64(most)), int64(total)-at+1)
	if n <= 0 {
		return nil
	}
	return r.newHold(at, n)
}

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

// parseKey is crashrig.ParseKey with the attempt as a number.
func parseKey(key string) (batch, item string, attempt int, ok bool) {
	batch, item, n, ok := crashrig.ParseKey(key)
	if !ok {
		return "", "", 0, false
	}
	attempt, _ = strconv.Atoi(n)
	return batch, item, attempt, true
}
