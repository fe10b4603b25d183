package cli

// Workers on one PostgreSQL checkpoint split their account's rate budget
// (issue 22), through the real binaries.

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// TestPGBudgetSharedByLiveWorkers: three workers with no --share and no
// --rate on one checkpoint, against the simulator enforcing Stripe's
// test-mode limits (25 requests/s for the account). Each takes a third of
// the batch's 0.8; one is killed with SIGKILL mid-batch, and once its
// last_seen goes stale the other two take half each. Their combined rate
// stays under the account's limit throughout: the simulator answers
// (almost) no request 429. Today's behaviour, 0.8 each, asked 2.4 times
// what the account allows.
func TestPGBudgetSharedByLiveWorkers(t *testing.T) {
	const items = 150
	const lease = 3 * time.Second
	r := newBudgetRig(t, items)
	ws := r.ws
	r.mayExit["C"] = true
	for _, w := range []string{"A", "B", "C"} {
		r.start(w, lease)
	}
	r.await("all three took a third of 0.8", r.each(0.8/3, "A", "B", "C"))
	r.await("C refunded some items", r.refundedBy("C", 3))
	atKill := r.sim.Stats()
	ws["C"].Cmd.Process.Kill()
	<-ws["C"].Exited()
	r.await("A and B took half of 0.8 each after C died", r.each(0.4, "A", "B"))
	var stopped *time.Time
	if err := r.db.QueryRow(context.Background(), `SELECT stopped_at FROM refundkit.workers WHERE worker = 'C'`).Scan(&stopped); err != nil {
		t.Fatal(err)
	}
	if stopped != nil {
		t.Fatalf("C, killed, is marked stopped at %v: the test killed nothing", stopped)
	}
	for _, w := range []string{"A", "B"} {
		waitExit(t, ws[w], 120*time.Second)
		msg := ws[w].Stderr.String()
		if ws[w].Code != ExitOK {
			t.Errorf("%s exited %d, want 0: %s", w, ws[w].Code, msg)
		}
		// Its own account of the split, as -v tells it.
		for _, n := range []int{3, 2} {
			if !strings.Contains(msg, fmt.Sprintf("pacing: the live workers of this account split --share workers=%d share=0.8", n)) {
				t.Errorf("%s never said it shared the account with %d workers: %s", w, n, msg)
			}
		}
	}
	limited, requests, reasons := r.limited()
	t.Logf("%d requests, %d answered 429 (%v); %d of them before the kill", requests, limited, reasons, atKill.RateLimited)
	// 0.8 of the account's limit, split: under it. A few 429s are a busy
	// machine's stalls (a worker's pending requests sent together);
	// today's 0.8 per worker asked 60 requests/s of 25 and got far more.
	if limited*100 > 3*requests {
		t.Errorf("%d of %d requests answered 429 (%v): the workers together asked more than the account allows", limited, requests, reasons)
	}
	r.checkExactlyOnce()
}

// TestPGBudgetPausedWorkerCountsAgain: of two workers, one is stopped
// (SIGSTOP) until the other, seeing its last_seen go stale, takes the
// whole 0.8; once it runs again (SIGCONT) it tells the other at once,
// which goes back to half. The paused worker may lose its claims meanwhile
// (exit 3 is then right); the batch is still refunded exactly once.
func TestPGBudgetPausedWorkerCountsAgain(t *testing.T) {
	const items = 150
	const lease = 3 * time.Second
	r := newBudgetRig(t, items)
	r.mayExit["B"] = true
	r.start("A", lease)
	r.start("B", lease)
	r.await("both took half of 0.8", r.each(0.4, "A", "B"))
	// Stopped mid-batch, not while it loads the plan under the batch's
	// lock (which would stall A's load instead).
	r.await("B refunded some items", r.refundedBy("B", 3))
	if err := r.ws["B"].Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	r.await("A took all of 0.8 while B was stopped", r.each(0.8, "A"))
	if err := r.ws["B"].Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	r.await("A went back to half once B ran again", r.each(0.4, "A"))
	for _, w := range []string{"A", "B"} {
		waitExit(t, r.ws[w], 120*time.Second)
	}
	if p := r.ws["A"]; p.Code != ExitOK {
		t.Errorf("A exited %d, want 0: %s", p.Code, &p.Stderr)
	}
	if p := r.ws["B"]; p.Code != ExitOK && p.Code != ExitJournal {
		t.Errorf("B exited %d, want 0 or 3 (a claim lost while it was stopped): %s", p.Code, &p.Stderr)
	}
	limited, requests, reasons := r.limited()
	t.Logf("%d requests, %d answered 429 (%v)", requests, limited, reasons)
	if limited*100 > 3*requests {
		t.Errorf("%d of %d requests answered 429 (%v): the workers together asked more than the account allows", limited, requests, reasons)
	}
	r.checkExactlyOnce()
}

