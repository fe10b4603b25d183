package journal

import (
	"bytes"
)

// dedupGroup remembers the records written at one instant: identical
// records have the same ts, and the output is in ts order, so only this
// group can hold a record's twin.
type dedupGroup struct {
	valid bool
	key   tsKey
	buf   []byte
	ends  []int
	set   map[string]struct{} // once the group is large
}

func (g *dedupGroup) seen(key tsKey, line []byte) bool {
	if !g.valid || key != g.key {
		g.valid, g.key = true, key
		g.buf, g.ends, g.set = g.buf[:0], g.ends[:0], nil
	}
	if g.set != nil {
		if _, ok := g.set[string(line)]; ok {
			return true
		}
		g.set[string(line)] = struct{}{}
		return false
	}
	start := 0
	for _, end := range g.ends {
		if bytes.Equal(g.buf[start:end], line) {
			return true
		}
		start = end
	}
	g.buf = append(g.buf, line...)
	g.ends = append(g.ends, len(g.buf))
	if len(g.ends) > 32 {
		g.set = make(map[string]struct{}, 64)
		start := 0
		for _, end := range g.ends {
			g.set[string(g.buf[start:end])] = struct{}{}
			start = end
		}
	}
	return false
}
