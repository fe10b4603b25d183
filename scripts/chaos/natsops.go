package main

// NATS rows where the operator errs between runs: a new batch name on
// charges already refunded, an edited plan, a wrong URL or NAME. The
// checkpoint stores a batch's whole plan at its first load, so any change
// to it is refused before a claim, let alone a call.

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/refundkit/refundkit/refund/sim/stripesim"
)

// killedRound starts slots workers and, at a refund call drawn within the
// next gap, kills every one of them with SIGKILL from inside the
// simulator's create hook (the calls in flight commit after they are
// gone). It returns how many it killed: 0 when they finished first.
func (b *sharedBatch) killedRound(slots, gap int) int {
	r := b.r
	before, err := b.cp.snapshot()
	r.must(err)
	defer b.checkKept(before, "after a round killed at once")
	at := r.sim.Creates() + 1 + r.rng.Int64N(int64(max(gap, 1)))
	killed := 0
	r.sim.OnCreate(func(n int64, _ string) {
		if n != at {
			return
		}
		for _, w := range b.live() {
			w.Cmd.Process.Kill()
			<-w.Exited()
		}
	})
	defer r.sim.OnCreate(nil)
	ws := make([]*sharedWorker, slots)
	for i := range ws {
		ws[i] = b.start()
	}
	for _, w := range ws {
		<-w.done
		if r.expectExit(w.proc, "a worker of a round killed at once", 0, -int(syscall.SIGKILL)) && w.Code != 0 {
			killed++
		}
	}
	return killed
}

// killedAtOnce is what killedRound injects.
const killedAtOnce = "workers killed -9 at once, calls in flight"

// checkRefusedRun runs one refund over the plan at planPath into
// --journal url: it must exit with code and a message holding each of
// want, having made no API call and written no record to b's checkpoint.
func (b *sharedBatch) checkRefusedRun(url, planPath string, code int, what string, want ...string) {
	r := b.r
	before, err := b.cp.snapshot()
	r.must(err)
	creates, lists := r.calls()
	keys := r.sim.Creates()
	pr := r.startRefund(url, planPath, "--lease", b.lease.String())
	r.wait(pr)
	r.expectExit(pr, what, code)
	msg := pr.Stderr.String()
	for _, w := range want {
		if !strings.Contains(msg, w) {
			r.t.Errorf("%s: the message does not name %s: %s", what, w, firstLines(msg, 3))
		}
	}
	if creates2, lists2 := r.calls(); creates2 != creates || lists2 != lists || r.sim.Creates() != keys {
		r.t.Errorf("%s: refund made %d creates and %d reads, want none", what, creates2-creates, lists2-lists)
	}
	if now, err := b.cp.snapshot(); err == nil && len(now) != len(before) {
		r.t.Errorf("%s: the checkpoint holds %d records, %d before", what, len(now), len(before))
	}
	b.checkKept(before, what)
}

const whatNATSNewBatch = "A batch of partial refunds, `day-1`, is worked by three `refund -j 8` workers on a NATS checkpoint, killed with SIGKILL with calls in flight (the item's holder, found in the checkpoint) and replaced until done. " +
	"The same charges are then planned under `day-2` and run by one worker, on the same checkpoint and on a new one (another NAME): every item must be held (result `failed`, code `refunded_by_other_batch`, naming batch day-1), exit 1, with zero create calls (one look-up per item). " +
	"Then `day-2` with `--allow-refunded-charges`, by three workers on the checkpoint that holds the hold (the same or the new one by seed), killed the same way, must refund each charge exactly once more and exit 0: two live refunds per charge, exactly, and audit clean for day-2 (with both plans on the checkpoint that holds both)."

func runNATSNewBatch(r *rig, sz sizes) {
	day1 := r.newSharedBatch(sz.NewBatchItems, stripesim.Faults{LatencyJitter: time.Millisecond}, "day-1", sharedLease)
	kills := day1.crewKilled(3, sz.NewBatchKills, "a day-1 worker under kill -9")
	day1.finish(nil)

	p2 := r.makePlan("day2.jsonl", "day-2", r.path("charges.csv"))
	same, fresh := day1.on(day1.cp, p2), day1.on(r.shared(r, "fresh"), p2)
	lists := int64(0)
	for _, b := range []*sharedBatch{same, fresh} {
		lists += b.checkHeld("day-1")
	}
	r.t.inject("runs of a new batch id on refunded charges", 2)

	final := []*sharedBatch{same, fresh}[r.seed%2]
	final.args = []string{"--allow-refunded-charges"}
	if final == same {
		final.auditPlan = r.joinPlans("both.jsonl", day1.p, p2)
	}
	kills += final.crewKilled(3, max(1, sz.NewBatchKills/2), "a day-2 worker with --allow-refunded-charges under kill -9")
	r.t.inject("kill -9 with a call in flight", kills)
	final.finish(nil)
	r.t.note("seed %d: %d charges; day-2 held twice with 0 create calls and %d look-ups; with --allow-refunded-charges on the %s checkpoint: %d refunds more, 2 live refunds on each charge",
		r.seed, len(p2.Items), lists, map[bool]string{true: "same", false: "new"}[final == same], len(r.sim.LiveRefunds(p2.Batch)))
}

