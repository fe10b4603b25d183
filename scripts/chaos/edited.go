package main

// The edited-plan operator row: a plan changed after a crash must be
// refused before anything is sent for the changed item.

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

const whatEdited = "A batch of partial refunds is killed with SIGKILL at a random refund call; then items the journal holds get their charge (or payment intent), amount or currency changed in a copy of the plan, one edit a copy, each kind in turn. " +
	"`refund` over the edited plan must exit 2 naming `file:line` of the edited item and both values; when every item before it is settled in the journal it must make zero API calls (no look-up, no create), and in any case no key may be sent for the edited item or any after it. " +
	"The edited charges are real charges of the simulator outside the plan: a refund sent there would count as a duplicate. After each round the original plan resumes; at the end it finishes with exit 0, every item once."

// planEdit changes one plan line the way an operator would after a crash:
// it returns the old and new values as refund's message quotes them.
type planEdit struct {
	name string
	edit func(r *rig, it *plannedItem, spare stripesim.Charge) (from, to string, ok bool)
}

// edits are the kinds of edit, one of each field.
var edits = []planEdit{
	{"charge", func(r *rig, it *plannedItem, spare stripesim.Charge) (string, string, bool) {
		if it.PaymentIntent != "" {
			return strconv.Quote(it.PaymentIntent), strconv.Quote(spare.PaymentIntent), true
		}
		return strconv.Quote(it.Charge), strconv.Quote(spare.ID), true
	}},
	{"amount", func(r *rig, it *plannedItem, _ stripesim.Charge) (string, string, bool) {
		if it.Amount == 0 {
			return "", "", false
		}
		return strconv.FormatInt(it.Amount, 10), strconv.FormatInt(it.Amount+1+r.rng.Int64N(9), 10), true
	}},
	{"currency", func(r *rig, it *plannedItem, _ stripesim.Charge) (string, string, bool) {
		if it.Currency == "" {
			return "", "", false
		}
		return strconv.Quote(it.Currency), strconv.Quote("eur"), true
	}},
}

func runEdited(r *rig, sz sizes) {
	all := stripesim.GenerateCharges(sz.EditItems+2*sz.EditRounds+2, int64(r.seed))
	charges, spares := all[:sz.EditItems], all[sz.EditItems:]
	r.serve(all, stripesim.Faults{LatencyJitter: time.Millisecond})
	p := r.makePlan("plan.jsonl", "edited", r.writePartialCharges("charges.csv", charges))
	lines := bytes.SplitAfter(r.readFile(p.Path), []byte("\n"))
	j := r.path("j.jsonl")
	kill := r.newStriker(syscall.SIGKILL)
	gap := max(2, len(p.Items)/(sz.EditRounds+1))

	var edited, silent [2]int // by prefix: [0] any item held, [1] every item before it settled
	for round := 0; ; round++ {
		if round > sz.EditRounds+10 {
			r.fatalf("not done after %d runs", round)
		}
		snap := crashrig.TakeSnapshot(j)
		pr := r.startRefund(j, p.Path)
		if round < sz.EditRounds {
			kill.Arm(r.sim, pr.Proc, r.rng, gap)
		}
		r.wait(pr)
		kill.Disarm()
		r.checkKept(snap)
		if pr.Code == 0 {
			break
		}
		if !r.expectExit(pr, "a run under kill -9", -int(syscall.SIGKILL)) {
			continue
		}
		st, _, err := journal.Load(j)
		r.must(err)
		// Each kind on an item all of whose predecessors are settled (no
		// call may be made), then one on any item the journal holds.
		for k := range len(edits) + 1 {
			e, prefix := edits[k%len(edits)], k < len(edits)
			if !prefix {
				e = edits[round%len(edits)]
			}
			at := r.pickEdit(p, st, prefix)
			if at < 0 {
				continue
			}
			path, from, to, ok := r.editPlan(p, lines, at, e, spares[(round*2+k/len(edits))%len(spares)], fmt.Sprintf("edited-%d-%d-%s.jsonl", round, k, e.name))
			if !ok {
				continue
			}
			v := 0
			if prefix {
				v = 1
			}
			edited[v]++
			if r.checkEditRefused(p, j, path, at, e.name, from, to, prefix) {
				silent[v]++
			}
		}
	}
	r.t.inject("plan items edited after a crash", edited[0]+edited[1])
	r.t.note("seed %d: %d items; %d edited plans refused: %d with every item before the edit settled, all with zero API calls (%d); %d at any item the journal holds, %d of them with zero API calls (the others went on with items before the edit)",
		r.seed, len(p.Items), edited[0]+edited[1], edited[1], silent[1], edited[0], silent[0])
	r.finish(p, j)
}

