package main

// The machine the figures are measured on, and its load.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

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
