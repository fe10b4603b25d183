package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// report is a session's figures and what they were measured on.
type report struct {
	command            string
	quick              bool
	sz                 sizes
	started, finished  time.Time
	machine            [][2]string
	fsync              []time.Duration
	loadStart, loadEnd string
	loadNote           string
	baseRev            string // the old core's revision, "" when none ran
	rows               []*row
}

// measure runs the session: the machine, the disk's fsync latency, then
// every row. Only a signal stops it early; a failed row is reported.
func (b *bench) measure() (*report, error) {
	rep := &report{command: b.o.Command, quick: b.o.Quick, sz: b.sz, baseRev: "none: no -base-bin"}
	if b.baseBin != "" {
		rep.baseRev = b.o.BaseRev
	}
	rep.machine = b.machine()
	rep.loadNote = b.waitForQuiet()
	rep.loadStart = loadAverage()
	rep.started = time.Now()
	b.logf("load average at the start: %s", rep.loadStart)

	var err error
	if rep.fsync, err = b.fsyncLatency(b.sz.Fsyncs); err != nil {
		return nil, fmt.Errorf("fsync latency: %v", err)
	}
	for _, spec := range rows {
		if len(b.o.Only) > 0 && !slices.Contains(b.o.Only, spec.name) {
			continue
		}
		r := &row{name: spec.name}
		b.logf("%s: start", spec.name)
		start := time.Now()
		err := spec.run(b, r)
		if b.ctx.Err() != nil {
			return nil, b.ctx.Err()
		}
		if err != nil {
			r.verdict, r.err = failed, err
			b.logf("%s: FAILED: %v", spec.name, err)
		} else {
			b.logf("%s: %s | %s | %s (%s)", spec.name, r.cand, r.base, r.ratio, time.Since(start).Round(time.Second))
		}
		rep.rows = append(rep.rows, r)
	}
	rep.finished = time.Now()
	rep.loadEnd = loadAverage()
	return rep, nil
}

// waitForQuiet waits, polling every 30 s, until the 1-minute load average
// is at most -max-load, for at most -load-wait. It returns a note when it
// waited or gave up.
func (b *bench) waitForQuiet() string {
	start := time.Now()
	for {
		load := load1()
		if load <= b.o.MaxLoad {
			if waited := time.Since(start); waited > time.Second {
				return fmt.Sprintf("waited %s for the 1-minute load to drop to %.2f first", waited.Round(time.Second), b.o.MaxLoad)
			}
			return ""
		}
		if time.Since(start) >= b.o.LoadWait {
			return fmt.Sprintf("the 1-minute load was still %.2f after waiting %s: measured anyway (figures are noisier)", load, b.o.LoadWait)
		}
		b.logf("1-minute load %.2f is above %.2f: waiting (polling every 30s, up to %s more)", load, b.o.MaxLoad, (b.o.LoadWait - time.Since(start)).Round(time.Second))
		select {
		case <-b.ctx.Done():
			return ""
		case <-time.After(30 * time.Second):
		}
	}
}

// loadAverage is the 1, 5 and 15-minute load averages.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

func load1() float64 {
	l, err := strconv.ParseFloat(strings.Fields(loadAverage() + " ")[0], 64)
	if err != nil {
		return 0
	}
	return l
}

// machine describes what the figures were measured on.
func (b *bench) machine() [][2]string {
	m := [][2]string{
		{"nproc", strconv.Itoa(runtime.NumCPU())},
		{"CPU", procField("/proc/cpuinfo", "model name")},
		{"memory", memory()},
		{"kernel", firstLine(readFile("/proc/sys/kernel/osrelease"))},
		{"go", runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH},
		{"disk (temp dir)", b.disk()},
		{"jq", firstLine(output("jq", "--version"))},
		{"sort", firstLine(output("sort", "--version")) + ", run as `" + b.sortCmd() + "`"},
		{"grep", firstLine(output("grep", "--version"))},
		{"refundkit", firstLine(output("git", "describe", "--always", "--dirty"))},
	}
	if b.baseBin != "" {
		m = append(m, [2]string{"old core", b.o.BaseRev + " (`git worktree add`, built with `go build ./cmd/...`)"})
	}
	return m
}

