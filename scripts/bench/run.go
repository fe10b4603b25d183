package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// bench holds a session: where the binaries and inputs are, and the
// context that a signal cancels.
type bench struct {
	ctx     context.Context
	o       options
	sz      sizes
	bin     string // absolute
	baseBin string // absolute; "" when there is no old core
	gen     string // absolute
	work    string // absolute
	log     io.Writer
	// timeBin is GNU time, which runs every measured command.
	timeBin string
	env     []string // the environment of every command run
	runs    atomic.Int64
	// sortFlags make sort use every core and a buffer that holds a
	// million ids, where this sort takes them.
	sortFlags string
	// The real shape is checked against a real run once a session.
	shapeChecked bool
	shapeErr     error
}

func newBench(ctx context.Context, o options, log io.Writer) (*bench, error) {
	b := &bench{ctx: ctx, o: o, sz: fullSizes, log: log}
	if o.Quick {
		b.sz = quickSizes
	}
	if o.Items > 0 {
		b.sz.Big = o.Items
	}
	if o.Rounds > 0 {
		b.sz.Fast = o.Rounds
	}
	var err error
	for _, p := range []struct {
		dst *string
		src string
	}{{&b.bin, o.Bin}, {&b.baseBin, o.BaseBin}, {&b.gen, o.Gen}, {&b.work, o.Work}} {
		if p.src == "" {
			continue
		}
		if *p.dst, err = filepath.Abs(p.src); err != nil {
			return nil, err
		}
	}
	if fi, err := os.Stat(b.work); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("-work %s: want an existing directory", o.Work)
	}
	if b.timeBin, err = exec.LookPath(o.Time); err != nil {
		return nil, fmt.Errorf("-time %s: %v (install the package time)", o.Time, err)
	}
	if os.Getenv("STRIPE_API_KEY") == "" {
		return nil, errors.New("STRIPE_API_KEY is not set (scripts/bench.sh sets a fake test key)")
	}
	// A pinned locale: sort and jq behave alike on every machine, and sort
	// compares bytes as journal-merge does.
	b.env = append(os.Environ(), "LC_ALL=C")
	flags := fmt.Sprintf("-S 1G --parallel=%d", runtime.NumCPU())
	if exec.Command("sh", "-c", "sort "+flags+" </dev/null").Run() == nil {
		b.sortFlags = flags
	}
	return b, nil
}

// path names a file in the work dir.
func (b *bench) path(name string) string { return filepath.Join(b.work, name) }

// tool is the path of a refundkit binary, or an error saying it is missing.
func (b *bench) tool(name string) (string, error) {
	p := filepath.Join(b.bin, name)
	if !executable(p) {
		return "", fmt.Errorf("bin/%s is missing: cmd/%s is not built in this tree (make build builds every cmd/)", name, name)
	}
	return p, nil
}

// baseTool is the path of the old core's binary.
func (b *bench) baseTool(name string) (string, error) {
	p := filepath.Join(b.baseBin, name)
	if !executable(p) {
		return "", fmt.Errorf("%s is missing: cmd/%s was not built at %s", b.short(p), name, b.o.BaseRev)
	}
	return p, nil
}

func executable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// logf says what the session is doing, on stderr.
func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.log, "bench: "+format+"\n", args...)
}

// cmdSpec is one command to time.
type cmdSpec struct {
	argv   []string
	env    []string // added to the session's environment
	stdout string   // file to write stdout to; "" is /dev/null
}

// result is what one run of a command took and said.
type result struct {
	wall   time.Duration
	cpu    time.Duration // user + system time of the process and its children
	rss    int64         // peak resident set of the process and its children, bytes
	exit   int
	stderr string
}

// show is the command as the report prints it: shell syntax, with the work
// dir as $WORK and the binaries under bin/.
func (b *bench) show(c cmdSpec) string {
	var parts []string
	for _, e := range c.env {
		parts = append(parts, b.short(e))
	}
	for _, a := range c.argv {
		parts = append(parts, b.short(shellQuote(a)))
	}
	out := "/dev/null"
	if c.stdout != "" {
		out = b.short(c.stdout)
	}
	return strings.Join(parts, " ") + " > " + out
}

// short replaces the session's absolute paths by their names in the report.
func (b *bench) short(s string) string {
	s = strings.ReplaceAll(s, b.gen, "go run ./scripts/gen")
	s = strings.ReplaceAll(s, b.bin+"/", "bin/")
	if b.baseBin != "" {
		s = strings.ReplaceAll(s, b.baseBin+"/", "base-bin/")
	}
	return strings.ReplaceAll(s, b.work, "$WORK")
}

