package cli

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/stripesim"
)

// These tests run the real refund command as a separate process (this test
// binary re-executed as `refund`, see TestMain) and kill, interrupt or
// starve it at the moments that matter: with a refund call in flight at the
// simulator, which holds the request in a hook until the process is gone.

type crashRig struct {
	t       *testing.T
	sim     *stripesim.Server
	url     string
	dir     string
	plan    string
	creates atomic.Int64
	keys    sync.Map // idempotency keys the simulator received
}

func newCrashRig(t *testing.T, items int, faults stripesim.Faults) *crashRig {
	t.Helper()
	r := &crashRig{t: t, dir: t.TempDir()}
	r.sim = stripesim.New(stripesim.Config{Charges: stripesim.GenerateCharges(items, 3), Faults: faults, Seed: 3})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodPost && req.URL.Path == "/v1/refunds" {
			r.creates.Add(1)
			r.keys.Store(req.Header.Get("Idempotency-Key"), true)
		}
		r.sim.Handler().ServeHTTP(w, req)
	}))
	t.Cleanup(ts.Close)
	r.url = ts.URL
	var b strings.Builder
	for i := 1; i <= items; i++ {
		fmt.Fprintf(&b, `{"batch":"crash","item":"i%d","charge":"ch_sim%07d"}`+"\n", i, i)
	}
	r.plan = filepath.Join(r.dir, "plan.jsonl")
	if err := os.WriteFile(r.plan, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return r
}

// start launches `refund` over the plan; it does not wait.
func (r *crashRig) start(journalPath string, args ...string) (*exec.Cmd, *bytes.Buffer) {
	r.t.Helper()
	bin, err := exec.LookPath("refund")
	if err != nil {
		r.t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"--journal", journalPath, "--rate", "0", r.plan}, args...)...)
	cmd.Env = append(os.Environ(), "STRIPE_API_KEY="+scriptKey, "STRIPE_API_BASE="+r.url)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	return cmd, &stderr
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return -int(ws.Signal())
		}
		return ee.ExitCode()
	}
	if err != nil {
		return -1000
	}
	return 0
}

// checkExactlyOnce asserts that every planned item has exactly one live
// refund at the simulator and that the journal says so too.
func (r *crashRig) checkExactlyOnce(journalPath string, items int) {
	r.t.Helper()
	count := map[string]int{}
	for _, rf := range r.sim.Refunds() {
		if rf.Status == "canceled" || rf.Status == "failed" {
			continue
		}
		count[rf.Metadata[refund.MetaItem]]++
	}
	state, torn, err := journal.Load(journalPath)
	if err != nil {
		r.t.Fatal(err)
	}
	if torn != nil {
		r.t.Errorf("journal left with a torn tail after a clean final run: %v", torn)
	}
	for i := 1; i <= items; i++ {
		item := fmt.Sprintf("i%d", i)
		if count[item] != 1 {
			r.t.Errorf("item %s: %d refunds at Stripe, want exactly 1", item, count[item])
		}
		if st, _ := state.Lookup("crash", item); st.Status != journal.StatusRefunded {
			r.t.Errorf("item %s: journal says %v, want refunded", item, st.Status)
		}
	}
	if len(count) != items {
		r.t.Errorf("%d items refunded at Stripe, want %d", len(count), items)
	}
}

// checkIntentsCoverCalls asserts the write-ahead rule: every key the
// simulator received has an intent that reached the journal's disk first.
func (r *crashRig) checkIntentsCoverCalls(journalPath string) {
	r.t.Helper()
	f, err := os.Open(journalPath)
	if err != nil {
		r.t.Fatal(err)
	}
	defer f.Close()
	intents := map[string]bool{}
	sc := journal.NewScanner(f, journalPath)
	for sc.Scan() {
		if rec := sc.Record(); rec.Type == journal.TypeIntent {
			intents[rec.Key] = true
		}
	}
	if err := sc.Err(); err != nil {
		r.t.Fatal(err)
	}
	r.keys.Range(func(k, _ any) bool {
		if !intents[k.(string)] {
			r.t.Errorf("the simulator received key %s that no journaled intent names", k)
		}
		return true
	})
}