// disk is the device, filesystem and mount options of the work dir.
func (b *bench) disk() string {
	lines := strings.Split(strings.TrimSpace(output("df", "-PT", b.work)), "\n")
	if len(lines) < 2 {
		return "unknown"
	}
	f := strings.Fields(lines[len(lines)-1])
	if len(f) < 7 {
		return lines[len(lines)-1]
	}
	dev, fstype, mount := f[0], f[1], f[6]
	size, _ := strconv.ParseInt(f[2], 10, 64)
	desc := fmt.Sprintf("%s, %s, %.0f GB, mounted on %s", dev, fstype, float64(size)*1024/1e9, mount)
	for _, l := range strings.Split(readFile("/proc/mounts"), "\n") {
		if mf := strings.Fields(l); len(mf) >= 4 && mf[0] == dev && mf[1] == mount {
			desc += " (" + mf[3] + ")"
			break
		}
	}
	if rot := strings.TrimSpace(readFile(filepath.Join("/sys/block", filepath.Base(dev), "queue/rotational"))); rot != "" {
		// Virtual disks often say 1 whatever backs them: the fsync
		// latency below is the figure that counts.
		desc += ", queue/rotational=" + rot
	}
	return desc
}

func memory() string {
	kb, err := strconv.ParseFloat(strings.Fields(procField("/proc/meminfo", "MemTotal") + " 0")[0], 64)
	if err != nil || kb == 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.1f GiB", kb/(1<<20))
}

// procField is the value of "key: value" in a /proc file.
func procField(path, key string) string {
	for _, l := range strings.Split(readFile(path), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func readFile(path string) string {
	data, _ := os.ReadFile(path)
	return string(data)
}

func output(name string, args ...string) string {
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		return "unknown"
	}
	return string(out)
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	if l == "" {
		return "unknown"
	}
	return l
}

// goals are the targets judged by the rows, one line each.
func (rep *report) goals() []string {
	var out []string
	for _, r := range rep.rows {
		for _, g := range r.goals {
			mark := "FAIL"
			if g.ok {
				mark = "PASS"
			}
			out = append(out, mark+": "+g.text)
		}
	}
	return out
}

func (rep *report) failed() bool {
	return slices.ContainsFunc(rep.rows, func(r *row) bool { return r.verdict == failed })
}

func (v verdict) String() string {
	switch v {
	case met:
		return "met"
	case missed:
		return "**missed**"
	case failed:
		return "**FAILED**"
	}
	return "reported"
}

// cells are the row's cells in the results table.
func (r *row) cells() []string {
	if r.verdict == failed {
		why, _, _ := strings.Cut(r.err.Error(), "\n")
		return []string{r.what, "no figure", "", "", r.target, "**FAILED**: " + why}
	}
	return []string{r.what, r.cand, r.base, r.ratio, r.target, r.verdict.String()}
}

func durations(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d) / float64(time.Millisecond)
	}
	return out
}

