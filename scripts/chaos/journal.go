package main

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"syscall"

	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

const whatTorn = "A crash mid-write leaves a torn final line. Runs of `refund -j 8` are killed with SIGKILL at a random refund call, then the journal's tail is torn by hand in turn: " +
	"a random prefix of a record appended without its newline, the last record cut at a random byte (its group commit's line with it), or a run of NUL bytes (a file extended but never written). " +
	"The next run must report the torn tail, set it aside and resume, keeping every record of a complete group commit before it; the last run must exit 0. " +
	"Then the finished journal is corrupted in the middle, at a record from before the last run, so that a complete group commit follows it (a NUL byte inside a record, a record cut short with its newline kept, a record of version 2, a line of garbage): " +
	"`refund` must refuse it with exit 5 and `file:line` naming the corrupt line, leave the file byte for byte as it was, and call nothing."

// tearings are the ways a crash leaves a journal's tail. Each gets the
// journal as its reader sees it, whose last record is the last complete
// one.
var tearings = []struct {
	name string
	tear func(j *crashrig.Journal, r *rig) []byte
}{
	{"record prefix appended", func(j *crashrig.Journal, r *rig) []byte {
		last := lastRecord(j)
		if len(last) < 2 {
			return append(j.Data, `{"v":1,"ty`...)
		}
		return append(j.Data, last[:1+r.rng.IntN(len(last)-1)]...)
	}},
	{"last record cut", func(j *crashrig.Journal, r *rig) []byte {
		last := lastRecord(j)
		if len(last) < 2 {
			return append(j.Data, `{"v":1`...)
		}
		start := j.Lines[len(j.Lines)-1].Start
		return j.Data[:start+1+int64(r.rng.IntN(len(last)-1))]
	}},
	{"NUL bytes appended", func(j *crashrig.Journal, r *rig) []byte {
		return append(j.Data, make([]byte, 1+r.rng.IntN(4096))...)
	}},
}

// lastRecord is the line of the journal's last record, without its
// newline; nil if it has none.
func lastRecord(j *crashrig.Journal) []byte {
	if len(j.Lines) == 0 {
		return nil
	}
	l := j.Lines[len(j.Lines)-1]
	return j.Data[l.Start : l.End-1]
}

// corruptions break one record in the middle of a journal; the line stays
// a line (its newline is kept) so that no crash can explain it. Each gets
// a copy of the line, without its newline, to change as it likes.
var corruptions = []struct {
	name    string
	corrupt func(line []byte, r *rig) []byte
}{
	{"NUL byte inside a record", func(line []byte, r *rig) []byte {
		line[r.rng.IntN(len(line))] = 0
		return line
	}},
	{"record cut short", func(line []byte, r *rig) []byte {
		return line[:1+r.rng.IntN(len(line)-2)]
	}},
	{"record of version 2", func(line []byte, r *rig) []byte {
		return bytes.Replace(line, []byte(`"v":1,`), []byte(`"v":2,`), 1)
	}},
	{"garbage line", func(line []byte, r *rig) []byte {
		return append([]byte("<<<<<<< merge conflict\n"), line...)
	}},
}

func runTorn(r *rig, sz sizes) {
	p := r.newBatch(sz.TornItems, stripesim.Faults{}, "torn")
	j := r.path("j.jsonl")
	kill := r.newStriker(syscall.SIGKILL)
	gap := max(2, len(p.Items)/(sz.TornRounds+1))

	torn, tornBefore := 0, false
	kinds := map[string]int{}
	var last crashrig.Snapshot // the journal before the run that finished
	for round := 0; ; round++ {
		if round > 3*sz.TornRounds+20 {
			r.fatalf("not done after %d runs", round)
		}
		tearing := torn < sz.TornRounds
		snap := crashrig.TakeSnapshot(j)
		pr := r.startRefund(j, p.Path)
		if tearing {
			kill.Arm(r.sim, pr.Proc, r.rng, gap)
		}
		r.wait(pr)
		kill.Disarm()
		r.checkKept(snap)
		if tornBefore && !strings.Contains(pr.Stderr.String(), "torn final record") {
			r.t.Errorf("the run after a torn tail did not report it: %s", firstLines(pr.Stderr.String(), 3))
		}
		tornBefore = false
		if pr.Code == 0 {
			last = snap
			break
		}
		if !r.expectExit(pr, "a run killed for a torn tail", 0, -int(syscall.SIGKILL)) {
			continue
		}
		jr, err := crashrig.ReadJournal(j)
		r.must(err)
		// A tear may cut the intent of a call the simulator goes on to
		// commit, which no crash can do (the intent was fsynced before the
		// call); the look-up then adopts that refund with no intent for its
		// key. The journal before the tear keeps the intent for the
		// write-ahead check.
		whole := r.path(fmt.Sprintf("before-tear-%d.jsonl", torn))
		r.must(os.WriteFile(whole, jr.Data, 0o600))
		r.retired = append(r.retired, whole)
		tr := tearings[torn%len(tearings)]
		r.must(os.WriteFile(j, tr.tear(jr, r), 0o600))
		r.t.inject("torn tails", 1)
		kinds[tr.name]++
		torn++
		tornBefore = true
	}
	r.t.note("seed %d: %d items; torn tails: %d record prefixes appended, %d last records cut, %d runs of NUL bytes; %d mid-file corruptions tried",
		r.seed, len(p.Items), kinds[tearings[0].name], kinds[tearings[1].name], kinds[tearings[2].name], sz.Corruptions)
	r.finish(p, j)

	// Corrupt copies of the finished journal: each must be refused as is.
	// Only records the last run found are broken: that run's group commits
	// follow them, so the damage is before the last commit, never a torn
	// tail.
	good, err := crashrig.ReadJournal(j)
	r.must(err)
	before := good.Lines[:0:0]
	for _, l := range good.Lines {
		if l.End <= last.Len() {
			before = append(before, l)
		}
	}
	if len(before) == 0 || len(before) == len(good.Lines) {
		r.fatalf("setup: %d of the journal's %d records were there before the last run: nothing to corrupt before its commits", len(before), len(good.Lines))
	}
	for c := range sz.Corruptions {
		kind := corruptions[c%len(corruptions)]
		l := before[r.rng.IntN(len(before))]
		at := l.Line
		bad := slices.Concat(good.Data[:l.Start], kind.corrupt(bytes.Clone(good.Data[l.Start:l.End-1]), r), good.Data[l.End-1:])
		path := r.path(fmt.Sprintf("corrupt-%d.jsonl", c))
		r.must(os.WriteFile(path, bad, 0o600))
		calls := r.sim.Stats()
		pr := r.startRefund(path, p.Path)
		r.wait(pr)
		r.t.inject("mid-file corruptions", 1)
		r.expectExit(pr, "a run on a journal with "+kind.name, exitCorrupt)
		if want := fmt.Sprintf("%s:%d:", path, at); !strings.Contains(pr.Stderr.String(), want) {
			r.t.Errorf("%s at line %d: refund's message does not name %s: %s", kind.name, at, want, firstLines(pr.Stderr.String(), 3))
		}
		if now, err := os.ReadFile(path); err != nil || !bytes.Equal(now, bad) {
			r.t.Lost += len(good.Lines)
			r.t.Errorf("a refused corrupt journal was changed (%s at line %d)", kind.name, at)
		}
		if after := r.sim.Stats(); !maps.Equal(after.Requests, calls.Requests) {
			r.t.Errorf("refund called Stripe with a corrupt journal (%s at line %d)", kind.name, at)
		}
	}
}
