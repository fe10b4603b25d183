package cli

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// These tests run the real refund command as a separate process (this test
// binary re-executed as `refund`, see TestMain) on the shared crash rig
// (internal/crashrig) and kill, interrupt or starve it at the moments that
// matter: with a refund call in flight at the simulator, which holds the
// request in its create hook until the process is gone.

const crashBatch = "crash"

type crashRig struct {
	t    *testing.T
	sim  *crashrig.Sim
	bin  string
	dir  string
	plan string
	want []crashrig.Want
	// lease is a shared checkpoint's workers' --lease (0: the rig's own
	// short one, natsLease or pgLease).
	lease time.Duration
	env   []string // more of refund's environment (KEY=VALUE)
}

func newCrashRig(t *testing.T, items int, faults stripesim.Faults) *crashRig {
	t.Helper()
	return newCrashRigWith(t, items, stripesim.Config{Faults: faults})
}

// newCrashRigWith is newCrashRig over a simulator configured as cfg (its
// charges and seed the rig's).
func newCrashRigWith(t *testing.T, items int, cfg stripesim.Config) *crashRig {
	t.Helper()
	bin, err := exec.LookPath("refund")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Charges, cfg.Seed = stripesim.GenerateCharges(items, 3), 3
	sim, err := crashrig.StartSim(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	r := &crashRig{t: t, sim: sim, bin: bin, dir: t.TempDir()}
	var b strings.Builder
	for i := 1; i <= items; i++ {
		w := crashrig.Want{Item: fmt.Sprintf("i%d", i), Charge: fmt.Sprintf("ch_sim%07d", i)}
		fmt.Fprintf(&b, `{"batch":%q,"item":%q,"charge":%q}`+"\n", crashBatch, w.Item, w.Charge)
		r.want = append(r.want, w)
	}
	r.plan = filepath.Join(r.dir, "plan.jsonl")
	if err := os.WriteFile(r.plan, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return r
}

// start launches `refund` over the plan; it does not wait. It returns the
// run and its stderr.
func (r *crashRig) start(journalPath string, args ...string) (*crashrig.Proc, *bytes.Buffer) {
	r.t.Helper()
	p, err := crashrig.Start(crashrig.Cmd{
		Bin:  r.bin,
		Args: append([]string{"--journal", journalPath, "--rate", "0", r.plan}, args...),
		Env:  crashrig.Env(scriptKey, r.sim.URL(), r.env...),
	})
	if err != nil {
		r.t.Fatal(err)
	}
	return p, &p.Stderr
}

// checkExactlyOnce asserts that each of the first items of the plan has
// exactly one live refund at the simulator, that no other item has one,
// and that the journal says so too.
func (r *crashRig) checkExactlyOnce(journalPath string, items int) {
	r.t.Helper()
	r.sim.CheckOnce(r.t, crashBatch, r.want[:items], journalPath)
}

// checkIntentsCoverCalls asserts the write-ahead rule: every key the
// simulator received has an intent that reached the journal's disk first.
func (r *crashRig) checkIntentsCoverCalls(journalPath string) {
	r.t.Helper()
	r.sim.CheckIntents(r.t, crashBatch, journalPath)
}

func TestCrashKill9AtRandomMomentsNeverRefundsTwice(t *testing.T) {
	const items, kills = 150, 30
	r := newCrashRig(t, items, stripesim.Faults{LatencyJitter: time.Millisecond})
	path := filepath.Join(r.dir, "j.jsonl")
	rng := rand.New(rand.NewPCG(1, 2))
	kill := crashrig.NewStriker(syscall.SIGKILL)
	r.sim.OnCreate(kill.Hook)

	for round := 0; ; round++ {
		if round > kills+20 {
			t.Fatalf("not done after %d runs", round)
		}
		p, stderr := r.start(path, "-j", "8")
		if round < kills {
			kill.Arm(r.sim, p, rng, 8)
		}
		p.Wait()
		kill.Disarm()
		switch p.Code {
		case 0:
			if round < kills {
				continue // finished before the kill point; keep killing later runs
			}
			if kill.Struck() == 0 {
				t.Fatal("no run was killed with a call in flight: the test proved nothing")
			}
			r.checkExactlyOnce(path, items)
			r.checkIntentsCoverCalls(path)
			t.Logf("%d runs, %d killed with a refund call in flight, %d keys for %d items",
				round+1, kill.Struck(), r.sim.Creates(), items)
			return
		case -int(syscall.SIGKILL):
		default:
			t.Fatalf("run %d exited %d: %s", round, p.Code, stderr)
		}
	}
}

// TestCrashSigtermFinishesCallsInFlightThenResumes: a deploy's SIGTERM (and
// an operator's ^C) with a call in flight; the run exits 143 (130 for
// SIGINT), as a shell reports a process that signal ended.
func TestCrashSigtermFinishesCallsInFlightThenResumes(t *testing.T) {
	for _, tc := range []struct {
		sig  syscall.Signal
		want int
	}{{syscall.SIGTERM, ExitTerminated}, {syscall.SIGINT, ExitInterrupted}} {
		t.Run(tc.sig.String(), func(t *testing.T) { crashSignalThenResume(t, tc.sig, tc.want) })
	}
}

func crashSignalThenResume(t *testing.T, sig syscall.Signal, want int) {
	const items = 60
	r := newCrashRig(t, items, stripesim.Faults{})
	path := filepath.Join(r.dir, "j.jsonl")
	term := crashrig.NewStriker(sig)
	r.sim.OnCreate(term.Hook)
	p, stderr := r.start(path, "-j", "1")
	term.ArmAt(p, 10)
	p.Wait()
	term.Disarm()
	if term.Struck() != 1 {
		t.Fatalf("the run ended (exit %d) before its 10th call: no %v was sent: %s", p.Code, sig, stderr)
	}
	if p.Code != want {
		t.Fatalf("exit %d after %v, want %d: %s", p.Code, sig, want, stderr)
	}
	if !strings.Contains(stderr.String(), "finishing the calls in flight") {
		t.Errorf("stderr does not say it is finishing calls in flight: %s", stderr)
	}
	state, _, err := journal.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	refunded, inDoubt := 0, 0
	state.Each(func(_, _ string, st journal.ItemState) {
		switch st.Status {
		case journal.StatusRefunded:
			refunded++
		case journal.StatusInDoubt:
			inDoubt++
		}
	})
	// The call in flight at the signal was finished and journaled.
	if refunded != int(r.sim.Creates()) || inDoubt != 0 {
		t.Errorf("after %v: %d refunded and %d in doubt in the journal, %d calls made", sig, refunded, inDoubt, r.sim.Creates())
	}
	if refunded >= items {
		t.Fatalf("the run did not stop early (%d refunded)", refunded)
	}
	r.sim.OnCreate(nil)
	p, stderr = r.start(path, "-j", "4")
	if err := p.Wait(); err != nil {
		t.Fatalf("resume: %v: %s", err, stderr)
	}
	r.checkExactlyOnce(path, items)
	r.checkIntentsCoverCalls(path)
}

func TestCrashSecondRunOnTheSameJournalIsRefused(t *testing.T) {
	r := newCrashRig(t, 5, stripesim.Faults{})
	path := filepath.Join(r.dir, "j.jsonl")
	hold := crashrig.NewHold(1, 1)
	t.Cleanup(hold.Free) // before the simulator closes: it waits for its hook
	r.sim.OnCreate(hold.Park)
	first, firstErr := r.start(path, "-j", "1")
	go first.Wait()
	select {
	case <-hold.Held(): // the first run holds the journal and has a call in flight
	case <-first.Exited():
		t.Fatalf("the first run exited %d before its call was held: %s", first.Code, firstErr)
	}
	second, secondErr := r.start(path)
	second.Wait()
	hold.Free()
	if second.Code != ExitLocked {
		t.Fatalf("second run exited %d, want %d: %s", second.Code, ExitLocked, secondErr)
	}
	if msg := secondErr.String(); !strings.Contains(msg, "locked by another run") || !strings.Contains(msg, path) {
		t.Errorf("second run's message does not name the journal and the lock: %s", msg)
	}
	if <-first.Exited(); first.Code != 0 {
		t.Fatalf("first run exited %d: %s", first.Code, firstErr)
	}
	r.checkExactlyOnce(path, 5)
	r.checkIntentsCoverCalls(path)
}

// TestCrashFullDiskHaltsWithoutCallingAgain puts the journal on a tiny tmpfs,
// which needs root (CI runs as root).
func TestCrashFullDiskHaltsWithoutCallingAgain(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root; CI runs this as root")
	}
	const items = 300
	r := newCrashRig(t, items, stripesim.Faults{})
	mnt := filepath.Join(r.dir, "small")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=48k", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", mnt).Run() })
	path := filepath.Join(mnt, "j.jsonl")

	p, stderr := r.start(path, "-j", "4")
	if p.Wait(); p.Code != ExitJournal {
		t.Fatalf("exit %d on a full disk, want %d: %s", p.Code, ExitJournal, stderr)
	}
	if !strings.Contains(stderr.String(), "no space left on device") {
		t.Errorf("stderr does not say the disk is full: %s", stderr)
	}
	r.checkIntentsCoverCalls(path) // no call without a durable intent, even at the halt
	if calls := r.sim.Creates(); calls >= items {
		t.Fatalf("%d calls: the disk never filled", calls)
	}

	// Free space, resume: it finishes without a duplicate.
	if out, err := exec.Command("mount", "-o", "remount,size=4m", mnt).CombinedOutput(); err != nil {
		t.Fatalf("remount: %v: %s", err, out)
	}
	p, stderr = r.start(path, "-j", "4")
	if err := p.Wait(); err != nil {
		t.Fatalf("resume after freeing space: %v: %s", err, stderr)
	}
	r.checkExactlyOnce(path, items)
	r.checkIntentsCoverCalls(path)
}
