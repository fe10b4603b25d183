package main

// The Adyen rows: `refund --provider adyen` against the simulator with the
// notification receiver (adyen-webhook) keeping the notifications the
// simulator posts meanwhile, beside Stripe's refund of the same shape; the
// settling rerun, which settles every pending item from the notifications
// file with no API call, beside Stripe's rerun of a complete journal; and
// the receiver's own rate and fsyncs, beside BenchmarkFileAdd.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The processes a row starts and measures: started, stopped, their fsyncs
// counted by perf.

// proc is a server started for one run (the simulator or the receiver),
// whose URL it writes to its address file once it listens.
type proc struct {
	cmd    *exec.Cmd
	url    string
	stdout bytes.Buffer
	stderr bytes.Buffer
	done   chan struct{}
	// perfOut is perf stat's output when the server runs under it.
	perfOut string
}

// startProc starts argv with env added to the session's and waits for the
// URL written to addrFile.
func (b *bench) startProc(argv, env []string, addrFile string) (*proc, error) {
	if err := os.Remove(addrFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	p := &proc{cmd: exec.CommandContext(b.ctx, argv[0], argv[1:]...), done: make(chan struct{})}
	p.cmd.Env = append(slices.Clone(b.env), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	ownGroup(p.cmd)
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	name := filepath.Base(argv[0])
	deadline := time.Now().Add(30 * time.Second)
	for {
		if data, err := os.ReadFile(addrFile); err == nil && bytes.HasSuffix(data, []byte("\n")) {
			p.url = strings.TrimSpace(string(data))
			return p, nil
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("%s exited before it listened%s", name, quoteStderr(p.stderr.String()))
		case <-b.ctx.Done():
			p.stop()
			return nil, b.ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("%s wrote no URL to %s in 30s%s", name, addrFile, quoteStderr(p.stderr.String()))
		}
	}
}

// stop ends the server with SIGTERM (it stops cleanly and prints its
// counters), then SIGKILL if it lingers. Under perf stat, the signal goes
// to perf's child alone, so that perf sees it exit and writes its counts.
func (p *proc) stop() {
	target := -p.cmd.Process.Pid
	if p.perfOut != "" {
		if kids := perfChildren(p.cmd.Process.Pid); len(kids) == 1 {
			target = kids[0]
		}
	}
	syscall.Kill(target, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// perfChildren are the pids of pid's children.
func perfChildren(pid int) []int {
	paths, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var out []int
	for _, p := range paths {
		for _, f := range strings.Fields(readFile(p)) {
			if n, err := strconv.Atoi(f); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// fsyncEvents are the tracepoints perf stat counts on the receiver.
const fsyncEvents = "syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync"

var perfProbe struct {
	once sync.Once
	path string // "" when perf cannot count the syscall tracepoints here
	why  string
}

// perfPath is perf when it can count fsyncs on this machine (it needs the
// syscall tracepoints: root or perf_event_paranoid <= -1), else "" and why.
func (b *bench) perfPath() (string, string) {
	perfProbe.once.Do(func() {
		p, err := exec.LookPath("perf")
		if err != nil {
			perfProbe.why = "perf is not installed"
			return
		}
		out, err := exec.Command(p, "stat", "-x,", "-o", "/dev/stdout", "-e", fsyncEvents, "--", "true").CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("sys_enter_fsync")) {
			perfProbe.why = "perf stat cannot count syscalls:sys_enter_fsync here: " + firstLine(string(out))
			return
		}
		perfProbe.path = p
	})
	return perfProbe.path, perfProbe.why
}

// perfFsyncs sums the fsync and fdatasync counts perf stat -x, wrote.
func perfFsyncs(text string) (int64, error) {
	var n int64
	seen := 0
	for _, l := range strings.Split(text, "\n") {
		f := strings.Split(l, ",")
		if len(f) < 3 || !strings.HasPrefix(f[2], "syscalls:sys_enter_f") {
			continue
		}
		c, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("perf stat: %q: not a count", l)
		}
		n += c
		seen++
	}
	if seen == 0 {
		return 0, fmt.Errorf("perf stat wrote no fsync count: %q", firstLine(text))
	}
	return n, nil
}