// budgetRig is workers started on one checkpoint with the simulator's
// test-mode limits, and what the checkpoint says of their parts.
type budgetRig struct {
	*pgRig
	ws map[string]*crashrig.Proc
	// mayExit are the workers allowed to end before the awaited state
	// (killed, or losing their claims while paused).
	mayExit map[string]bool
}

func newBudgetRig(t *testing.T, items int) *budgetRig {
	r := &budgetRig{pgRig: newPGRig(t, items, stripesim.Faults{RateLimits: stripesim.RateLimits{Mode: stripesim.RateLimitsTest}}),
		ws: map[string]*crashrig.Proc{}, mayExit: map[string]bool{}}
	t.Cleanup(func() {
		for _, p := range r.ws {
			p.Cmd.Process.Signal(syscall.SIGCONT)
			p.Cmd.Process.Kill()
			<-p.Exited()
		}
	})
	return r
}

// start launches worker with no --share and no --rate, -v.
func (r *budgetRig) start(worker string, lease time.Duration) {
	t := r.t
	t.Helper()
	in, err := os.Open(r.plan)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	p, err := crashrig.Start(crashrig.Cmd{
		Bin:   r.bin,
		Args:  []string{"--journal", r.url, "--lease", lease.String(), "--worker", worker, "-j", "4", "-v"},
		Stdin: in,
		Env:   crashrig.Env(scriptKey, r.sim.URL()),
	})
	if err != nil {
		t.Fatal(err)
	}
	go p.Wait()
	r.ws[worker] = p
}

// parts are the budget_share the workers recorded, by name (none
// before the first worker made the schema).
func (r *budgetRig) parts() map[string]float64 {
	got := map[string]float64{}
	rows, err := r.db.Query(context.Background(), `SELECT worker, budget_share FROM refundkit.workers WHERE budget_share IS NOT NULL`)
	if err != nil {
		return got
	}
	defer rows.Close()
	for rows.Next() {
		var w string
		var s float64
		if err := rows.Scan(&w, &s); err != nil {
			r.t.Fatal(err)
		}
		got[w] = s
	}
	return got
}

// await polls until cond holds; the deadline is a failure timeout.
func (r *budgetRig) await(what string, cond func() bool) {
	t := r.t
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never %s; the workers' parts: %v", what, r.parts())
		}
		for name, p := range r.ws {
			select {
			case <-p.Exited():
				if !r.mayExit[name] {
					t.Fatalf("worker %s exited %d before %s: %s", name, p.Code, what, &p.Stderr)
				}
			default:
			}
		}
		time.Sleep(20 * time.Millisecond) // a poll, not a synchronisation
	}
}

// each holds when every named worker records the part want.
func (r *budgetRig) each(want float64, names ...string) func() bool {
	return func() bool {
		got := r.parts()
		for _, n := range names {
			if math.Abs(got[n]-want) > 1e-9 {
				return false
			}
		}
		return true
	}
}

// refundedBy holds once worker has journaled n refunds.
func (r *budgetRig) refundedBy(worker string, n int) func() bool {
	return func() bool {
		var got int
		r.db.QueryRow(context.Background(), `SELECT count(*) FROM refundkit.records WHERE worker = $1 AND rec::jsonb->>'type' = 'refunded'`, worker).Scan(&got)
		return got >= n
	}
}

// limited are the simulator's 429s for the rate limits and its requests.
func (r *budgetRig) limited() (limited, requests int64, reasons map[string]int64) {
	st := r.sim.Stats()
	for _, n := range st.Requests {
		requests += n
	}
	return st.RateLimitedReasons["global-rate"] + st.RateLimitedReasons["endpoint-rate"], requests, st.RateLimitedReasons
}
