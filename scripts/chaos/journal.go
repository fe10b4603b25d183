package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/refundkit/refundkit/refund/stripesim"
)

const whatTorn = "A crash mid-write leaves a torn final line. Runs of `refund -j 8` are killed with SIGKILL at a random refund call, then the journal's tail is torn by hand in turn: " +
	"a random prefix of a record appended without its newline, the last record cut at a random byte, or a run of NUL bytes (a file extended but never written). " +
	"The next run must report the torn tail, set it aside and resume, keeping every complete record before it; the last run must exit 0. " +
	"Then the finished journal is corrupted in the middle (a NUL byte inside a record, a record cut short with its newline kept, a record of version 2, a line of garbage): " +
	"`refund` must refuse it with exit 5 and `file:line` naming the corrupt line, leave the file byte for byte as it was, and call nothing."

// tearings are the ways a crash leaves a journal's tail.
var tearings = []struct {
	name string
	tear func(data []byte, r *rig) []byte
}{
	{"record prefix appended", func(data []byte, r *rig) []byte {
		last := lastLine(data)
		if len(last) < 2 {
			return append(data, `{"v":1,"ty`...)
		}
		return append(data, last[:1+r.rng.IntN(len(last)-1)]...)
	}},
	{"last record cut", func(data []byte, r *rig) []byte {
		last := lastLine(data)
		if len(last) < 2 {
			return append(data, `{"v":1`...)
		}
		start := len(data) - len(last) - 1
		return data[:start+1+r.rng.IntN(len(last)-1)]
	}},
	{"NUL bytes appended", func(data []byte, r *rig) []byte {
		return append(data, make([]byte, 1+r.rng.IntN(4096))...)
	}},
}

// lastLine is the last complete line of data, without its newline.
func lastLine(data []byte) []byte {
	data = bytes.TrimSuffix(data, []byte("\n"))
	return data[bytes.LastIndexByte(data, '\n')+1:]
}

// corruptions break one line in the middle of a journal; the line stays a
// line (its newline is kept) so that no crash can explain it. Each gets a
// copy of the line, without its newline, to change as it likes.
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
	charges := stripesim.GenerateCharges(sz.TornItems, int64(r.seed))
	r.serve(charges, stripesim.Faults{})
	p := r.makePlan("plan.jsonl", "torn", r.writeCharges("charges.csv", charges))
	j := r.path("j.jsonl")
	kill := r.newStriker(syscall.SIGKILL)
	gap := max(2, len(p.Items)/(sz.TornRounds+1))

	torn, tornBefore := 0, false
	kinds := map[string]int{}
	for round := 0; ; round++ {
		if round > 3*sz.TornRounds+20 {
			r.fatalf("not done after %d runs", round)
		}
		tearing := torn < sz.TornRounds
		snap := takeSnapshot(j)
		pr := r.startRefund(j, p.Path)
		if tearing {
			kill.arm(r, pr, gap)
		}
		r.wait(pr)
		kill.disarm()
		r.checkKept(snap)
		if tornBefore && !strings.Contains(pr.stderr.String(), "torn final record") {
			r.t.problemf("the run after a torn tail did not report it: %s", firstLines(pr.stderr.String(), 3))
		}
		tornBefore = false
		if pr.code == 0 {
			break
		}
		if !r.expectExit(pr, "a run killed for a torn tail", 0, -int(syscall.SIGKILL)) {
			continue
		}
		data, err := os.ReadFile(j)
		r.must(err)
		// A tear may cut the intent of a call the simulator goes on to
		// commit, which no crash can do (the intent was fsynced before the
		// call); the look-up then adopts that refund with no intent for its
		// key. The journal before the tear keeps the intent for the
		// write-ahead check.
		whole := r.path(fmt.Sprintf("before-tear-%d.jsonl", torn))
		r.must(os.WriteFile(whole, data, 0o600))
		r.retired = append(r.retired, whole)
		tr := tearings[torn%len(tearings)]
		r.must(os.WriteFile(j, tr.tear(data, r), 0o600))
		r.t.inject("torn tails", 1)
		kinds[tr.name]++
		torn++
		tornBefore = true
	}
	r.t.note("seed %d: %d items; torn tails: %d record prefixes appended, %d last records cut, %d runs of NUL bytes; %d mid-file corruptions tried",
		r.seed, len(p.Items), kinds[tearings[0].name], kinds[tearings[1].name], kinds[tearings[2].name], sz.Corruptions)
	r.finish(p, j)

	// Corrupt copies of the finished journal: each must be refused as is.
	good, err := os.ReadFile(j)
	r.must(err)
	lines := bytes.SplitAfter(good, []byte("\n"))
	lines = lines[:len(lines)-1] // the empty string after the last newline
	for c := range sz.Corruptions {
		kind := corruptions[c%len(corruptions)]
		at := r.rng.IntN(len(lines) - 1) // never the last line: that would be a torn tail
		var bad bytes.Buffer
		for i, line := range lines {
			if i == at {
				line = append(kind.corrupt(bytes.Clone(bytes.TrimSuffix(line, []byte("\n"))), r), '\n')
			}
			bad.Write(line)
		}
		path := r.path(fmt.Sprintf("corrupt-%d.jsonl", c))
		r.must(os.WriteFile(path, bad.Bytes(), 0o600))
		before := r.sim.Stats()
		pr := r.startRefund(path, p.Path)
		r.wait(pr)
		r.t.inject("mid-file corruptions", 1)
		r.expectExit(pr, "a run on a journal with "+kind.name, exitCorrupt)
		if want := fmt.Sprintf("%s:%d:", path, at+1); !strings.Contains(pr.stderr.String(), want) {
			r.t.problemf("%s at line %d: refund's message does not name %s: %s", kind.name, at+1, want, firstLines(pr.stderr.String(), 3))
		}
		if now, err := os.ReadFile(path); err != nil || !bytes.Equal(now, bad.Bytes()) {
			r.t.Lost += len(lines)
			r.t.problemf("a refused corrupt journal was changed (%s at line %d)", kind.name, at+1)
		}
		if after := r.sim.Stats(); after.Requests["POST /v1/refunds"] != before.Requests["POST /v1/refunds"] || after.Requests["GET /v1/refunds"] != before.Requests["GET /v1/refunds"] {
			r.t.problemf("refund called Stripe with a corrupt journal (%s at line %d)", kind.name, at+1)
		}
	}
}