// run runs c once and measures it. A command that cannot start is an
// error; a nonzero exit is in the result, for the caller to judge.
func (b *bench) run(c cmdSpec) (result, error) {
	if err := b.ctx.Err(); err != nil {
		return result{}, err
	}
	// GNU time reports the peak RSS of the command alone: the rusage of a
	// child of this process would count this process's own RSS too, since
	// Go starts children with vfork, sharing its memory until exec.
	// A file per run: shard workers run side by side.
	timeOut := b.path(fmt.Sprintf("time-%d.out", b.runs.Add(1)))
	defer os.Remove(timeOut)
	argv := append([]string{b.timeBin, "-f", "%M", "-o", timeOut}, c.argv...)
	cmd := exec.CommandContext(b.ctx, argv[0], argv[1:]...)
	cmd.Env = append(slices.Clone(b.env), c.env...)
	if c.stdout == "" {
		c.stdout = os.DevNull
	}
	out, err := os.Create(c.stdout)
	if err != nil {
		return result{}, err
	}
	defer out.Close()
	cmd.Stdout = out
	var errBuf bytes.Buffer
	cmd.Stderr = &errBuf
	ownGroup(cmd)
	start := time.Now()
	err = cmd.Run()
	wall := time.Since(start)
	if b.ctx.Err() != nil {
		return result{}, b.ctx.Err()
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		return result{}, fmt.Errorf("%s: %v", b.short(c.argv[0]), err)
	}
	if err := out.Close(); err != nil {
		return result{}, err
	}
	r := result{wall: wall, exit: cmd.ProcessState.ExitCode(), stderr: errBuf.String()}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()) // time's own is a millisecond
	}
	if r.rss, err = readMaxRSS(timeOut); err != nil {
		return result{}, fmt.Errorf("%s: %v%s", b.short(c.argv[0]), err, quoteStderr(r.stderr))
	}
	return r, nil
}

// readMaxRSS reads the peak RSS in kilobytes that GNU time wrote on the
// last line of its output file (after "Command exited with non-zero
// status N" when so), and returns it in bytes.
func readMaxRSS(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	kb, err := strconv.ParseInt(lines[len(lines)-1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("time -f %%M wrote %q: %v", data, err)
	}
	return kb * 1024, nil
}

// ownGroup puts the command in a process group of its own, killed whole
// when the session is canceled (a pipeline's jq and sort too) and killed
// with this process if it dies.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
}

// checked runs c and returns an error when check refuses the result, with
// the command's stderr for context.
func (b *bench) checked(c cmdSpec, check func(result) error) func() (result, error) {
	return func() (result, error) {
		r, err := b.run(c)
		if err != nil {
			return r, err
		}
		if err := check(r); err != nil {
			return r, fmt.Errorf("%s: %v%s", b.show(c), err, quoteStderr(r.stderr))
		}
		return r, nil
	}
}

// exitIs is a check that the command exited with code.
func exitIs(code int) func(result) error {
	return func(r result) error {
		if r.exit != code {
			return fmt.Errorf("exit status %d, want %d", r.exit, code)
		}
		return nil
	}
}

func quoteStderr(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	if len(s) > 600 {
		s = s[:600] + "..."
	}
	return "\n    stderr: " + strings.ReplaceAll(s, "\n", "\n    ")
}

// alternate runs n rounds of the candidate and the baseline, one after the
// other and the order flipped each round, so both see the same noise and
// neither always runs on the cache the other warmed.
func alternate[T any](n int, cand, base func() (T, error)) (cs, bs []T, err error) {
	runs, err := rotate(n, []func() (T, error){cand, base})
	return runs[0], runs[1], err
}

// rotate runs n rounds of every side, each round starting one side later,
// so every side runs first as often as the others and none always runs on
// the cache another warmed. runs[i] are side i's results, by round.
func rotate[T any](n int, sides []func() (T, error)) (runs [][]T, err error) {
	runs = make([][]T, len(sides))
	for round := range n {
		for k := range sides {
			i := (k + round) % len(sides)
			x, err := sides[i]()
			if err != nil {
				return runs, err
			}
			runs[i] = append(runs[i], x)
		}
	}
	return runs, nil
}

// median of xs (the mean of the middle two when there is an even count).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// pairRatios divides a[i] by b[i]: the ratio of each side-by-side pair.
func pairRatios(a, b []float64) []float64 {
	r := make([]float64, min(len(a), len(b)))
	for i := range r {
		r[i] = a[i] / b[i]
	}
	return r
}

// seconds, cpuSeconds and rssMB pull one figure out of every result.
func seconds(rs []result) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = r.wall.Seconds()
	}
	return out
}

func cpuSeconds(rs []result) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = r.cpu.Seconds()
	}
	return out
}

func rssMB(rs []result) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = float64(r.rss) / 1e6
	}
	return out
}

// generate runs gen with args, stdout to path (when path is not "").
func (b *bench) generate(path string, args ...string) (string, error) {
	c := cmdSpec{argv: append([]string{b.gen}, args...), stdout: path}
	r, err := b.run(c)
	if err == nil && r.exit != 0 {
		err = fmt.Errorf("%s: exit status %d%s", b.show(c), r.exit, quoteStderr(r.stderr))
	}
	return b.show(c), err
}

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