// editPlan writes a copy of plan p (its lines) named name, with item at
// edited by e, and returns its path and the old and new
// values as refund's message quotes them; ok is false when the edit does
// not apply to the item.
func (r *rig) editPlan(p *plan, lines [][]byte, at int, e planEdit, spare stripesim.Charge, name string) (path, from, to string, ok bool) {
	it := &p.Items[at]
	if from, to, ok = e.edit(r, it, spare); !ok {
		return "", "", "", false
	}
	field := jsonField(e.name, it)
	line := lines[at]
	changed := bytes.Replace(line, []byte(fmt.Sprintf("%q:%s", field, from)), []byte(fmt.Sprintf("%q:%s", field, to)), 1)
	if bytes.Equal(changed, line) {
		r.fatalf("setup: plan line %d has no %s %s: %s", at+1, field, from, line)
	}
	var b bytes.Buffer
	for i, l := range lines {
		if i == at {
			l = changed
		}
		b.Write(l)
	}
	path = r.path(name)
	r.must(os.WriteFile(path, b.Bytes(), 0o600))
	return path, from, to, true
}

// jsonField is the plan field an edit of kind changes.
func jsonField(kind string, it *plannedItem) string {
	if kind == "charge" && it.PaymentIntent != "" {
		return "payment_intent"
	}
	return kind
}

// pickEdit draws a plan item the journal holds an intent of, by index, or
// -1 if none. With settledBefore it draws among items all of whose
// predecessors the journal has settled (refunded or failed for good): the
// run then has nothing to call before it reaches the edited line.
func (r *rig) pickEdit(p *plan, st *journal.State, settledBefore bool) int {
	var held []int
	for i, it := range p.Items {
		s, known := st.Lookup(p.Batch, it.Item.Item)
		if known && s.Sent {
			held = append(held, i)
		}
		if settledBefore && s.Status != journal.StatusRefunded && s.Status != journal.StatusFailed {
			break // known or not, a later item has this one before it
		}
	}
	if len(held) == 0 {
		return -1
	}
	return held[r.rng.IntN(len(held))]
}

// checkEditRefused runs refund over an edited plan and checks it refused
// the edited line, at, before sending anything for it or after it; with
// prefix, before any API call at all. It reports whether no call was made.
func (r *rig) checkEditRefused(p *plan, j, path string, at int, kind, from, to string, prefix bool) bool {
	it := &p.Items[at]
	what := fmt.Sprintf("plan with item %s's %s edited from %s to %s at line %d", it.Item.Item, kind, from, to, at+1)
	creates, lists := r.calls()
	keys := r.sim.Creates()
	snap := crashrig.TakeSnapshot(j)
	pr := r.startRefund(j, path)
	r.wait(pr)
	r.checkKept(snap)
	r.expectExit(pr, what, exitUsage)
	msg := pr.Stderr.String()
	if want := fmt.Sprintf("%s:%d:", path, at+1); !strings.Contains(msg, want) {
		r.t.Errorf("%s: the message does not name %s: %s", what, want, firstLines(msg, 2))
	}
	if !strings.Contains(msg, from) || !strings.Contains(msg, to) {
		r.t.Errorf("%s: the message does not name both %s and %s: %s", what, from, to, firstLines(msg, 2))
	}
	after := map[string]bool{}
	for _, later := range p.Items[at:] {
		after[later.Item.Item] = true
	}
	r.checkNoCreate(p.Batch, after, keys, what, "at or after the edited line")
	creates2, lists2 := r.calls()
	silent := creates2 == creates && lists2 == lists
	if prefix && !silent {
		r.t.Errorf("%s: every item before it is settled, yet refund made %d creates and %d reads", what, creates2-creates, lists2-lists)
	}
	return silent
}
