package main

// The Adyen rows: `refund --provider adyen` against the simulator with the
// notification receiver (adyen-webhook) keeping the notifications the
// simulator posts meanwhile, beside Stripe's refund of the same shape; the
// settling rerun, which settles every pending item from the notifications
// file with no API call, beside Stripe's rerun of a complete journal; and
// the receiver's own rate and fsyncs, beside BenchmarkFileAdd.

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// The adyen-webhook row: notifications kept per second, beside the file
// store's own benchmark.

// fileAddBench is BenchmarkFileAdd's figures for one sub-benchmark.
type fileAddBench struct {
	nsPerOp, fsyncsPerOp []float64
}

var benchLineRE = regexp.MustCompile(`^BenchmarkFileAdd/(\w+)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op`)
var fsyncsOpRE = regexp.MustCompile(`([\d.]+) fsyncs/op`)

// parseFileAdd reads `go test -bench FileAdd` output.
func parseFileAdd(out string) (map[string]*fileAddBench, error) {
	m := map[string]*fileAddBench{}
	for _, l := range strings.Split(out, "\n") {
		sub := benchLineRE.FindStringSubmatch(l)
		if sub == nil {
			continue
		}
		ns, _ := strconv.ParseFloat(sub[2], 64)
		f := fsyncsOpRE.FindStringSubmatch(l)
		if f == nil {
			return nil, fmt.Errorf("no fsyncs/op in %q", l)
		}
		fs, _ := strconv.ParseFloat(f[1], 64)
		if m[sub[1]] == nil {
			m[sub[1]] = &fileAddBench{}
		}
		m[sub[1]].nsPerOp = append(m[sub[1]].nsPerOp, ns)
		m[sub[1]].fsyncsPerOp = append(m[sub[1]].fsyncsPerOp, fs)
	}
	for _, k := range []string{"serial", "parallel"} {
		if m[k] == nil {
			return nil, fmt.Errorf("no BenchmarkFileAdd/%s result in the output", k)
		}
	}
	return m, nil
}

