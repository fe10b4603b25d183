package journal

import (
	"bytes"
)

// dedupGroup remembers the records of one instant: the output is in ts
// order, so only this group can hold a twin. A lone line stays where its
// source holds it, copied only when a second comes or the source lets go.
type dedupGroup struct {
	valid bool
	key   tsKey
	held  []byte       // the group's one line, not copied yet
	from  *mergeSource // whose line held is
	buf   []byte
	ends  []int
	set   map[string]struct{} // once the group is large
}

// seen reports whether line was seen at instant key, and remembers it;
// stable: line stays valid until s moves to its next span.
func (g *dedupGroup) seen(key tsKey, line []byte, s *mergeSource, stable bool) bool {
	if !g.valid || key != g.key {
		g.valid, g.key = true, key
		g.buf, g.ends, g.set, g.held, g.from = g.buf[:0], g.ends[:0], nil, nil, nil
		if stable {
			g.held, g.from = line, s
			return false
		}
	}
	g.own()
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

func (g *dedupGroup) own() {
	if g.from != nil {
		g.buf = append(g.buf, g.held...)
		g.ends = append(g.ends, len(g.buf))
		g.held, g.from = nil, nil
	}
}

// release is called before s lets the lines of its span go.
func (g *dedupGroup) release(s *mergeSource) {
	if g.from == s {
		g.own()
	}
}
