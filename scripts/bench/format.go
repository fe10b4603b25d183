package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// runsTable lists every run of both sides, in the order they ran in
// pairs, with each pair's ratio: the baseline's time over refundkit's
// (speed-up), or with slowdown refundkit's over the baseline's.
func runsTable(candName string, cs []result, baseName string, bs []result, slowdown bool) []string {
	out := []string{"", "| round | " + candName + " | " + baseName + " | ratio |", "| ---: | ---: | ---: | ---: |"}
	cell := func(r result) string {
		return fmt.Sprintf("%.3f s (CPU %.2f s), %.0f MB", r.wall.Seconds(), r.cpu.Seconds(), float64(r.rss)/1e6)
	}
	for i := range min(len(cs), len(bs)) {
		ratio := bs[i].wall.Seconds() / cs[i].wall.Seconds()
		if slowdown {
			ratio = 1 / ratio
		}
		out = append(out, fmt.Sprintf("| %d | %s | %s | %.2f |", i+1, cell(cs[i]), cell(bs[i]), ratio))
	}
	what := "baseline time / refundkit time"
	if slowdown {
		what = "refundkit time / baseline time"
	}
	return append(out, "", "Ratio: "+what+" (wall). In odd rounds refundkit ran first, in even rounds the baseline. CPU is user + system time (above the wall time when it runs on both cores); MB is the peak resident set (GNU time's %M).")
}

// medianIndex is the index of a middle value of xs (the lower middle for
// an even count).
func medianIndex(xs []float64) int {
	idx := make([]int, len(xs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case xs[a] < xs[b]:
			return -1
		case xs[a] > xs[b]:
			return 1
		}
		return 0
	})
	return idx[(len(idx)-1)/2]
}

func joinFloats(xs []float64, format string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf(format, x)
	}
	return strings.Join(parts, ", ")
}

// num writes n with thousands separators: 1,000,000.
func num(n int) string {
	s := strconv.Itoa(n)
	if n < 0 {
		return "-" + num(-n)
	}
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

func shellQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " '\"\\|*?$&;()<>`!#~{}[]") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
