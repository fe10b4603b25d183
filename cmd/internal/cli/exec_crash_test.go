package cli

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// These tests run `refund --provider exec` as a real process with the
// example commands of testdata/exec (sh, curl and jq against the Stripe
// simulator), on the crash rig of crash_test.go, and check at the
// simulator that every charge is refunded exactly once.

// execScripts are the example commands, by absolute path. The tests need
// curl and jq: CI installs them, and a machine without them fails here
// rather than passing a test that checked nothing.
func execScripts(t *testing.T) (create, find string) {
	t.Helper()
	for _, tool := range []string{"curl", "jq"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the exec example commands need %s: %v", tool, err)
		}
	}
	dir, err := filepath.Abs("../../../testdata/exec")
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "stripe-create.sh"), filepath.Join(dir, "stripe-find.sh")
}

// execArgs are the flags of a run through the commands; find "" for none.
func execArgs(create, find string, more ...string) []string {
	args := []string{"--provider", "exec", "--exec-create", create}
	if find != "" {
		args = append(args, "--exec-find", find)
	}
	return append(args, more...)
}

// wrapper writes a create command that runs body around the real one
// ($CREATE) and returns its path.
func wrapper(t *testing.T, dir, create, body string) string {
	t.Helper()
	path := filepath.Join(dir, "wrap.sh")
	script := "#!/bin/sh\nCREATE=" + create + "\nDIR=" + dir + "\n" + body
	if err := os.WriteFile(path, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestExecKill9WithCommandsInFlightRefundsOnce(t *testing.T) {
	const items, kills = 60, 12
	create, find := execScripts(t)
	r := newCrashRig(t, items, stripesim.Faults{LatencyJitter: time.Millisecond})
	path := filepath.Join(r.dir, "j.jsonl")
	rng := rand.New(rand.NewPCG(5, 6))
	kill := crashrig.NewStriker(syscall.SIGKILL)
	r.sim.OnCreate(kill.Hook)
	for round := 0; ; round++ {
		if round > kills+20 {
			t.Fatalf("not done after %d runs", round)
		}
		p, stderr := r.start(path, execArgs(create, find, "-j", "4")...)
		if round < kills {
			kill.Arm(r.sim, p, rng, 6)
		}
		p.Wait()
		kill.Disarm()
		switch p.Code {
		case 0:
			if round < kills {
				continue
			}
			if kill.Struck() < kills/2 {
				t.Fatalf("only %d runs were killed with a command's call in flight: the test proved little", kill.Struck())
			}
			r.checkExactlyOnce(path, items)
			r.checkIntentsCoverCalls(path)
			t.Logf("%d runs, %d killed with a call in flight, %d keys for %d items", round+1, kill.Struck(), r.sim.Creates(), items)
			return
		case -int(syscall.SIGKILL):
		default:
			t.Fatalf("run %d exited %d: %s", round, p.Code, stderr)
		}
	}
}

// TestExecExit1LeavesInDoubtThenReconciles: the command made the refund
// but exited 1 (its answer lost). The item is in doubt; a rerun finds the
// refund with --exec-find and sends nothing, or without a find command
// sends it again under the same key, which the API replays.
func TestExecExit1LeavesInDoubtThenReconciles(t *testing.T) {
	const items = 5
	create, find := execScripts(t)
	for _, withFind := range []bool{true, false} {
		t.Run(fmt.Sprintf("find=%v", withFind), func(t *testing.T) {
			r := newCrashRig(t, items, stripesim.Faults{})
			path := filepath.Join(r.dir, "j.jsonl")
			lose := wrapper(t, r.dir, create, `out=$("$CREATE"); rc=$?
if [ $rc -eq 0 ] && mkdir "$DIR/lost.$REFUNDKIT_ITEM" 2>/dev/null; then echo "answer lost" >&2; exit 1; fi
printf '%s\n' "$out"; exit $rc
`)
			findCmd := ""
			if withFind {
				findCmd = find
			}
			p, stderr := r.start(path, execArgs(lose, findCmd, "-j", "2")...)
			if p.Wait(); p.Code != ExitFailed {
				t.Fatalf("first run exited %d, want %d: %s", p.Code, ExitFailed, stderr)
			}
			if !strings.Contains(stderr.String(), "refund: exec-create ch_sim0000001: answer lost") {
				t.Errorf("the command's stderr is not passed through with its prefix: %s", stderr)
			}
			state, _, err := journal.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			state.Each(func(_, item string, st journal.ItemState) {
				if st.Status != journal.StatusInDoubt || st.Code != "exec_exit_1" || st.KeyBurned {
					t.Errorf("item %s: %s code %q burned %v, want in doubt, exec_exit_1, its key still usable", item, st.Status, st.Code, st.KeyBurned)
				}
			})
			if n := r.sim.Creates(); n != items {
				t.Fatalf("%d keys reserved by the first run, want %d", n, items)
			}
			p, stderr = r.start(path, execArgs(lose, findCmd, "-j", "2")...)
			if p.Wait(); p.Code != 0 {
				t.Fatalf("rerun exited %d: %s", p.Code, stderr)
			}
			for _, k := range r.sim.Keys() {
				if !strings.HasSuffix(k, ":1") {
					t.Errorf("key %s: a new key was used for an item in doubt", k)
				}
			}
			if n := r.sim.Creates(); n != items {
				t.Errorf("%d keys reserved after the rerun, want %d: an item in doubt was sent under a new key", n, items)
			}
			if want := "0 creates, 0 payment reads, 5 refund lists, 0 refund reads"; withFind && !strings.Contains(stderr.String(), want) {
				t.Errorf("rerun with a find command: summary does not say %q: %s", want, stderr)
			}
			r.checkExactlyOnce(path, items)
			r.checkIntentsCoverCalls(path)
		})
	}
}

// TestExecTempFailRetriedWithTheSameKey: exit 75 is run again, in the same
// run, under the same key.
func TestExecTempFailRetriedWithTheSameKey(t *testing.T) {
	const items = 4
	create, find := execScripts(t)
	r := newCrashRig(t, items, stripesim.Faults{})
	path := filepath.Join(r.dir, "j.jsonl")
	later := wrapper(t, r.dir, create, `echo "$REFUNDKIT_ITEM $REFUNDKIT_IDEMPOTENCY_KEY" >> "$DIR/calls"
if mkdir "$DIR/later.$REFUNDKIT_ITEM" 2>/dev/null; then exit 75; fi
exec "$CREATE"
`)
	p, stderr := r.start(path, execArgs(later, find, "-j", "2")...)
	if p.Wait(); p.Code != 0 {
		t.Fatalf("run exited %d: %s", p.Code, stderr)
	}
	b, err := os.ReadFile(filepath.Join(r.dir, "calls"))
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		item, key, _ := strings.Cut(line, " ")
		keys[item] = append(keys[item], key)
	}
	for i := 1; i <= items; i++ {
		item := "i" + strconv.Itoa(i)
		if k := keys[item]; len(k) != 2 || k[0] != k[1] {
			t.Errorf("item %s: calls under keys %v, want two under the same key", item, k)
		}
	}
	r.checkExactlyOnce(path, items)
	r.checkIntentsCoverCalls(path)
}

// TestExecTimeoutKillsTheCommand: a command over --exec-timeout is killed
// with its children, its item left in doubt; a rerun settles it. The
// command is the slow one (an hour, so only the timeout ends the run); the
// timeout is long enough for a busy machine's shell to start its child and
// write its pid first.
func TestExecTimeoutKillsTheCommand(t *testing.T) {
	const items = 2
	create, find := execScripts(t)
	r := newCrashRig(t, items, stripesim.Faults{})
	path := filepath.Join(r.dir, "j.jsonl")
	hang := wrapper(t, r.dir, create, `sleep 3600 & echo $! > "$DIR/pid.$REFUNDKIT_ITEM"; wait
`)
	p, stderr := r.start(path, execArgs(hang, find, "--exec-timeout", "10s")...)
	if p.Wait(); p.Code != ExitFailed {
		t.Fatalf("run exited %d, want %d: %s", p.Code, ExitFailed, stderr)
	}
	for i := 1; i <= items; i++ {
		b, err := os.ReadFile(filepath.Join(r.dir, "pid.i"+strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		waitGone(t, pid)
	}
	if out := p.Stdout.String(); strings.Count(out, `"status":"in_doubt"`) != items || strings.Count(out, `"code":"exec_timeout"`) != items {
		t.Errorf("results: %s", out)
	}
	p, stderr = r.start(path, execArgs(create, find)...)
	if p.Wait(); p.Code != 0 {
		t.Fatalf("rerun exited %d: %s", p.Code, stderr)
	}
	r.checkExactlyOnce(path, items)
	r.checkIntentsCoverCalls(path)
}

// waitGone waits for process pid, sent SIGKILL, to be gone or a zombie:
// the kernel delivers the signal in its own time.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return
		}
		if f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); len(f) > 0 && (f[0] == "Z" || f[0] == "X") {
			return
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("process %d of a timed-out command is still running", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
