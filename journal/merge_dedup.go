package journal

import (
	"bytes"
)

// dedupGroup remembers the records written at one instant: identical
// records have the same ts, and the output is in ts order, so only this
// group can hold a record's twin.
//
// Most instants have one record: its line is held where its source keeps
// it (held), and copied only when a second record of the instant comes or
// before that source lets its lines go (own).
type dedupGroup struct {
	valid bool
	key   tsKey
	held  []byte       // the group's one line, not copied yet
	from  *mergeSource // whose line held is
	buf   []byte
	ends  []int
	set   map[string]struct{} // once the group is large
}

// seen reports whether line, of s's head at instant key, was seen at that
// instant, and remembers it if not; stable: line stays as it is until s
// moves to its next span (else it is copied at once).
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

// own copies the held line into the group.
func (g *dedupGroup) own() {
	if g.from != nil {
		g.buf = append(g.buf, g.held...)
		g.ends = append(g.ends, len(g.buf))
		g.held, g.from = nil, nil
	}
}

// release is to be called before s lets the lines of its span go.
func (g *dedupGroup) release(s *mergeSource) {
	if g.from == s {
		g.own()
	}
}
