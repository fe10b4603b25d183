package cli

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// These tests run the real commands (this test binary re-executed, see
// TestMain) with a stdout that stops taking writes: a pipe whose reader
// is gone, as `refund | head -1` leaves it, and /dev/full. Each is a
// stdout failure, exit 3, never a death by SIGPIPE (141) with calls in
// flight unjournaled.

// watchedOutput is a process's output that a test waits on: until a line
// holds a text, never for a while.
type watchedOutput struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed at the next write
}

func newWatchedOutput() *watchedOutput { return &watchedOutput{changed: make(chan struct{})} }

func (w *watchedOutput) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	close(w.changed)
	w.changed = make(chan struct{})
	return len(p), nil
}

func (w *watchedOutput) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// waitFor returns once the output holds text; it fails the test if the
// process exits first.
func (w *watchedOutput) waitFor(t *testing.T, text string, exited <-chan struct{}) {
	t.Helper()
	for {
		w.mu.Lock()
		found, changed := strings.Contains(w.buf.String(), text), w.changed
		w.mu.Unlock()
		if found {
			return
		}
		select {
		case <-changed:
		case <-exited:
			if !strings.Contains(w.String(), text) {
				t.Fatalf("the process exited before its output said %q: %s", text, w)
			}
			return
		}
	}
}

// pipedRun is a command started with stdout given as a file (a pipe's
// write end, /dev/full) and stderr watched.
type pipedRun struct {
	cmd    *exec.Cmd
	stderr *watchedOutput
	exited chan struct{}
	code   int
}

func startPiped(t *testing.T, stdout *os.File, env []string, bin string, args ...string) *pipedRun {
	t.Helper()
	r := &pipedRun{cmd: exec.Command(bin, args...), stderr: newWatchedOutput(), exited: make(chan struct{})}
	// An *os.File is the child's fd 1 itself: its writes meet the pipe
	// (or the device) directly, as a shell's would.
	r.cmd.Stdout, r.cmd.Stderr, r.cmd.Env = stdout, r.stderr, env
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		r.code = crashrig.ExitCode(r.cmd.Wait())
		close(r.exited)
	}()
	return r
}

func (r *pipedRun) wait() int {
	<-r.exited
	return r.code
}

// closedStdout is a pipe whose reader is already gone, as `| head -0`
// leaves it: the first write fails with EPIPE (or kills with SIGPIPE).
func closedStdout(t *testing.T) *os.File {
	t.Helper()
	rd, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	rd.Close()
	t.Cleanup(func() { wr.Close() })
	return wr
}

// TestBrokenPipeRefundStopsSendingAndJournalsCallsInFlight: `refund |
// head -1`. The reader takes the first result line and goes while every
// worker has a call in flight; one call then answers, and its line meets
// the closed pipe. The run sends nothing new, finishes and journals the
// calls in flight, prints its summary and exits 3; the rerun sends
// nothing for the items refunded. /dev/full mid-run is the same failure.
func TestBrokenPipeRefundStopsSendingAndJournalsCallsInFlight(t *testing.T) {
	for _, tc := range []struct {
		name, says string
		pipe       bool
	}{{"closed-pipe", "broken pipe", true}, {"dev-full", "no space left on device", false}} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.pipe {
				if _, err := os.Stat("/dev/full"); err != nil {
					t.Skip("needs /dev/full")
				}
			}
			const items, workers, parkFrom = 60, 4, 3
			r := newCrashRig(t, items, stripesim.Faults{})
			path := filepath.Join(r.dir, "j.jsonl")
			// Calls from the parkFrom-th on are held at the simulator until
			// the test lets them go: one by one (a send on gate), or all
			// (close).
			gate, parked := make(chan struct{}), make(chan string, items)
			var open sync.Once
			release := func() { open.Do(func() { close(gate) }) }
			t.Cleanup(release) // before the simulator closes: it waits for its hook
			r.sim.OnCreate(func(n int64, key string) {
				if n >= parkFrom {
					parked <- key
					<-gate
				}
			})

			var stdout, rd *os.File
			if tc.pipe {
				var err error
				if rd, stdout, err = os.Pipe(); err != nil {
					t.Fatal(err)
				}
			} else {
				var err error
				if stdout, err = os.OpenFile("/dev/full", os.O_WRONLY, 0); err != nil {
					t.Fatal(err)
				}
			}
			run := startPiped(t, stdout, crashrig.Env(scriptKey, r.sim.URL()), r.bin,
				"--journal", path, "--rate", "0", "-j", fmt.Sprint(workers), r.plan)
			stdout.Close() // the child holds its own
			if tc.pipe {
				// head -1: one line read, then every worker's call held,
				// then the reader gone.
				line, err := bufio.NewReader(rd).ReadString('\n')
				if err != nil || !strings.Contains(line, `"status":"refunded"`) {
					t.Fatalf("first result line %q: %v; stderr: %s", line, err, run.stderr)
				}
				for range workers {
					select {
					case <-parked:
					case <-run.exited:
						t.Fatalf("exit %d before %d calls were in flight: %s", run.code, workers, run.stderr)
					}
				}
				rd.Close()
				// One call answers: its result line is written to the
				// closed pipe.
				select {
				case gate <- struct{}{}:
				case <-run.exited:
					t.Fatalf("exit %d with calls held: %s", run.code, run.stderr)
				}
			}
			run.stderr.waitFor(t, "stopping", run.exited)
			callsAtStop := r.sim.Creates()
			release()
			code := run.wait()
			stderr := run.stderr.String()
			if code != ExitJournal {
				t.Fatalf("exit %d, want %d: %s", code, ExitJournal, stderr)
			}
			for _, want := range []string{
				"refund: stdout: ", tc.says, // named, with the cause
				"items: ", "refunded", // the summary
				"result lines were lost",
			} {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr does not say %q: %s", want, stderr)
				}
			}

			// Every call made was answered and journaled: nothing in doubt.
			state, _, err := journal.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			refunded := map[string]bool{}
			inDoubt := 0
			state.Each(func(_, item string, st journal.ItemState) {
				switch st.Status {
				case journal.StatusRefunded:
					refunded[item] = true
				case journal.StatusInDoubt:
					inDoubt++
				}
			})
			calls := r.sim.Creates()
			if inDoubt != 0 || len(refunded) != int(calls) {
				t.Errorf("%d calls made, %d items refunded and %d in doubt in the journal: want every call journaled", calls, len(refunded), inDoubt)
			}
			r.checkIntentsCoverCalls(path)
			// Nothing new was sent after the stop: only the calls in
			// flight then (each worker's one, at most) were finished.
			if calls > callsAtStop+workers || calls >= items {
				t.Errorf("%d calls, %d of them when it said it was stopping: it did not stop sending", calls, callsAtStop)
			}

			// The rerun sends nothing for the items refunded.
			r.sim.OnCreate(nil)
			p, rerr := r.start(path, "-j", fmt.Sprint(workers))
			if p.Wait(); p.Code != 0 {
				t.Fatalf("rerun exited %d: %s", p.Code, rerr)
			}
			for _, key := range r.sim.KeysSince(calls) {
				if _, item, _, ok := crashrig.ParseKey(key); ok && refunded[item] {
					t.Errorf("rerun sent %s for item %s, refunded by the first run", key, item)
				}
			}
			if got := strings.Count(p.Stdout.String(), `"status":"skipped"`); got != len(refunded) {
				t.Errorf("rerun skipped %d items, want the %d refunded", got, len(refunded))
			}
			r.checkExactlyOnce(path, items)
			r.checkIntentsCoverCalls(path)
		})
	}
}

