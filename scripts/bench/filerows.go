package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// merge times journal-merge of shard journals against sort -m of the same
// files, which also merges sorted lines but knows nothing of records.
func (b *bench) merge(r *row) error {
	n, k := b.sz.Big, b.sz.Shards
	r.what = fmt.Sprintf("`journal-merge` of %d shard journals, %s records in all", k, num(n))
	r.target = "within 2x of `sort -m`"
	exe, err := b.tool("journal-merge")
	if err != nil {
		return err
	}
	dir, merged, sorted := b.path("shards"), b.path("merged.jsonl"), b.path("sorted.jsonl")
	defer removeAll(dir, merged, sorted)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	shown, err := b.generate("", "shards", strconv.Itoa(n), "B", strconv.Itoa(k), dir)
	r.commands = append(r.commands, strings.TrimSuffix(shown, " > /dev/null"))
	if err != nil {
		return err
	}
	var files []string
	for i := 1; i <= k; i++ {
		files = append(files, filepath.Join(dir, fmt.Sprintf("shard-%d.jsonl", i)))
	}
	cand := cmdSpec{argv: append([]string{exe}, files...), stdout: merged}
	base := cmdSpec{argv: append([]string{"sort", "-m"}, files...), stdout: sorted}
	// Shown with brace expansion: the files are passed in shard order.
	all := strings.Join(files, " ")
	braced := filepath.Join(dir, fmt.Sprintf("shard-{1..%d}.jsonl", k))
	r.commands = append(r.commands, strings.Replace(b.show(cand), b.short(all), b.short(braced), 1),
		"LC_ALL=C "+strings.Replace(b.show(base), b.short(all), b.short(braced), 1))
	lines := func(path string) func(result) error {
		return func(res result) error {
			if res.exit != 0 {
				return fmt.Errorf("exit status %d, want 0", res.exit)
			}
			// journal-merge frames its output: commit lines are not records.
			got, commits, err := countLines(path, commitType)
			if err == nil && got-commits != n {
				err = fmt.Errorf("wrote %d record lines, want %d", got-commits, n)
			}
			return err
		}
	}
	if _, err := b.checked(cand, lines(merged))(); err != nil {
		return err
	}
	if _, err := b.checked(base, lines(sorted))(); err != nil {
		return err
	}
	b.logf("merge: %d rounds of journal-merge and sort -m", b.sz.Fast)
	cs, bs, err := alternate(b.sz.Fast, b.checked(cand, lines(merged)), b.checked(base, lines(sorted)))
	if err != nil {
		return err
	}
	ratio := median(pairRatios(seconds(cs), seconds(bs)))
	r.cand = fmt.Sprintf("%.2f s (CPU %.2f s), %.0f MB RSS", median(seconds(cs)), median(cpuSeconds(cs)), slices.Max(rssMB(cs)))
	r.base = fmt.Sprintf("%.2f s (CPU %.2f s), %.0f MB RSS", median(seconds(bs)), median(cpuSeconds(bs)), slices.Max(rssMB(bs)))
	r.ratio = fmt.Sprintf("%.2fx the time of sort -m", ratio)
	r.judge(ratio <= 2)
	identical, err := sameFile(merged, sorted)
	if err != nil {
		return err
	}
	sameLines, err := sameLineSet(merged, sorted)
	if err != nil {
		return err
	}
	total, commits, err := countLines(merged, commitType)
	if err != nil {
		return err
	}
	if commits > 0 {
		r.detailf("journal-merge frames its output as a journal of its own: %s record lines in group commits, each ended by a commit line (%s of them); the comparison below is of the record lines.", num(total-commits), num(commits))
	}
	switch {
	case identical:
		r.detailf("journal-merge's output is byte for byte the output of `sort -m` here; journal-merge also parses and checks every record on the way.")
	case sameLines:
		r.detailf("Both wrote the same %s record lines (an order-independent hash of the lines matches) in another order: journal-merge orders by timestamp, `sort -m` by bytes, and RFC 3339 timestamps drop the trailing zeros of their fraction (`.01Z` sorts after `.011Z`), so `sort -m`'s order is not time order. journal-merge also parses and checks every record.", num(n))
	default:
		r.detailf("journal-merge's output holds other lines than `sort -m`'s (both %s lines): it re-encodes records.", num(n))
	}
	r.detailf("Both write to a file in the temp dir; `journal-merge -o FILE` would add an fsync and a rename.")
	r.details = append(r.details, runsTable("journal-merge", cs, "sort -m", bs, true)...)
	return nil
}

// plan times plan on a big CSV, with wc -l of the same file for scale.
func (b *bench) plan(r *row) error {
	n := b.sz.Big
	r.what = fmt.Sprintf("`plan` of a %s-row CSV", num(n))
	r.target = "report"
	exe, err := b.tool("plan")
	if err != nil {
		return err
	}
	csv, out := b.path("charges.csv"), b.path("plan-out.jsonl")
	defer removeAll(csv, out)
	if err := b.gen2(r, csv, "csv", n); err != nil {
		return err
	}
	cand := cmdSpec{argv: []string{exe, "--batch", "B", csv}}
	base := cmdSpec{argv: []string{"wc", "-l", csv}}
	r.commands = append(r.commands, b.show(cand), b.show(base))
	keep := cand
	keep.stdout = out
	if _, err := b.checked(keep, exitIs(0))(); err != nil {
		return err
	}
	if lines, items, err := countLines(out, `"charge":"ch_`); err != nil || lines != n || items != n {
		return fmt.Errorf("plan wrote %d lines, %d with a charge, want %d (%v)", lines, items, n, err)
	}
	b.logf("plan: %d rounds of plan and wc -l", b.sz.Fast)
	cs, bs, err := alternate(b.sz.Fast, b.checked(cand, exitIs(0)), b.checked(base, exitIs(0)))
	if err != nil {
		return err
	}
	wall := median(seconds(cs))
	r.cand = fmt.Sprintf("%.2f s (%.0f rows/s), %.0f MB RSS", wall, float64(n)/wall, slices.Max(rssMB(cs)))
	r.base = fmt.Sprintf("`wc -l`: %.3f s", median(seconds(bs)))
	r.ratio = fmt.Sprintf("%.0fx the time of wc -l", median(pairRatios(seconds(cs), seconds(bs))))
	r.verdict = reported
	r.detailf("plan validates every row and holds the whole plan (to refuse a charge listed twice) before it writes a line; an untimed run wrote %s plan items.", num(n))
	r.details = append(r.details, runsTable("plan", cs, "wc -l", bs, true)...)
	return nil
}
