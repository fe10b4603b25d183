package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRotate checks that each round starts one side later and that every
// result lands on its own side, by round.
func TestRotate(t *testing.T) {
	var order []string
	side := func(name string) func() (string, error) {
		return func() (string, error) {
			order = append(order, name)
			return name + string(rune('0'+len(order))), nil
		}
	}
	runs, err := rotate(3, []func() (string, error){side("a"), side("b"), side("c")})
	if err != nil {
		t.Fatal(err)
	}
	if want := "abcbcacab"; strings.Join(order, "") != want {
		t.Errorf("ran %v, want %s", order, want)
	}
	want := [][]string{{"a1", "a6", "a8"}, {"b2", "b4", "b9"}, {"c3", "c5", "c7"}}
	for i := range want {
		if !slices.Equal(runs[i], want[i]) {
			t.Errorf("side %d: %v, want %v", i, runs[i], want[i])
		}
	}
}

// contestOf builds a contest from wall seconds, CPU seconds and RSS (MB)
// per side and round.
func contestOf(items int, sides []side, wall, cpu, rss [][]float64) *contest {
	c := &contest{sides: sides, items: items}
	for i := range sides {
		var rs []result
		for k := range wall[i] {
			rs = append(rs, result{wall: time.Duration(wall[i][k] * float64(time.Second)), cpu: time.Duration(cpu[i][k] * float64(time.Second)), rss: int64(rss[i][k] * 1e6)})
		}
		c.runs = append(c.runs, rs)
	}
	return c
}

var fourSides = []side{{name: "new", kind: newCore}, {name: "old", kind: oldCore}, {name: "coreutils", kind: baseline}, {name: "jq", kind: baseline}}

func TestContestFigures(t *testing.T) {
	c := contestOf(1_000_000, fourSides,
		[][]float64{{1, 1, 1}, {2, 2, 2}, {3, 3, 3}, {9, 9, 9}},
		[][]float64{{2, 2, 2}, {2, 2, 2}, {1, 1, 1}, {9, 9, 9}},
		[][]float64{{100, 120, 110}, {200, 200, 200}, {5, 5, 5}, {5, 5, 5}})
	if got := c.best(); got != 2 {
		t.Errorf("best = %d, want 2 (coreutils)", got)
	}
	if got := c.speedup(0, c.best()); got != 3 {
		t.Errorf("speedup = %v, want 3", got)
	}
	w, cpu, rss := c.oldRatios()
	if w != 0.5 || cpu != 1 || rss != 0.6 {
		t.Errorf("new/old = %v, %v, %v; want 0.5, 1, 0.6", w, cpu, rss)
	}
	r := &row{}
	c.fill(r, "restart", 1.5, 150)
	if r.verdict != met || len(r.goals) != 3 {
		t.Fatalf("verdict %v, goals %+v: want met, 3 goals", r.verdict, r.goals)
	}
	for _, g := range r.goals {
		if !g.ok {
			t.Errorf("goal missed: %s", g.text)
		}
	}
	if !strings.Contains(r.goals[1].text, "120 (120 MB") {
		t.Errorf("the RSS goal should take the peak over the runs: %s", r.goals[1].text)
	}
}

// TestContestGoalsMissed checks each goal fails on its own.
func TestContestGoalsMissed(t *testing.T) {
	for _, c := range []struct {
		name             string
		newWall, newCPU  float64
		newRSS           float64
		speedup, perItem float64
		wantMissed       int // index of the goal that misses
		wantGoals        int
	}{
		{name: "slower than the baseline", newWall: 2.5, newCPU: 1, newRSS: 100, speedup: 1.5, perItem: 150, wantMissed: 0, wantGoals: 3},
		{name: "too much memory", newWall: 1, newCPU: 1, newRSS: 151, speedup: 1.5, perItem: 150, wantMissed: 1, wantGoals: 3},
		{name: "CPU worse than the old core", newWall: 1, newCPU: 2.2, newRSS: 100, speedup: 1.5, perItem: 150, wantMissed: 2, wantGoals: 3},
		{name: "no speed or memory goal", newWall: 1, newCPU: 1, newRSS: 300, wantMissed: 0, wantGoals: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := contestOf(1_000_000, fourSides,
				[][]float64{{c.newWall}, {4}, {3}, {9}},
				[][]float64{{c.newCPU}, {2}, {1}, {9}},
				[][]float64{{c.newRSS}, {300}, {5}, {5}})
			r := &row{}
			x.fill(r, "restart", c.speedup, c.perItem)
			if len(r.goals) != c.wantGoals {
				t.Fatalf("%d goals, want %d: %+v", len(r.goals), c.wantGoals, r.goals)
			}
			for i, g := range r.goals {
				if want := c.wantGoals == 1 || i != c.wantMissed; g.ok != want {
					t.Errorf("goal %d ok = %v, want %v: %s", i, g.ok, want, g.text)
				}
			}
			if want := map[bool]verdict{true: met, false: missed}[c.wantGoals == 1]; r.verdict != want {
				t.Errorf("verdict %v, want %v", r.verdict, want)
			}
		})
	}
}