// adyenWebhook measures the receiver while the simulator delivers every
// notification of a refund run (from refund's start to the flush's
// answer), its fsyncs counted by perf stat, beside BenchmarkFileAdd.
func (b *bench) adyenWebhook(r *row) error {
	items := b.sz.SimItems
	r.what = fmt.Sprintf("`adyen-webhook` keeping the %s notifications the simulator delivers during `refund --provider adyen` (from refund's start to the flush's answer), fsyncs per notification", num(items))
	r.target = "group commit: fewer than one fsync per notification; measured, no target"
	plan := b.path("adyen-plan.jsonl")
	journal, notes := b.adyenPaths()
	defer removeAll(plan, journal, notes, b.path("wh-perf.out"), b.path("fileadd.out"))
	if err := writeAdyenPlan(plan, items); err != nil {
		return err
	}
	r.commands = append(r.commands, b.adyenLoopCommands(items, plan)...)
	_, noPerf := b.perfPath()
	b.logf("adyen-webhook: %d runs of Adyen's loop, %d items", b.sz.Slow, items)
	var runs []adyenRun
	for range b.sz.Slow {
		x, err := b.adyenLoop(items, plan)
		if err != nil {
			return err
		}
		runs = append(runs, x)
	}

	// The unit figure: BenchmarkFileAdd, in this tree's source.
	goExe, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("go is not installed: BenchmarkFileAdd needs it: %v", err)
	}
	if _, err := os.Stat("refund/provider/adyen/notes"); err != nil {
		return fmt.Errorf("BenchmarkFileAdd runs in the repository's root (scripts/bench.sh runs bench there): %v", err)
	}
	count := 5
	if b.o.Quick {
		count = 2
	}
	c := cmdSpec{argv: []string{goExe, "test", "-run", "^$", "-bench", "FileAdd", "-count", strconv.Itoa(count), "./refund/provider/adyen/notes"}, stdout: b.path("fileadd.out")}
	b.logf("adyen-webhook: go test -bench FileAdd -count %d ./refund/provider/adyen/notes", count)
	res, err := b.run(c)
	if err != nil {
		return err
	}
	out := readFile(c.stdout)
	if res.exit != 0 {
		return fmt.Errorf("go test -bench FileAdd: exit status %d%s%s", res.exit, quoteStderr(out), quoteStderr(res.stderr))
	}
	fa, err := parseFileAdd(out)
	if err != nil {
		return err
	}
	r.commands = append(r.commands, fmt.Sprintf("go test -run '^$' -bench FileAdd -count %d ./refund/provider/adyen/notes   # the unit figure, in the same session", count))

	rates := mapRuns(runs, adyenRun.notesPerSec)
	serialNs, parNs := median(fa["serial"].nsPerOp), median(fa["parallel"].nsPerOp)
	unitRate := 1e9 / serialNs
	fsyncsPer := func(x adyenRun) float64 { return float64(x.fsyncs) / float64(x.recv.Added) }
	fsyncText := "fsyncs not counted (" + noPerf + ")"
	if runs[0].fsyncs >= 0 {
		fsyncText = fmt.Sprintf("%.3f fsyncs per notification (%.1f notifications per fsync)", median(mapRuns(runs, fsyncsPer)), 1/median(mapRuns(runs, fsyncsPer)))
	}
	r.cand = fmt.Sprintf("%.0f notifications kept/s, the last %.1f s after refund ended; %s", median(rates), median(mapRuns(runs, func(x adyenRun) float64 { return x.lag().Seconds() })), fsyncText)
	r.base = fmt.Sprintf("BenchmarkFileAdd: serial %.0f µs/op (%.2f fsyncs/op: %.0f/s), parallel %.0f µs/op (%.2f fsyncs/op)", serialNs/1e3, median(fa["serial"].fsyncsPerOp), unitRate,
		parNs/1e3, median(fa["parallel"].fsyncsPerOp))
	r.ratio = fmt.Sprintf("%.2fx the serial Add rate", median(rates)/unitRate)
	if runs[0].fsyncs >= 0 {
		r.ratio = fmt.Sprintf("%.1f notifications per fsync (BenchmarkFileAdd: serial %.1f, parallel %.1f); %s", 1/median(mapRuns(runs, fsyncsPer)),
			1/median(fa["serial"].fsyncsPerOp), 1/median(fa["parallel"].fsyncsPerOp), r.ratio)
	}
	r.detailf("%d runs, a fresh receiver, notifications file, simulator and journal per run:", b.sz.Slow)
	r.detailf("")
	r.detailf("| run | refund's wall | refund's start to the flush's answer | the last notification kept after refund ended | notifications kept | kept/s | receiver's fsyncs | fsyncs per notification | simulator's retries |")
	r.detailf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for i, x := range runs {
		fs, per := "not counted", "-"
		if x.fsyncs >= 0 {
			fs, per = num(int(x.fsyncs)), fmt.Sprintf("%.3f", fsyncsPer(x))
		}
		r.detailf("| %d | %.2f s | %.2f s | %.3f s | %s | %.0f | %s | %s | %d |", i+1, x.wall.Seconds(), x.untilFlushed.Seconds(), x.lag().Seconds(), num(int(x.recv.Added)), x.notesPerSec(), fs, per, x.stats.Adyen.Notifications.Retries)
	}
	r.detailf("")
	r.detailf("BenchmarkFileAdd (`refund/provider/adyen/notes`, in-process, a file in the test's temp dir), %d runs each, medians:", count)
	r.detailf("")
	r.detailf("| sub-benchmark | ns/op (median) | runs, ns/op | fsyncs/op (median) |")
	r.detailf("| --- | ---: | --- | ---: |")
	for _, k := range []string{"serial", "parallel"} {
		r.detailf("| %s | %.0f | %s | %.3f |", k, median(fa[k].nsPerOp), joinFloats(fa[k].nsPerOp, "%.0f"), median(fa[k].fsyncsPerOp))
	}
	r.detailf("")
	r.detailf("Kept/s is the notifications the receiver kept over the time from refund's start to the flush's answer, so it is bound by how fast refund creates the refunds the notifications are about: the receiver keeps up when the last notification lands soon after refund ends. The receiver's fsyncs are perf stat's count of its fsync and fdatasync calls, for the whole process (2 of them at open: the directory of each file it created). Serial is one Add at a time (one fsync each), parallel 8 goroutines per core adding at once (their Adds share fsyncs). Checked in every run: every notification delivered once and kept once, nothing refused, every item pending at the end of refund.")
	return nil
}
