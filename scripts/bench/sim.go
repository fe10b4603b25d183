package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/refundkit/refundkit/refund/sim/stripesim"
)

// sim is a stripe-sim process started for one run, so every run refunds
// charges that no earlier run touched.
type sim struct {
	cmd    *exec.Cmd
	url    string
	stderr bytes.Buffer
	done   chan struct{} // closed when the process has exited
}

// simArgs are the simulator's flags for a run over charges charges.
func (b *bench) simArgs(charges int, extra ...string) []string {
	return append([]string{"--addr", "127.0.0.1:0", "--addr-file", b.path("sim.url"), "--charges", strconv.Itoa(charges)}, extra...)
}

// startSim starts bin/stripe-sim and waits for the URL it writes to its
// address file once it listens (written atomically: never half a line).
func (b *bench) startSim(args []string) (*sim, error) {
	exe, err := b.tool("stripe-sim")
	if err != nil {
		return nil, err
	}
	addrFile := b.path("sim.url")
	if err := os.Remove(addrFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	s := &sim{cmd: exec.CommandContext(b.ctx, exe, args...), done: make(chan struct{})}
	s.cmd.Env = b.env
	s.cmd.Stderr = &s.stderr
	ownGroup(s.cmd)
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if data, err := os.ReadFile(addrFile); err == nil && bytes.HasSuffix(data, []byte("\n")) {
			s.url = strings.TrimSpace(string(data))
			return s, nil
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("stripe-sim exited before it listened%s", quoteStderr(s.stderr.String()))
		case <-b.ctx.Done():
			s.stop()
			return nil, b.ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("stripe-sim wrote no URL to %s in 30s%s", addrFile, quoteStderr(s.stderr.String()))
		}
	}
}

