package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund/stripesim"
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

const whatExecDoubt = "The create command is wrapped so that each of four items in six fails on its first call: exit 75 before sending (retried in the same run under the same key), the refund made and then exit 1 (its answer lost), the refund made and then a hang until `--exec-timeout 2s` kills the command's process group, or a hang before sending anything. " +
	"The first run must exit 1 with exactly the items of the last three kinds in doubt (the summary's count), the second exit 0, every key attempt 1 (no new key for an item in doubt). " +
	"One half of the batch runs with `--exec-find` (the rerun looks the items in doubt up and sends only for those with no refund), the other without (the rerun sends each again under its key, and the simulator replays the refunds it made)."

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
hung) "$CREATE" >/dev/null; exec sleep 300 ;;
slow) exec sleep 300 ;;
esac
exec "$CREATE"
`

func runExecDoubt(r *rig, sz sizes) {
	charges := stripesim.GenerateCharges(sz.ExecDoubtItems, int64(r.seed))
	r.serve(charges, stripesim.Faults{LatencyJitter: 0})
	half := len(charges) / 2
	real := r.prov
	for i, part := range [][]stripesim.Charge{charges[:half], charges[half:]} {
		withFind := i == 0
		name := map[bool]string{true: "find", false: "nofind"}[withFind]
		dir := r.path("doubt-" + name)
		r.must(os.Mkdir(dir, 0o700))
		p := r.makePlan("plan-"+name+".jsonl", "doubt-"+name, r.writeCharges("charges-"+name+".csv", part))
		var faults strings.Builder
		want := map[string]string{} // item -> fault kind
		for k, it := range p.Items {
			if k%6 < len(execFaults) {
				want[it.Item.Item] = execFaults[k%6]
				fmt.Fprintf(&faults, "%s %s\n", it.Item.Item, execFaults[k%6])
			}
		}
		r.must(os.WriteFile(filepath.Join(dir, "faults"), []byte(faults.String()), 0o600))
		wrap := filepath.Join(dir, "create.sh")
		r.must(os.WriteFile(wrap, []byte(fmt.Sprintf(execWrapper, real.Create, dir)), 0o700))
		r.prov = provider{Name: provExec, Create: wrap, Timeout: "2s"}
		if withFind {
			r.prov.Find = real.Find
		}
		j := r.path("j-" + name + ".jsonl")

		snap := crashrig.TakeSnapshot(j)
		pr := r.startRefund(j, p.Path)
		r.wait(pr)
		r.checkKept(snap)
		r.expectExit(pr, "the run whose commands failed ("+name+")", exitFailed)
		hit := map[string]int{}
		inDoubt := 0
		for item, kind := range want {
			if _, err := os.Stat(filepath.Join(dir, kind+"."+item)); err == nil {
				hit[kind]++
				if kind != "tempfail" {
					inDoubt++
				}
			} else {
				r.t.Errorf("item %s: its create command never met its %s fault", item, kind)
			}
		}
		if s, ok := parseSummary(pr.Stderr.String()); !ok || s.InDoubt != inDoubt {
			r.t.Errorf("%s: the first run's summary counts %d items in doubt, the commands left %d: %s", name, s.InDoubt, inDoubt, firstLines(pr.Stderr.String(), 2))
		}
		st, _, err := journal.Load(j)
		r.must(err)
		for item, kind := range want {
			s, _ := st.Lookup(p.Batch, item)
			if doubt := s.Status == journal.StatusInDoubt; doubt != (kind != "tempfail") {
				r.t.Errorf("%s: item %s (%s) is %v after the first run", name, item, kind, s.Status)
			}
		}
		if !strings.Contains(pr.Stderr.String(), "refund: exec-create ") || !strings.Contains(pr.Stderr.String(), ": chaos: answer lost") {
			r.t.Errorf("%s: the commands' stderr is not passed through with its prefix: %s", name, firstLines(pr.Stderr.String(), 3))
		}

		since, before := r.sim.Creates(), r.sim.Stats()
		snap = crashrig.TakeSnapshot(j)
		pr = r.startRefund(j, p.Path)
		r.wait(pr)
		r.checkKept(snap)
		r.expectExit(pr, "the rerun that reconciles the items in doubt ("+name+")", 0)
		sent := len(r.sim.KeysSince(since))
		made := r.sim.Stats().RefundsCreated - before.RefundsCreated
		// Only the items whose command hung before sending lacked a refund.
		if made != int64(hit["slow"]) {
			r.t.Errorf("%s: the rerun made %d refunds, want %d (the items whose command sent nothing)", name, made, hit["slow"])
		}
		if withFind && sent != hit["slow"] {
			r.t.Errorf("%s: the rerun sent %d calls after its look-ups, want %d", name, sent, hit["slow"])
		}
		r.t.inject("exit 75 (retried, same key)", hit["tempfail"])
		r.t.inject("exit 1 after the refund was made", hit["lost"])
		r.t.inject("commands killed by --exec-timeout", hit["hung"]+hit["slow"])
		r.t.note("seed %d, %s: %d items; first run: %d exits 75 retried, %d exits 1 and %d timeouts left in doubt; the rerun's calls reserved %d new keys (%d answers replayed), made %d refunds, and it exited 0",
			r.seed, map[bool]string{true: "with --exec-find", false: "without --exec-find"}[withFind], len(p.Items), hit["tempfail"], hit["lost"], hit["hung"]+hit["slow"],
			sent, r.sim.Stats().Replayed-before.Replayed, made)
		r.checkAttemptOne(p.Batch, 0, "a command's failure")
		r.finish(p, j)
	}
}