func TestContestWithoutOldCore(t *testing.T) {
	c := contestOf(10, []side{{name: "new", kind: newCore}, {name: "coreutils", kind: baseline}},
		[][]float64{{1}, {2}}, [][]float64{{1}, {1}}, [][]float64{{1}, {1}})
	r := &row{}
	c.fill(r, "audit", 2, 0)
	if len(r.goals) != 1 || !r.goals[0].ok || r.verdict != met {
		t.Errorf("goals %+v, verdict %v: want one goal met", r.goals, r.verdict)
	}
	if strings.Contains(r.ratio, "new/old") {
		t.Errorf("ratio %q speaks of an old core that did not run", r.ratio)
	}
}

func TestSameAnswer(t *testing.T) {
	names := []string{"new", "old", "coreutils"}
	if err := sameAnswer("left", 2, names, [][]string{{"a", "b"}, {"a", "b"}, {"a", "b"}}); err != nil {
		t.Error(err)
	}
	for _, answers := range [][][]string{
		{{"a", "b"}, {"a", "b"}, {"a", "c"}}, // another item
		{{"a", "b"}, {"a", "b"}, {"a"}},      // one missing
		{{"a"}, {"a"}, {"a"}},                // all agree, but not on 2
	} {
		if err := sameAnswer("left", 2, names, answers); err == nil {
			t.Errorf("%v: no error", answers)
		}
	}
}

func TestLeftItems(t *testing.T) {
	p := writeTemp(t, t.TempDir(), "dry.jsonl", `{"batch":"B","item":"i3","status":"would_refund"}
{"batch":"B","item":"i1","status":"skipped"}
{"batch":"B","item":"i2","status":"would_reconcile","attempt":1}
`)
	got, err := leftItems(p)
	if err != nil || !slices.Equal(got, []string{"i2", "i3"}) {
		t.Errorf("leftItems = %v, %v; want [i2 i3]", got, err)
	}
}

func TestShapes(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) recordShapes {
		s, err := readShapes(writeTemp(t, dir, name, text))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	real := write("real", `{"v":1,"type":"intent","item":"a","amount":1}
{"v":1,"type":"refunded","item":"a","refund":"re_1"}
{"v":1,"type":"commit","records":2,"crc32c":"00000000"}
`)
	if got := real.fields["intent"]; got != "v,type,item,amount" {
		t.Errorf("intent fields %q", got)
	}
	for _, c := range []struct {
		name, gen, wantErr string
	}{
		{"same", `{"v":1,"type":"intent","item":"b","amount":2}
{"v":1,"type":"commit","records":1,"crc32c":"00000001"}
{"v":1,"type":"refunded","item":"b","refund":"re_2"}
`, ""},
		{"no commit lines", `{"v":1,"type":"intent","item":"b","amount":2}
{"v":1,"type":"refunded","item":"b","refund":"re_2"}
`, "AppendCommit"},
		{"fields in another order", `{"v":1,"type":"intent","amount":2,"item":"b"}
{"v":1,"type":"commit","records":1,"crc32c":"00000001"}
{"v":1,"type":"refunded","item":"b","refund":"re_2"}
`, "intent records"},
		{"a type refund does not write", `{"v":1,"type":"intent","item":"b","amount":2}
{"v":1,"type":"refunded","item":"b","refund":"re_2"}
{"v":1,"type":"commit","records":1,"crc32c":"00000001"}
{"v":1,"type":"failed","item":"b","code":"x"}
`, "gen wrote 1 failed"},
	} {
		err := sameShapes(real, write(c.name, c.gen))
		if (err == nil) != (c.wantErr == "") || err != nil && !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.wantErr)
		}
	}
	if _, _, err := fieldOrder([]byte(`{"v":1,"refunds":[1]}`)); err == nil {
		t.Error("a nested record: no error")
	}
}
