package main

// The operator row with refund calls held in flight while a tool merges
// onto the journal in use, then replaces it behind the run's back.

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

const whatMerge = "While `refund` holds journal J with one to three refund calls held in flight, `journal-merge -o J` (with another batch's journal, with J itself, or `--compact` in place) must be refused with exit 4, naming J and its lock, and leave J as it was: the same file, every record in place, no other batch's record, no file left beside it. " +
	"Then J is replaced behind the run's back as a tool that ignores the lock would (a copy renamed over it); once the held calls go on, the run must notice at its next journal write and halt with exit 3, saying the journal was replaced. " +
	"The next run goes on from the copy (the records the old file got after the rename are lost to it: their items are found by the look-up); the last run exits 0, every item once."

func runMerge(r *rig, sz sizes) {
	other := r.otherJournal()
	p := r.newPartialBatch(sz.MergeItems, stripesim.Faults{LatencyJitter: time.Millisecond}, "merge")
	j := r.path("j.jsonl")
	cur := r.parkCreates()
	defer r.sim.OnCreate(nil)
	merges := [][]string{{"-o", j, other}, {"-o", j, j, other}, {"--compact", "-o", j, j}}
	gap := max(2, len(p.Items)/(sz.MergeRounds+1))
	refused, replaced := 0, 0
	for round := 0; round < sz.MergeRounds; round++ {
		h := r.holdNext(len(p.Items), gap, 3)
		if h == nil {
			break // nothing left to hold: the last run finishes
		}
		cur.Store(h)
		snap := crashrig.TakeSnapshot(j)
		pr := r.startRefund(j, p.Path)
		done := r.background(pr)
		select {
		case <-h.Held():
		case <-done: // the batch was done before the hold
			cur.Store(nil)
			h.Free()
			r.checkKept(snap)
			r.expectExit(pr, "a run that finished before its hold", 0)
			continue
		}
		cur.Store(nil)

		args := merges[round%len(merges)]
		if r.mergeRefused(j, args) {
			refused++
		}

		// An unlocked tool's rewrite: a copy renamed over J. The old file
		// keeps a name, so the intents the run gives it still count.
		old := r.path(fmt.Sprintf("replaced-%d.jsonl", round))
		r.must(os.Link(j, old))
		r.retired = append(r.retired, old)
		r.must(copyFile(j, j+".tmp"))
		r.must(os.Rename(j+".tmp", j))
		h.Free()
		<-done
		if r.expectExit(pr, "a run whose journal was replaced behind its back", exitJournal) {
			replaced++
			if msg := pr.Stderr.String(); !strings.Contains(msg, "replaced") || !strings.Contains(msg, j) {
				r.t.Errorf("the halt does not say %s was replaced: %s", j, firstLines(msg, 3))
			}
		}
	}
	snap := crashrig.TakeSnapshot(j)
	pr := r.startRefund(j, p.Path)
	r.wait(pr)
	r.checkKept(snap)
	r.expectExit(pr, "the run after the merges and the rewrites", 0)
	r.t.inject("merges onto a live journal refused", refused)
	r.t.inject("journals replaced behind a run (halted, exit 3)", replaced)
	r.t.note("seed %d: %d items; %d merges onto the journal in use refused, %d runs halted when their journal was replaced", r.seed, len(p.Items), refused, replaced)
	r.finish(p, j)
}

// otherJournal writes the journal of another batch the merges take in: one
// intent, which must never reach the journal in use.
func (r *rig) otherJournal() string {
	other := r.path("other.jsonl")
	rec := journal.Record{V: journal.Version, Type: journal.TypeIntent, Time: time.Now().UTC(), Batch: "other", Item: "o1",
		Charge: "ch_other1", Attempt: 1, Key: refund.IdempotencyKey("other", "o1", 1), Amount: 500}
	line, err := journal.MarshalLine(nil, &rec)
	r.must(err)
	r.must(os.WriteFile(other, line, 0o600))
	return other
}

// mergeRefused runs journal-merge with args onto j, which a run holds: it
// must exit 4 naming j and leave j as it was. It reports whether it did.
func (r *rig) mergeRefused(j string, args []string) bool {
	what := "journal-merge " + strings.Join(args, " ") + " onto a journal in use"
	before := crashrig.TakeSnapshot(j)
	info, err := os.Stat(j)
	r.must(err)
	files := r.dirNames()
	pr := r.run(nil, "journal-merge", args...)
	ok := r.expectExit(pr, what, exitLocked)
	if msg := pr.Stderr.String(); !strings.Contains(msg, j) || !strings.Contains(msg, "lock") {
		r.t.Errorf("%s: the message does not name the journal and its lock: %s", what, firstLines(msg, 3))
		ok = false
	}
	if now, err := os.Stat(j); err != nil || !os.SameFile(info, now) {
		r.t.Lost += before.Records()
		r.t.Errorf("%s: the journal is another file now", what)
		return false
	}
	if n := before.Lost(); n > 0 {
		r.t.Lost += n
		r.t.Errorf("%s: %d records of the journal are gone", what, n)
		ok = false
	}
	now, err := crashrig.ReadJournal(j)
	r.must(err)
	if slices.ContainsFunc(now.Lines, func(l crashrig.Line) bool { return l.Record.Batch == "other" }) {
		r.t.Errorf("%s: the other batch's record is in the journal", what)
		ok = false
	}
	if now := r.dirNames(); !slices.Equal(files, now) {
		r.t.Errorf("%s: the files beside it changed from %v to %v", what, files, now)
		ok = false
	}
	return ok
}

// dirNames are the names in the rig's directory, sorted.
func (r *rig) dirNames() []string {
	entries, err := os.ReadDir(r.dir)
	r.must(err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}
