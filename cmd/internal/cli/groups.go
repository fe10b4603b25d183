package cli

import (
	"cmp"
	"fmt"
	"sort"
	"strings"

	"github.com/refundkit/refundkit/refund"
)

// groupShown is how many items a group names before "and N more".
const groupShown = 3

// outcomeGroups gathers a run's unfinished items (failed, held, in doubt) by
// status and code, so that two hundred held items end the run as one line
// per reason instead of two hundred: each item's own message is on its
// result line (stdout) and, with -v, on stderr as it happens. OnResult
// calls add one result at a time.
type outcomeGroups struct {
	groups map[groupKey]*outcomeGroup
}

type groupKey struct{ status, code string }

type outcomeGroup struct {
	n     int
	items []string // the first groupShown
	first string   // the first item's message
}

func (g *outcomeGroups) add(r refund.Result) {
	if r.Status != refund.StatusFailed && r.Status != refund.StatusInDoubt {
		return
	}
	if g.groups == nil {
		g.groups = map[groupKey]*outcomeGroup{}
	}
	k := groupKey{r.Status, r.Code}
	x := g.groups[k]
	if x == nil {
		x = &outcomeGroup{first: r.Message}
		g.groups[k] = x
	}
	x.n++
	if len(x.items) < groupShown {
		x.items = append(x.items, r.Item)
	}
}

// lines are the groups, the largest first: "12 items failed
// (refunded_by_other_batch): i1, i2, i3 and 9 more; the first: ...".
func (g *outcomeGroups) lines() []string {
	keys := make([]groupKey, 0, len(g.groups))
	for k := range g.groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := g.groups[keys[i]], g.groups[keys[j]]
		if a.n != b.n {
			return a.n > b.n
		}
		return keys[i].status+keys[i].code < keys[j].status+keys[j].code
	})
	var out []string
	for _, k := range keys {
		x := g.groups[k]
		status := strings.ReplaceAll(k.status, "_", " ")
		names := strings.Join(x.items, ", ")
		if more := x.n - len(x.items); more > 0 {
			names += fmt.Sprintf(" and %d more", more)
		}
		line := fmt.Sprintf("%d %s %s (%s): %s", x.n, plural(x.n, "item"), status, cmp.Or(k.code, "no code"), names)
		if x.first != "" {
			line += "; the first: " + x.first
		}
		out = append(out, line)
	}
	return out
}