// checkHeld runs one worker of b on charges batch other refunded: every
// item must be held with nothing sent, exit 1, and the checkpoint say so.
// It returns the look-ups made.
func (b *sharedBatch) checkHeld(other string) int64 {
	before, err := b.cp.snapshot()
	b.r.must(err)
	where := "checkpoint " + b.cp.url()
	lists := b.r.heldRun(b.p, where, other, func() *proc {
		w := b.start()
		<-w.done
		return w.proc
	})
	b.checkKept(before, "after a run of a held batch")
	b.r.checkHeldJournal(b.p, where, b.exportFile())
	return lists
}

const whatNATSEdited = "Three `refund -j 8` workers on a NATS checkpoint are all killed with SIGKILL at a random refund call (the calls in flight commit after they are gone). Then copies of the plan are fed to one worker: an item's charge (or payment intent), amount or currency changed, each kind in turn, at an item drawn from the whole plan (settled, in doubt or not started: the checkpoint stored the plan at its first load), a line dropped, and a line added on a real charge of the simulator outside the plan. " +
	"Each must exit 2 naming `file:line` of the edited or added item and both values (the dropped item by name), with zero API calls (no look-up, no create) and no record written. After each round the original plan resumes; at the end three workers finish it with exit 0, every item once."

func runNATSEdited(r *rig, sz sizes) {
	all := stripesim.GenerateCharges(sz.EditItems+2*sz.EditRounds+2, int64(r.seed))
	charges, spares := all[:sz.EditItems], all[sz.EditItems:]
	r.serve(all, stripesim.Faults{LatencyJitter: time.Millisecond})
	b := r.sharedBatchOf(r.makePlan("plan.jsonl", r.t.Name, r.writePartialCharges("charges.csv", charges)), sharedLease)
	p := b.p
	lines := bytes.SplitAfter(r.readFile(p.Path), []byte("\n"))
	if len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1] // what follows the last newline
	}
	gap := max(2, len(p.Items)/(sz.EditRounds+1))

	refused, kills := 0, 0
	for round := range sz.EditRounds {
		n := b.killedRound(3, gap)
		if n == 0 {
			break // done before the kill
		}
		kills += n
		for k, e := range edits {
			at := r.rng.IntN(len(p.Items))
			path, from, to, ok := r.editPlan(p, lines, at, e, spares[(round*2+k)%len(spares)], fmt.Sprintf("edited-%d-%s.jsonl", round, e.name))
			if !ok {
				continue
			}
			what := fmt.Sprintf("plan with item %s's %s edited from %s to %s at line %d", p.Items[at].Item.Item, e.name, from, to, at+1)
			b.checkRefusedRun(b.cp.url(), path, exitUsage, what, fmt.Sprintf("%s:%d:", path, at+1), from, to)
			refused++
		}
		// A line dropped: the checkpoint's plan has an item this one lacks.
		at := r.rng.IntN(len(p.Items))
		path := r.path(fmt.Sprintf("dropped-%d.jsonl", round))
		r.must(writeLines(path, append(append([][]byte{}, lines[:at]...), lines[at+1:]...)))
		item := p.Items[at].Item.Item
		b.checkRefusedRun(b.cp.url(), path, exitUsage, fmt.Sprintf("plan with line %d (item %s) dropped", at+1, item), path+":", fmt.Sprintf("%q", item), "missing")
		refused++
		// A line added, on a charge outside the plan.
		spare := spares[(round*2+1)%len(spares)]
		path = r.path(fmt.Sprintf("added-%d.jsonl", round))
		r.must(writeLines(path, append(append([][]byte{}, lines...), r.addedLine(p, lines, spare.ID))))
		b.checkRefusedRun(b.cp.url(), path, exitUsage, fmt.Sprintf("plan with an item added on %s", spare.ID), fmt.Sprintf("%s:%d:", path, len(lines)+1), fmt.Sprintf("%q", spare.ID))
		refused++
	}
	r.t.inject("plans edited, a line dropped or added, refused", refused)
	r.t.inject(killedAtOnce, kills)
	b.crew(3, "a worker of the original plan after the edits", nil)
	r.t.note("seed %d: %d items; %d workers killed; %d changed plans refused with zero API calls", r.seed, len(p.Items), kills, refused)
	b.finish(nil)
}

