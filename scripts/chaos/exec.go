package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// The exec rows: refund --provider exec with the curl commands of
// testdata/exec, which call Stripe's API in the simulator, so the checks
// read the refunds they made there as for the Stripe rows. The commands run
// in a process group of their own: a kill -9 of refund leaves a command in
// flight running to its end, its answer lost.

// onExec runs a scenario through the example commands, with --exec-find or
// without.
func onExec(find bool, run func(*rig, sizes)) func(*rig, sizes) {
	return func(r *rig, sz sizes) {
		create, findCmd, err := r.m.execCommands()
		if err != nil {
			r.fatalf("setup: %v", err)
		}
		r.prov = provider{Name: provExec, Create: create}
		if find {
			r.prov.Find = findCmd
		}
		run(r, sz)
	}
}

// execKillSizes gives the kill -9 row the exec rows' sizes: each call is
// a shell, curl and jq, not an HTTP request alone.
func execKillSizes(run func(*rig, sizes)) func(*rig, sizes) {
	return func(r *rig, sz sizes) {
		sz.KillItems, sz.Kills = sz.ExecItems, sz.ExecKills
		run(r, sz)
	}
}

const whatExecKill9 = "`refund --provider exec --exec-create testdata/exec/stripe-create.sh --exec-find testdata/exec/stripe-find.sh -j 8` (sh, curl and jq against Stripe's API in the simulator) is killed with SIGKILL again and again: " +
	"half the kills from inside the simulator's create hook, with a command's call in flight (the command runs on in its own process group and the simulator commits the refund after refund is gone), half at a random time. " +
	"Items left in doubt are looked up with the find command before anything is sent again. The journal's complete records must survive every kill byte for byte; a run without kills must finish with exit 0."

const whatExecKill9NoFind = "As the row above, without `--exec-find`: an item left in doubt cannot be looked up, so it may be sent again only under its own idempotency key (the API keeps keys for ever: `--exec-key-ttl` 0), which the simulator answers with the refund it made, or 409 while the killed run's command is still in flight (the command exits 75: retried later)."

const whatExecDoubt = "The create command is wrapped so that each of four items in six fails on its first call: exit 75 before sending (retried in the same run under the same key), the refund made and then exit 1 (its answer lost), the refund made and then a hang until `--exec-timeout 30s` kills the command's process group, or a hang before sending anything. " +
	"The hangs last an hour, so only the timeout ends them, and the timeout is far above what a real call takes on a busy machine, so no other call meets it. " +
	"The first run must exit 1 with exactly the items of the last three kinds in doubt (the summary's count), the second exit 0, every key attempt 1 (no new key for an item in doubt). " +
	"One half of the batch runs with `--exec-find` (the rerun looks the items in doubt up and sends only for those with no refund), the other without (the rerun sends each again under its key, and the simulator replays the refunds it made); the halves' first runs wait out their timeouts side by side."

// execDoubtTimeout is the exec-doubt row's --exec-timeout: the faults'
// hangs (an hour) are the slow commands, never a real call of curl and jq,
// however busy the machine.
const execDoubtTimeout = "30s"

// Kinds of fault the wrapped create command injects on an item's first
// call; items of other indexes pass through.
var execFaults = []string{"tempfail", "lost", "hung", "slow"}

// execWrapper is a create command that runs the real one ($CREATE) but
// injects the fault the file faults names for the item, on its first call
// only, leaving a marker file kind.<item> for the checks.
const execWrapper = `#!/bin/sh
# chaos: the real create command, with a fault on an item's first call.
CREATE=%q
DIR=%q
kind=$(awk -v i="$REFUNDKIT_ITEM" '$1 == i { print $2 }' "$DIR/faults")
[ -n "$kind" ] && mkdir "$DIR/first.$REFUNDKIT_ITEM" 2>/dev/null || exec "$CREATE"
touch "$DIR/$kind.$REFUNDKIT_ITEM"
case $kind in
tempfail) echo "chaos: retry later" >&2; exit 75 ;;
lost) "$CREATE" >/dev/null; echo "chaos: answer lost" >&2; exit 1 ;;
hung) "$CREATE" >/dev/null; exec sleep 3600 ;;
slow) exec sleep 3600 ;;
esac
exec "$CREATE"
`

// execDoubtHalf is one half of the exec-doubt batch: its plan, journal,
// wrapped command and the fault each item meets.
type execDoubtHalf struct {
	name string
	prov provider
	dir  string
	p    *plan
	j    string
	want map[string]string // item -> fault kind
	hit  map[string]int    // fault kind -> items that met it
}

