package cli

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund/sim/stripesim"
)

// withPlanItems writes a copy of the plan at path in which every item
// carries "plan_items":n, as plan writes it, and returns the copy's path.
func withPlanItems(t *testing.T, path, name string, n string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := regexp.MustCompile(`}\n`).ReplaceAllString(string(b), `,"plan_items":`+n+"}\n")
	dst := filepath.Join(filepath.Dir(path), name)
	if err := os.WriteFile(dst, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestPGPlanItemsAreNotThePlan: the count plan writes on every item
// (plan_items) is no part of the plan a PostgreSQL checkpoint holds: a
// plan loaded without it and the same plan with it, or with a count edited
// by hand, are one plan (exit 0, nothing sent, nothing written), whichever
// is loaded first; the checkpoint stores no count.
func TestPGPlanItemsAreNotThePlan(t *testing.T) {
	const items = 4
	for _, first := range []string{"without", "with"} {
		t.Run("loaded "+first, func(t *testing.T) {
			r := newPGRig(t, items, stripesim.Faults{})
			plain := writeAmountPlan(t, r.dir, "plan.jsonl", items, 100, nil)
			for i := range r.want {
				r.want[i].Amount = 100
			}
			counted := withPlanItems(t, plain, "counted.jsonl", "4")
			wrong := withPlanItems(t, plain, "wrong.jsonl", "99")
			plans := []string{plain, counted, wrong}
			if first == "with" {
				plans = []string{counted, plain, wrong}
			}
			for i, plan := range plans {
				var creates int64
				var records int
				if i > 0 { // the first makes the schema
					creates, records = r.sim.Creates(), r.records()
				}
				p := r.startPlan(plan, "W"+string(rune('A'+i)), "-j", "2")
				go p.Wait()
				waitExit(t, p, 60*time.Second)
				if p.Code != 0 {
					t.Fatalf("%s: exit %d: %s", filepath.Base(plan), p.Code, &p.Stderr)
				}
				if strings.Contains(p.Stderr.String(), "differs") {
					t.Errorf("%s: %s", filepath.Base(plan), &p.Stderr)
				}
				if i == 0 {
					continue
				}
				if n := r.sim.Creates(); n != creates {
					t.Errorf("%s: %d refund calls for a plan loaded already", filepath.Base(plan), n-creates)
				}
				if n := r.records(); n != records {
					t.Errorf("%s: %d records written for a plan loaded already", filepath.Base(plan), n-records)
				}
			}
			var stored int
			if err := r.db.QueryRow(context.Background(), `SELECT count(*) FROM refundkit.items WHERE plan LIKE '%plan_items%'`).Scan(&stored); err != nil {
				t.Fatal(err)
			}
			if stored != 0 {
				t.Errorf("%d items stored with their count", stored)
			}
			r.checkExactlyOnce()
		})
	}
}