// percentile is the p-th percentile (0-100) of xs, nearest rank.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// markdown is BENCHMARKS.md.
func (rep *report) markdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("# Benchmarks")
	w("")
	if rep.quick || rep.sz.Big != fullSizes.Big {
		w("**Quick run: %s items and fewer runs, to try the script. These are not the reference figures.**", num(rep.sz.Big))
		w("")
	}
	w("Measured by `%s` (scripts/bench.sh, which runs scripts/bench) on %s; the session took %s.",
		rep.command, rep.started.UTC().Format("2006-01-02 15:04 MST"), rep.finished.Sub(rep.started).Round(time.Second))
	w("Every figure is a median: %d runs of each side for the fast rows (restart, audit, group commit, merge, plan), %d for the slow ones (the -j sweep, the rate-limited run).", rep.sz.Fast, rep.sz.Slow)
	w("Every ratio is the median of side-by-side rounds: in each round every side runs once, one after the other, the order rotated each round, so all see the same machine.")
	w("The restart and audit rows run the new core (`bin/`, this tree), the old core (`base-bin/`, %s) and the baselines (coreutils pipelines and jq) in the same rounds.", rep.baseRev)
	w("An untimed run of each side comes first, to warm the page cache and to check the output. Inputs are generated by `scripts/gen` into a temp dir, removed at the end.")
	w("")
	w("## Results")
	w("")
	w("| what | refundkit | baseline beside it | ratio | target (2 cores) | result |")
	w("| --- | --- | --- | --- | --- | --- |")
	for _, r := range rep.rows {
		w("| %s |", strings.Join(r.cells(), " | "))
	}
	if goals := rep.goals(); len(goals) > 0 {
		w("")
		w("## Targets (issue 11)")
		w("")
		for _, g := range goals {
			w("- %s", g)
		}
	}
	ms := durations(rep.fsync)
	w("")
	w("**fsync latency of the disk** (the physical limit of one durable write): median %.3f ms, p90 %.3f ms, min %.3f ms over %d appends of one journal line each followed by fsync, in the temp dir.",
		median(ms), percentile(ms, 90), slices.Min(ms), len(ms))
	w("At one fsync per record a refund (intent + outcome) costs at least %.2f ms of fsync: at most %.0f refunds/s without group commit.", 2*median(ms), 1000/(2*median(ms)))
	w("")
	w("## Machine")
	w("")
	w("| | |")
	w("| --- | --- |")
	for _, kv := range rep.machine {
		w("| %s | %s |", kv[0], kv[1])
	}
	w("| load average (1, 5, 15 min) | start: %s; end: %s |", rep.loadStart, rep.loadEnd)
	w("| date | %s to %s |", rep.started.UTC().Format(time.RFC3339), rep.finished.UTC().Format(time.RFC3339))
	if rep.loadNote != "" {
		w("")
		w("Load: %s.", rep.loadNote)
	}
	w("")
	w("The machine is shared: other work may have run during the session (see the load average). Ratios are side by side, so they hold better than absolute times.")
	w("")
	w("## Rows")
	for _, r := range rep.rows {
		w("")
		w("### %s", r.what)
		w("")
		if len(r.commands) > 0 {
			w("```sh")
			for _, c := range r.commands {
				w("%s", c)
			}
			w("```")
			w("")
		}
		if r.verdict == failed {
			w("**FAILED**, no figure:")
			w("")
			w("```")
			w("%s", r.err)
			w("```")
			continue
		}
		w("Result: %s; baseline: %s; %s. Target: %s: %s.", r.cand, r.base, r.ratio, r.target, strings.Trim(r.verdict.String(), "*"))
		w("")
		for _, d := range r.details {
			w("%s", d)
		}
	}
	w("")
	w("## Reproduce")
	w("")
	w("```sh")
	w("make bench                      # builds bin/ and the old core (BENCH_BASE), installs jq if missing, writes BENCHMARKS.md")
	w("BENCH_ITEMS=100000 make bench   # quicker: 100,000 items in the big rows (report to $TMPDIR)")
	w("```")
	w("")
	w("`STRIPE_API_KEY` is a fake `sk_test_` key set in scripts/bench.sh; every simulator is `bin/stripe-sim` on loopback, a fresh one per run, stopped at the end of the run. `make bench` waits first (up to 15 minutes) for the 1-minute load average to drop to 1.5.")
	return b.String()
}

// summary is the results table as plain text, for the terminal.
func (rep *report) summary() string {
	var b strings.Builder
	for _, r := range rep.rows {
		c := r.cells()
		fmt.Fprintf(&b, "  %-8s %s\n           refundkit: %s\n           baseline:  %s\n           ratio:     %s\n           target:    %s: %s\n",
			r.name, c[0], c[1], c[2], c[3], c[4], strings.ReplaceAll(c[5], "**", ""))
	}
	for _, g := range rep.goals() {
		fmt.Fprintf(&b, "  %s\n", g)
	}
	ms := durations(rep.fsync)
	fmt.Fprintf(&b, "  fsync latency: median %.3f ms over %d write+fsync\n", median(ms), len(ms))
	return b.String()
}