// TestBrokenPipeEveryCommandExits3: audit, plan and journal-merge with a
// stdout whose reader is gone (`| head -0`) exit 3 naming stdout, as with
// a full disk; none dies by SIGPIPE.
func TestBrokenPipeEveryCommandExits3(t *testing.T) {
	dir := t.TempDir()
	csv := filepath.Join(dir, "charges.csv")
	planPath := filepath.Join(dir, "plan.jsonl")
	jpath := filepath.Join(dir, "j.jsonl")
	write := func(path, s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(csv, "charge,amount,currency\nch_1,100,usd\nch_2,200,usd\n")
	// Many items, so that an audit asking Stripe has charges left to list
	// when its first finding meets the closed pipe: it lists at most a
	// window (16 a worker, 4 workers) ahead of the findings.
	var plan strings.Builder
	for i := 1; i <= 200; i++ {
		fmt.Fprintf(&plan, `{"batch":"b","item":"ch_%d","charge":"ch_%d"}`+"\n", i, i)
	}
	write(planPath, plan.String())
	// One item refunded, the others missing: audit has findings to write.
	write(jpath, `{"v":1,"type":"refunded","ts":"2026-01-02T03:04:05Z","batch":"b","item":"ch_1","charge":"ch_1","refund":"re_1","amount":100,"currency":"usd","status":"succeeded","source":"api"}`+"\n")
	sim, err := crashrig.StartSim(stripesim.Config{Charges: stripesim.GenerateCharges(2, 3), Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Close)
	env := crashrig.Env(scriptKey, sim.URL())
	for _, tc := range []struct {
		name string
		args []string
		says string
	}{
		{"audit", []string{"--plan", planPath, jpath}, "audit: stdout: "},
		// Asking Stripe, audit stops at the first finding it cannot
		// write: no verdict.
		{"audit --stripe", []string{"--stripe", "--rate", "0", "--plan", planPath, jpath}, "audit: stopped: the charges not yet listed were not checked, so this audit gives no verdict"},
		{"plan", []string{"--batch", "b", csv}, "plan: write the plan: "},
		{"journal-merge", []string{jpath}, "journal-merge: cannot write stdout: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin, err := exec.LookPath(strings.Fields(tc.name)[0])
			if err != nil {
				t.Fatal(err)
			}
			run := startPiped(t, closedStdout(t), env, bin, tc.args...)
			code := run.wait()
			stderr := run.stderr.String()
			if code != ExitJournal {
				t.Fatalf("exit %d, want %d: %s", code, ExitJournal, stderr)
			}
			if !strings.Contains(stderr, tc.says) || !strings.Contains(stderr, "broken pipe") {
				t.Errorf("stderr does not say %q and broken pipe: %s", tc.says, stderr)
			}
		})
	}
}