// addedLine is a plan line like the first of p on a charge, for a new item
// on charge id.
func (r *rig) addedLine(p *plan, lines [][]byte, id string) []byte {
	for i, it := range p.Items {
		if it.Charge == "" {
			continue
		}
		line := bytes.Replace(lines[i], []byte(fmt.Sprintf("%q:%q", "item", it.Item.Item)), []byte(fmt.Sprintf("%q:%q", "item", id)), 1)
		line = bytes.Replace(line, []byte(fmt.Sprintf("%q:%q", "charge", it.Charge)), []byte(fmt.Sprintf("%q:%q", "charge", id)), 1)
		if !bytes.Contains(line, []byte(fmt.Sprintf("%q:%q", "item", id))) || !bytes.Contains(line, []byte(fmt.Sprintf("%q:%q", "charge", id))) {
			r.fatalf("setup: plan line %d has no item %q and charge %q: %s", i+1, it.Item.Item, it.Charge, lines[i])
		}
		return line
	}
	r.fatalf("setup: the plan names no charge")
	return nil
}

func writeLines(path string, lines [][]byte) error {
	return os.WriteFile(path, bytes.Join(lines, nil), 0o600)
}

const whatNATSWrongURL = "Three `refund -j 8` workers on a NATS checkpoint are all killed with SIGKILL at a random refund call (the calls in flight commit after they are gone), leaving the batch part done with items in doubt. " +
	"The operator then reruns it with a wrong URL: a port where no server listens (exit 3, nothing sent), and a NAME that is not one (`bad.name`: exit 2, nothing sent), both with no record written; then a NAME that is one but not the batch's (a typo: a new, empty checkpoint): that run must find every refund the first workers made by its look-up, with no create call for an item that held a refund, and finish the batch with exit 0. " +
	"Back on the right NAME, three workers must find the refunds the typo's run made by their look-ups (no create call at all) and exit 0. Each payment holds exactly one refund, and audit of both checkpoints is clean."

func runNATSWrongURL(r *rig, sz sizes) {
	b := r.newSharedBatch(sz.WrongURLItems, stripesim.Faults{LatencyJitter: time.Millisecond}, r.t.Name, sharedLease)
	kills := b.killedRound(3, len(b.p.Items)/2)
	if kills == 0 {
		r.fatalf("the workers finished the batch before the kill")
	}
	port, err := freeLoopbackPort()
	r.must(err)
	b.checkRefusedRun(fmt.Sprintf("nats://127.0.0.1:%d/main", port), b.p.Path, exitJournal, "a run on a port where no NATS server listens")
	srv := r.natsServer()
	bad := srv.URL("bad.name")
	b.checkRefusedRun(bad, b.p.Path, exitUsage, "a run on a NAME that is not one", `"bad.name"`)
	r.t.inject(killedAtOnce, kills)
	r.t.inject("runs on a wrong URL refused", 2)

	before, since := r.refundedNow(b.p.Batch), r.sim.Creates()
	typo := b.on(r.shared(r, "mian"), b.p)
	w := typo.start()
	<-w.done
	r.expectExit(w.proc, "a run on a mistyped NAME", 0)
	r.checkNoCreate(b.p.Batch, before, since, "a run on a mistyped NAME", "which already had its refund")
	r.t.inject("runs on a mistyped NAME", 1)
	// Each checkpoint's intents count for the other's write-ahead check:
	// the keys the simulator saw were sent from both.
	r.retired = append(r.retired, b.exportFile())
	typo.finish(nil)
	r.retired = append(r.retired, typo.exportFile())

	found, since := r.refundedNow(b.p.Batch), r.sim.Creates()
	b.crew(3, "a worker back on the right NAME", nil)
	r.checkNoCreate(b.p.Batch, found, since, "a worker back on the right NAME", "which the run on the mistyped NAME refunded")
	r.t.note("seed %d: %d items; %d workers killed at once with %d items refunded; the run on the mistyped NAME found those and refunded the other %d; the workers back on the right NAME found all %d",
		r.seed, len(b.p.Items), kills, len(before), len(found)-len(before), len(found))
	b.finish(nil)
}

// freeLoopbackPort is a loopback port free a moment ago.
func freeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
