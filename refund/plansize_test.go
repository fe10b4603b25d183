package refund

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPlanSize: the total is plan's count while the lines agree with it,
// unknown once they do not (never below the items read), and the items
// read once the plan is read to its end; a plan file's lines beat the
// count; with a shard, only the items of the shard read to the end count.
func TestPlanSize(t *testing.T) {
	const (
		end = -1 // the plan read to its end
	)
	for _, tt := range []struct {
		name  string
		shard Shard
		file  int   // lines of the plan file; 0: a stream
		steps []int // plan_items of each item read (0: none), or end
		want  []int // Items after each step
	}{
		{name: "plan's count", steps: []int{3, 3, 3, end}, want: []int{3, 3, 3, 3}},
		{name: "no count", steps: []int{0, 0, end}, want: []int{0, 0, 2}},
		{name: "cut short", steps: []int{5, 5, end}, want: []int{5, 5, 2}},
		{name: "too small", steps: []int{2, 2, 2, 2, end}, want: []int{2, 2, 0, 0, 4}},
		{name: "two plans", steps: []int{1, 2, 2, end}, want: []int{1, 0, 0, 3}},
		{name: "a line without", steps: []int{3, 0, 3, end}, want: []int{3, 0, 0, 3}},
		{name: "a file", file: 4, steps: []int{3, 3, end}, want: []int{4, 4, 2}},
		{name: "a file that grew", file: 1, steps: []int{0, 0, end}, want: []int{1, 0, 2}},
		{name: "a shard", shard: Shard{K: 1, N: 2}, file: 4, steps: []int{4, 4, 4, 4, end}, want: []int{0, 0, 0, 0, -2}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := &PlanSize{Shard: tt.shard}
			if tt.file > 0 {
				s.File = filepath.Join(t.TempDir(), "plan.jsonl")
				text := strings.Repeat("{}\n\n", tt.file) // blank lines are not counted
				if err := os.WriteFile(s.File, []byte(text), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			held := 0
			for i, step := range tt.steps {
				if step == end {
					s.end()
				} else {
					it := Item{Batch: "b", Item: fmt.Sprint("i", i), Charge: fmt.Sprint("ch_", i)}
					if tt.shard.Holds(&it) {
						held++
					}
					s.item(&it, step)
				}
				want := tt.want[i]
				if want == -2 {
					want = held // the shard's items
				}
				if got := s.Items(); got != want {
					t.Errorf("after step %d (%d): Items %d, want %d", i+1, step, got, want)
				}
			}
		})
	}
	var none *PlanSize
	none.item(&Item{}, 3)
	none.end()
	if n := none.Items(); n != 0 {
		t.Errorf("a nil PlanSize: Items %d", n)
	}
}

// TestPlanSizeFromTheFirstLine: Peek learns the count from the first line,
// before the run reads any; Run tells the PlanSize its context carries
// what it reads.
func TestPlanSizeFromTheFirstLine(t *testing.T) {
	plan := `{"batch":"b","item":"i1","charge":"ch_1","plan_items":2}` + "\n" +
		`{"batch":"b","item":"i2","charge":"ch_2","plan_items":2}` + "\n"
	s := &PlanSize{}
	in, ok, err := s.Peek(strings.NewReader(plan), "<stdin>")
	if err != nil || !ok {
		t.Fatalf("Peek: %v, %v", ok, err)
	}
	if n := s.Items(); n != 2 {
		t.Errorf("after Peek: Items %d, want 2", n)
	}
	// readPlan, as Run calls it, with s in its context.
	out := make(chan []parsedLine, 4)
	go readPlan(WithPlanSize(context.Background(), s), in, "<stdin>", newPlanIndex(), out, nil)
	items := 0
	for b := range out {
		for _, p := range b {
			if p.err != nil {
				t.Fatal(p.err)
			}
			items++
		}
	}
	if items != 2 {
		t.Errorf("%d items read, want 2", items)
	}
	s.mu.Lock()
	whole, read := s.whole, s.read
	s.mu.Unlock()
	if !whole || read != 2 || s.Items() != 2 {
		t.Errorf("after the read: whole %v, read %d, Items %d; want the whole plan of 2", whole, read, s.Items())
	}
}