func TestKill9AtRandomMomentsNeverRefundsTwice(t *testing.T) {
	const items, kills = 150, 30
	r := newCrashRig(t, items, stripesim.Faults{LatencyJitter: time.Millisecond})
	path := filepath.Join(r.dir, "j.jsonl")
	rng := rand.New(rand.NewPCG(1, 2))

	type proc struct {
		cmd    *exec.Cmd
		exited chan struct{}
	}
	var current atomic.Pointer[proc]
	var armed atomic.Int64 // kill when the create count reaches this; 0: never
	var killedInFlight atomic.Int64
	r.sim.SetCreateHook(func(string) {
		if at := armed.Load(); at > 0 && r.creates.Load() >= at && armed.CompareAndSwap(at, 0) {
			if p := current.Load(); p != nil {
				p.cmd.Process.Kill()
				<-p.exited // the process is gone before this request goes on
				killedInFlight.Add(1)
			}
		}
	})

	for round := 0; ; round++ {
		if round > kills+20 {
			t.Fatalf("not done after %d runs", round)
		}
		cmd, stderr := r.start(path, "-j", "8")
		if round < kills {
			armed.Store(r.creates.Load() + 1 + rng.Int64N(8))
		} else {
			armed.Store(0)
		}
		p := &proc{cmd: cmd, exited: make(chan struct{})}
		current.Store(p)
		err := cmd.Wait()
		current.Store(nil)
		close(p.exited)
		switch code := exitCode(err); code {
		case 0:
			if round < kills {
				continue // finished before the kill point; keep killing later runs
			}
			if killedInFlight.Load() == 0 {
				t.Fatal("no run was killed with a call in flight: the test proved nothing")
			}
			r.checkExactlyOnce(path, items)
			r.checkIntentsCoverCalls(path)
			t.Logf("%d runs, %d killed with a refund call in flight, %d create calls for %d items",
				round+1, killedInFlight.Load(), r.creates.Load(), items)
			return
		case -9:
		default:
			t.Fatalf("run %d exited %d: %s", round, code, stderr)
		}
	}
}

func TestSigtermFinishesCallsInFlightThenResumes(t *testing.T) {
	const items = 60
	r := newCrashRig(t, items, stripesim.Faults{})
	path := filepath.Join(r.dir, "j.jsonl")
	hold := make(chan struct{})
	var current atomic.Pointer[exec.Cmd]
	var once sync.Once
	r.sim.SetCreateHook(func(string) {
		if r.creates.Load() == 10 {
			once.Do(func() {
				// A deploy: SIGTERM with a refund call in flight.
				current.Load().Process.Signal(syscall.SIGTERM)
				close(hold)
			})
		}
	})
	cmd, stderr := r.start(path, "-j", "1")
	current.Store(cmd)
	err := cmd.Wait()
	<-hold
	if code := exitCode(err); code != ExitInterrupted {
		t.Fatalf("exit %d after SIGTERM, want %d: %s", code, ExitInterrupted, stderr)
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
	if refunded != int(r.creates.Load()) || inDoubt != 0 {
		t.Errorf("after SIGTERM: %d refunded and %d in doubt in the journal, %d calls made", refunded, inDoubt, r.creates.Load())
	}
	if refunded >= items {
		t.Fatalf("the run did not stop early (%d refunded)", refunded)
	}
	r.sim.SetCreateHook(nil)
	cmd, stderr = r.start(path, "-j", "4")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("resume: %v: %s", err, stderr)
	}
	r.checkExactlyOnce(path, items)
}

func TestSecondRunOnTheSameJournalIsRefused(t *testing.T) {
	r := newCrashRig(t, 5, stripesim.Faults{})
	path := filepath.Join(r.dir, "j.jsonl")
	inFlight, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	r.sim.SetCreateHook(func(string) {
		once.Do(func() { close(inFlight) })
		<-release
	})
	first, firstErr := r.start(path, "-j", "1")
	<-inFlight // the first run holds the journal and has a call in flight
	second, secondErr := r.start(path)
	err := second.Wait()
	close(release)
	if code := exitCode(err); code != ExitLocked {
		t.Fatalf("second run exited %d, want %d: %s", code, ExitLocked, secondErr)
	}
	if !strings.Contains(secondErr.String(), "locked by another run") || !strings.Contains(secondErr.String(), path) {
		t.Errorf("second run's message does not name the journal and the lock: %s", secondErr)
	}
	if err := first.Wait(); err != nil {
		t.Fatalf("first run: %v: %s", err, firstErr)
	}
	r.checkExactlyOnce(path, 5)
}

// TestFullDiskHaltsWithoutCallingAgain puts the journal on a tiny tmpfs,
// which needs root (CI runs as root).
func TestFullDiskHaltsWithoutCallingAgain(t *testing.T) {
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

	cmd, stderr := r.start(path, "-j", "4")
	err := cmd.Wait()
	if code := exitCode(err); code != ExitJournal {
		t.Fatalf("exit %d on a full disk, want %d: %s", code, ExitJournal, stderr)
	}
	if !strings.Contains(stderr.String(), "no space left on device") {
		t.Errorf("stderr does not say the disk is full: %s", stderr)
	}
	r.checkIntentsCoverCalls(path)
	callsAtHalt := r.creates.Load()
	if callsAtHalt >= items {
		t.Fatalf("%d calls: the disk never filled", callsAtHalt)
	}

	// Free space, resume: it finishes without a duplicate.
	if out, err := exec.Command("mount", "-o", "remount,size=4m", mnt).CombinedOutput(); err != nil {
		t.Fatalf("remount: %v: %s", err, out)
	}
	cmd, stderr = r.start(path, "-j", "4")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("resume after freeing space: %v: %s", err, stderr)
	}
	r.checkExactlyOnce(path, items)
	r.checkIntentsCoverCalls(path)
}