// stats asks the simulator for its counters.
func (s *sim) stats() (stripesim.Stats, error) {
	var st stripesim.Stats
	resp, err := http.Get(s.url + "/_sim/stats")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET /_sim/stats: %s", resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// stop ends the simulator with SIGTERM (it stops cleanly), then SIGKILL if
// it lingers.
func (s *sim) stop() {
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
}

// apiRequests is the simulator's count of API requests, all routes.
func apiRequests(st stripesim.Stats) int64 {
	var n int64
	for _, c := range st.Requests {
		n += c
	}
	return n
}

// summary is refund's stderr summary line.
type summary struct {
	Items, Refunded, Skipped, Failed, InDoubt int64
	Creates, Lists                            int64 // Lists: every read, the sum of the three below
	PaymentReads, RefundLists, RefundReads    int64
	Records, Fsyncs                           int64
}

var (
	itemsRE = regexp.MustCompile(`(\d+) items: (\d+) refunded, (\d+) skipped, (\d+) failed, (\d+) in_doubt`)
	callsRE = regexp.MustCompile(`(\d+) creates, (\d+) payment reads, (\d+) (?:refund lists|notification look-ups?), (\d+) refund reads`) // Adyen's look-ups are in its notifications
	syncsRE = regexp.MustCompile(`(\d+) journal records in (\d+) fsyncs`)
	// oldCallsRE is the summary of a core before issue 34 (the old core's).
	oldCallsRE = regexp.MustCompile(`(\d+) create and (\d+) (?:list calls|notification look-ups?)`)
)

// parseSummary reads the figures of refund's summary from its stderr.
func parseSummary(stderr string) (summary, error) {
	var s summary
	for _, m := range []struct {
		re  *regexp.Regexp
		dst []*int64
	}{
		{itemsRE, []*int64{&s.Items, &s.Refunded, &s.Skipped, &s.Failed, &s.InDoubt}},
		{callsRE, []*int64{&s.Creates, &s.PaymentReads, &s.RefundLists, &s.RefundReads}},
		{syncsRE, []*int64{&s.Records, &s.Fsyncs}},
	} {
		sub := m.re.FindStringSubmatch(stderr)
		if old := oldCallsRE.FindStringSubmatch(stderr); m.re == callsRE && sub == nil && old != nil {
			sub, m.dst = old, []*int64{&s.Creates, &s.RefundLists} // its list calls: every read
		}
		if sub == nil {
			return s, fmt.Errorf("no %q in refund's summary", m.re)
		}
		for i, d := range m.dst {
			*d, _ = strconv.ParseInt(sub[i+1], 10, 64)
		}
	}
	s.Lists = s.PaymentReads + s.RefundLists + s.RefundReads
	return s, nil
}

// simRun is one refund run against a fresh simulator.
type simRun struct {
	result
	sum   summary
	stats stripesim.Stats
	// sustained is the simulator's API requests per second over the middle
	// of the run (from 10% to 90% of its requests), when sampled.
	sustained float64
	// nats is what the run's nats-server counted, with a NATS checkpoint.
	nats natsCounts
}

// itemsPerSec is the run's throughput over its whole wall time.
func (r simRun) itemsPerSec() float64 { return float64(r.sum.Items) / r.wall.Seconds() }

// refundOnSim starts a simulator with simArgs, refunds the plan's items
// with a new journal and refund's flags, checks every item was refunded
// exactly once, and stops the simulator. With sample, it reads the
// simulator's counters every 100 ms to find the sustained request rate.
func (b *bench) refundOnSim(items int, plan string, simArgs, flags []string, sample bool) (simRun, error) {
	exe, err := b.tool("refund")
	if err != nil {
		return simRun{}, err
	}
	return b.refundOnSimWith(exe, items, plan, simArgs, flags, sample)
}

// refundOnSimWith is refundOnSim with the refund binary exe (the old
// core's, say).
func (b *bench) refundOnSimWith(exe string, items int, plan string, simArgs, flags []string, sample bool) (simRun, error) {
	var run simRun
	journal := b.path("sim-journal.jsonl")
	if err := os.Remove(journal); err != nil && !errors.Is(err, os.ErrNotExist) {
		return run, err
	}
	s, err := b.startSim(simArgs)
	if err != nil {
		return run, err
	}
	defer s.stop()

	stopSampling := make(chan struct{})
	var samples []rateSample
	var wg sync.WaitGroup
	if sample {
		wg.Go(func() { samples = s.sample(stopSampling) })
	}
	c := cmdSpec{argv: append(append([]string{exe, "--journal", journal}, flags...), "--api-base", s.url, plan)}
	run.result, err = b.run(c)
	close(stopSampling)
	wg.Wait()
	if err != nil {
		return run, err
	}
	if run.exit != 0 {
		return run, fmt.Errorf("refund: exit status %d%s", run.exit, quoteStderr(run.stderr))
	}
	if run.sum, err = parseSummary(run.stderr); err != nil {
		return run, err
	}
	if run.stats, err = s.stats(); err != nil {
		return run, err
	}
	if run.sum.Refunded != int64(items) || run.stats.RefundsCreated != int64(items) {
		return run, fmt.Errorf("refund says %d refunded and the simulator created %d refunds, want %d of each", run.sum.Refunded, run.stats.RefundsCreated, items)
	}
	run.sustained = sustained(samples)
	return run, nil
}

// refundsOnSim starts a simulator with simArgs and runs one refund per
// plan at once against it (shard workers), each with a journal of its own,
// checks every item was refunded exactly once, and stops the simulator.
func (b *bench) refundsOnSim(items int, plans []string, simArgs, flags []string) (simRun, error) {
	journals := make([]string, len(plans))
	for k := range plans {
		journals[k] = b.path(fmt.Sprintf("sim-journal-%d.jsonl", k))
		if err := os.Remove(journals[k]); err != nil && !errors.Is(err, os.ErrNotExist) {
			return simRun{}, err
		}
	}
	return b.refundsAt(simArgs, items, len(plans), func(k int, exe, apiBase string) []string {
		return append(append([]string{exe, "--journal", journals[k]}, flags...), "--api-base", apiBase, plans[k])
	})
}

// refundsAt starts a simulator with simArgs, runs n refund processes at
// once against it (argv gives the k-th's command line), checks that
// together they refunded every one of items exactly once (their summaries
// and the simulator's count), and stops the simulator. The run's wall
// time is the slowest process's; its summary sums theirs.
func (b *bench) refundsAt(simArgs []string, items, n int, argv func(k int, exe, apiBase string) []string) (simRun, error) {
	exe, err := b.tool("refund")
	if err != nil {
		return simRun{}, err
	}
	s, err := b.startSim(simArgs)
	if err != nil {
		return simRun{}, err
	}
	defer s.stop()
	cmds := make([]cmdSpec, n)
	for k := range cmds {
		cmds[k] = cmdSpec{argv: argv(k, exe, s.url)}
	}
	var run simRun
	results := make([]result, len(cmds))
	errs := make([]error, len(cmds))
	var wg sync.WaitGroup
	for k, c := range cmds {
		wg.Go(func() { results[k], errs[k] = b.run(c) })
	}
	wg.Wait()
	for k, res := range results {
		if errs[k] != nil {
			return run, errs[k]
		}
		if res.exit != 0 {
			return run, fmt.Errorf("refund %d of %d: exit status %d%s", k+1, len(cmds), res.exit, quoteStderr(res.stderr))
		}
		sum, err := parseSummary(res.stderr)
		if err != nil {
			return run, err
		}
		run.wall = max(run.wall, res.wall)
		run.cpu += res.cpu
		run.rss = max(run.rss, res.rss)
		run.sum.Items += sum.Items
		run.sum.Refunded += sum.Refunded
		run.sum.Creates += sum.Creates
		run.sum.Lists += sum.Lists
		run.sum.Records += sum.Records
		run.sum.Fsyncs += sum.Fsyncs
	}
	if run.stats, err = s.stats(); err != nil {
		return run, err
	}
	if run.sum.Refunded != int64(items) || run.stats.RefundsCreated != int64(items) {
		return run, fmt.Errorf("the %d processes say %d refunded and the simulator created %d refunds, want %d of each", len(cmds), run.sum.Refunded, run.stats.RefundsCreated, items)
	}
	return run, nil
}

// rateSample is the simulator's request count at one instant.
type rateSample struct {
	at       time.Time
	requests int64
}

// sample reads the simulator's request count every 100 ms until stop.
func (s *sim) sample(stop <-chan struct{}) []rateSample {
	var out []rateSample
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return out
		case <-tick.C:
			if st, err := s.stats(); err == nil {
				out = append(out, rateSample{time.Now(), apiRequests(st)})
			}
		}
	}
}

// sustained is the request rate between the first sample at 10% of the
// final count and the last at 90% or below: the steady state, without the
// start-up and the tail.
func sustained(samples []rateSample) float64 {
	if len(samples) < 2 {
		return 0
	}
	total := samples[len(samples)-1].requests
	var first, last *rateSample
	for i := range samples {
		s := &samples[i]
		if first == nil && s.requests*10 >= total {
			first = s
		}
		if s.requests*10 <= total*9 {
			last = s
		}
	}
	if first == nil || last == nil || !last.at.After(first.at) {
		return 0
	}
	return float64(last.requests-first.requests) / last.at.Sub(first.at).Seconds()
}

// deadAPI is a loopback URL where nothing listens: any API call to it
// fails at once, so a run that succeeds against it made none.
func deadAPI() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return "", err
	}
	return "http://" + addr, nil
}