func runExecDoubt(r *rig, sz sizes) {
	charges := r.serveCharges(sz.ExecDoubtItems, stripesim.Faults{LatencyJitter: 0})
	half := len(charges) / 2
	real := r.prov
	var halves []*execDoubtHalf
	for i, part := range [][]stripesim.Charge{charges[:half], charges[half:]} {
		withFind := i == 0
		h := &execDoubtHalf{name: map[bool]string{true: "find", false: "nofind"}[withFind], want: map[string]string{}, hit: map[string]int{}}
		h.dir = r.path("doubt-" + h.name)
		r.must(os.Mkdir(h.dir, 0o700))
		h.p = r.makePlan("plan-"+h.name+".jsonl", "doubt-"+h.name, r.writeCharges("charges-"+h.name+".csv", part))
		var faults strings.Builder
		for k, it := range h.p.Items {
			if k%6 < len(execFaults) {
				h.want[it.Item.Item] = execFaults[k%6]
				fmt.Fprintf(&faults, "%s %s\n", it.Item.Item, execFaults[k%6])
			}
		}
		r.must(os.WriteFile(filepath.Join(h.dir, "faults"), []byte(faults.String()), 0o600))
		wrap := filepath.Join(h.dir, "create.sh")
		r.must(os.WriteFile(wrap, []byte(fmt.Sprintf(execWrapper, real.Create, h.dir)), 0o700))
		h.prov = provider{Name: provExec, Create: wrap, Timeout: execDoubtTimeout}
		if withFind {
			h.prov.Find = real.Find
		}
		h.j = r.path("j-" + h.name + ".jsonl")
		halves = append(halves, h)
	}

	// The first runs side by side: each waits out its hangs' timeout, so
	// together they wait it once.
	firsts := make([]*proc, len(halves))
	snaps := make([]crashrig.Snapshot, len(halves))
	for i, h := range halves {
		r.prov = h.prov
		snaps[i] = crashrig.TakeSnapshot(h.j)
		firsts[i] = r.startRefund(h.j, h.p.Path)
	}
	for i, h := range halves {
		pr := firsts[i]
		r.wait(pr)
		r.checkKept(snaps[i])
		r.expectExit(pr, "the run whose commands failed ("+h.name+")", exitFailed)
		inDoubt := 0
		for item, kind := range h.want {
			if _, err := os.Stat(filepath.Join(h.dir, kind+"."+item)); err == nil {
				h.hit[kind]++
				if kind != "tempfail" {
					inDoubt++
				}
			} else {
				r.t.Errorf("item %s: its create command never met its %s fault", item, kind)
			}
		}
		if s, ok := parseSummary(pr.Stderr.String()); !ok || s.InDoubt != inDoubt {
			r.t.Errorf("%s: the first run's summary counts %d items in doubt, the commands left %d: %s", h.name, s.InDoubt, inDoubt, firstLines(pr.Stderr.String(), 2))
		}
		st, _, err := journal.Load(h.j)
		r.must(err)
		for item, kind := range h.want {
			s, _ := st.Lookup(h.p.Batch, item)
			if doubt := s.Status == journal.StatusInDoubt; doubt != (kind != "tempfail") {
				r.t.Errorf("%s: item %s (%s) is %v after the first run", h.name, item, kind, s.Status)
			}
		}
		if !strings.Contains(pr.Stderr.String(), "refund: exec-create ") || !strings.Contains(pr.Stderr.String(), ": chaos: answer lost") {
			r.t.Errorf("%s: the commands' stderr is not passed through with its prefix: %s", h.name, firstLines(pr.Stderr.String(), 3))
		}
	}

	// The reruns one after the other: each is measured by what the
	// simulator saw while it ran.
	for _, h := range halves {
		withFind := h.prov.Find != ""
		r.prov = h.prov
		since, before := r.sim.Creates(), r.sim.Stats()
		snap := crashrig.TakeSnapshot(h.j)
		pr := r.startRefund(h.j, h.p.Path)
		r.wait(pr)
		r.checkKept(snap)
		r.expectExit(pr, "the rerun that reconciles the items in doubt ("+h.name+")", 0)
		sent := len(r.sim.KeysSince(since))
		made := r.sim.Stats().RefundsCreated - before.RefundsCreated
		// Only the items whose command hung before sending lacked a refund.
		if made != int64(h.hit["slow"]) {
			r.t.Errorf("%s: the rerun made %d refunds, want %d (the items whose command sent nothing)", h.name, made, h.hit["slow"])
		}
		if withFind && sent != h.hit["slow"] {
			r.t.Errorf("%s: the rerun sent %d calls after its look-ups, want %d", h.name, sent, h.hit["slow"])
		}
		r.t.inject("exit 75 (retried, same key)", h.hit["tempfail"])
		r.t.inject("exit 1 after the refund was made", h.hit["lost"])
		r.t.inject("commands killed by --exec-timeout", h.hit["hung"]+h.hit["slow"])
		r.t.note("seed %d, %s: %d items; first run: %d exits 75 retried, %d exits 1 and %d timeouts left in doubt; the rerun's calls reserved %d new keys (%d answers replayed), made %d refunds, and it exited 0",
			r.seed, map[bool]string{true: "with --exec-find", false: "without --exec-find"}[withFind], len(h.p.Items), h.hit["tempfail"], h.hit["lost"], h.hit["hung"]+h.hit["slow"],
			sent, r.sim.Stats().Replayed-before.Replayed, made)
	}
	// Both halves' refunds are at the simulator: each check of a payment
	// must know both plans meant theirs.
	for _, h := range halves {
		r.mean(h.p)
	}
	for _, h := range halves {
		r.checkAttemptOne(h.p.Batch, 0, "a command's failure")
		r.finish(h.p, h.j)
	}
}
