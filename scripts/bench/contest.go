package main

import (
	"fmt"
	"slices"
	"strings"
)

// sideKind is what a side of a contest is.
type sideKind int

const (
	newCore  sideKind = iota // refundkit as built from this tree (bin/)
	oldCore                  // refundkit at the base revision (base-bin/)
	baseline                 // what a user would run instead
)

// side is one command of a contest.
type side struct {
	name  string
	kind  sideKind
	cmd   cmdSpec
	shown string             // the command as the report shows it
	check func(result) error // judges every run: exit status and answer
}

// contest is the runs of several sides over the same input, by round.
type contest struct {
	sides []side
	runs  [][]result
	items int // what the per-item figures divide by
}

// worse is how much above the old core's a figure of the new core may be
// before it counts as worse: the noise of a shared machine.
const worse = 1.05

// warm runs every side once, untimed: the inputs are in the page cache
// afterwards, and what a side does on its first run only is done.
func (b *bench) warm(sides []side) error {
	for _, s := range sides {
		if _, err := b.checked(s.cmd, s.check)(); err != nil {
			return err
		}
	}
	return nil
}

// compete runs b.sz.Fast rounds of every side, each round starting one
// side later, every run checked.
func (b *bench) compete(what string, items int, sides []side) (*contest, error) {
	var names []string
	fns := make([]func() (result, error), len(sides))
	for i, s := range sides {
		fns[i] = b.checked(s.cmd, s.check)
		names = append(names, s.name)
	}
	b.logf("%s: %d rounds of %s", what, b.sz.Fast, strings.Join(names, ", "))
	runs, err := rotate(b.sz.Fast, fns)
	return &contest{sides: sides, runs: runs, items: items}, err
}

// of is the index of the first side of kind, or -1.
func (c *contest) of(kind sideKind) int {
	return slices.IndexFunc(c.sides, func(s side) bool { return s.kind == kind })
}

// best is the baseline with the lowest median wall time.
func (c *contest) best() int {
	best := -1
	for i, s := range c.sides {
		if s.kind == baseline && (best < 0 || c.wall(i) < c.wall(best)) {
			best = i
		}
	}
	return best
}

func (c *contest) wall(i int) float64 { return median(seconds(c.runs[i])) }
func (c *contest) cpu(i int) float64  { return median(cpuSeconds(c.runs[i])) }
func (c *contest) rss(i int) float64  { return slices.Max(rssMB(c.runs[i])) * 1e6 }

// speedup is how many times faster side i ran than side j: the median of
// the rounds' ratios of j's wall time to i's.
func (c *contest) speedup(i, j int) float64 {
	return median(pairRatios(seconds(c.runs[j]), seconds(c.runs[i])))
}

// oldRatios are the new core's figures over the old core's: wall time and
// CPU time (medians of the rounds' ratios) and peak RSS.
func (c *contest) oldRatios() (wall, cpu, rss float64) {
	n, o := c.of(newCore), c.of(oldCore)
	return median(pairRatios(seconds(c.runs[n]), seconds(c.runs[o]))),
		median(pairRatios(cpuSeconds(c.runs[n]), cpuSeconds(c.runs[o]))),
		c.rss(n) / c.rss(o)
}

// figure is side i's median wall and CPU time and peak RSS.
func (c *contest) figure(i int) string {
	f := fmt.Sprintf("%s: %.2f s (CPU %.2f s), %.0f MB", c.sides[i].name, c.wall(i), c.cpu(i), c.rss(i)/1e6)
	if c.sides[i].kind != baseline {
		f += fmt.Sprintf(" = %.0f B/item", c.rss(i)/float64(c.items))
	}
	return f
}

// fill writes the row's cells, and its goals: the new core faster than
// the best baseline by speedup (0: no such goal), at most perItem bytes of
// RSS an item (0: none), and no figure worse than the old core's.
func (c *contest) fill(r *row, label string, speedup, perItem float64) {
	n, o, best := c.of(newCore), c.of(oldCore), c.best()
	var cores, bases []string
	for i, s := range c.sides {
		if s.kind == baseline {
			bases = append(bases, c.figure(i))
		} else {
			cores = append(cores, c.figure(i))
		}
	}
	r.cand, r.base = strings.Join(cores, "; "), strings.Join(bases, "; ")
	up := c.speedup(n, best)
	ratio := fmt.Sprintf("%.2fx as fast as %s (fastest baseline)", up, c.sides[best].name)
	ok := true
	if speedup > 0 {
		ok = up >= speedup
		r.goal(up >= speedup, "%s: %.1fx faster than the best baseline (%s): %.2fx", label, speedup, c.sides[best].name, up)
	}
	if perItem > 0 {
		got := c.rss(n) / float64(c.items)
		ok = ok && got <= perItem
		r.goal(got <= perItem, "%s: at most %.0f bytes of RSS an item: %.0f (%.0f MB over %s items)", label, perItem, got, c.rss(n)/1e6, num(c.items))
	}
	if o >= 0 {
		w, cpu, rss := c.oldRatios()
		fine := w <= worse && cpu <= worse && rss <= worse
		ok = ok && fine
		ratio = fmt.Sprintf("new/old: %.2fx time, %.2fx CPU, %.2fx RSS; ", w, cpu, rss) + ratio
		r.goal(fine, "%s: no figure worse than the old core (%s): new/old %.2fx wall, %.2fx CPU, %.2fx RSS (worse: above %.2fx)", label, c.sides[o].name, w, cpu, rss, worse)
	}
	r.ratio = ratio
	r.judge(ok)
}

// table lists every run of every side by round, with the new core's
// speed-up over the fastest baseline in that round.
func (c *contest) table() []string {
	n, best := c.of(newCore), c.best()
	head, rule := "| round |", "| ---: |"
	for _, s := range c.sides {
		head += " " + s.name + " |"
		rule += " ---: |"
	}
	out := []string{"", head + " " + c.sides[best].name + " / new |", rule + " ---: |"}
	for round := range len(c.runs[0]) {
		line := fmt.Sprintf("| %d |", round+1)
		for i := range c.sides {
			x := c.runs[i][round]
			line += fmt.Sprintf(" %.3f s (CPU %.2f s), %.0f MB |", x.wall.Seconds(), x.cpu.Seconds(), float64(x.rss)/1e6)
		}
		ratio := c.runs[best][round].wall.Seconds() / c.runs[n][round].wall.Seconds()
		out = append(out, line+fmt.Sprintf(" %.2f |", ratio))
	}
	return append(out, "", fmt.Sprintf("Round k runs the sides in the order above starting at side k (mod %d), so each runs first as often. CPU is user + system time of the command and all its children (above the wall time when it uses both cores); MB is the peak resident set of its largest process (GNU time's %%M).", len(c.sides)))
}
