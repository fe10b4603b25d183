package natsjs

import (
	"context"
	"testing"
	"time"
)

// An import that writes an item between a load's read of the items and
// its own write of them: the load reads the item again instead of failing
// (its revision moved on), and checks what the import wrote against the
// plan, refusing records that contradict it.
func TestLoadRacingAnImport(t *testing.T) {
	srv := reviewServer(t, false)
	t.Run("moved on", func(t *testing.T) {
		url := srv.URL("moved")
		importer := reviewOpen(t, url, 5*time.Second, "importer")
		if _, _, err := importFile(t, importer, writeJournal(t, "first.jsonl", sent("a", "ch_a", 100, "", 1))); err != nil {
			t.Fatal(err)
		}
		then := writeJournal(t, "then.jsonl", sent("a", "ch_a", 100, "re_a", 1))
		afterReadItems = func(string) {
			afterReadItems = nil
			if _, _, err := importFile(t, importer, then); err != nil {
				t.Error(err)
			}
		}
		defer func() { afterReadItems = nil }()
		loader := reviewOpen(t, url, 5*time.Second, "loader")
		if err := loader.Load(context.Background(), importPlan("a", "ch_a")); err != nil {
			t.Fatalf("a load racing an import: %v", err)
		}
		st, known, err := loader.Lookup("B", "a")
		if err != nil || !known || st.Refund != "re_a" {
			t.Fatalf("after the load: %+v %v %v, want the imported refund", st, known, err)
		}
	})
	t.Run("contradicts", func(t *testing.T) {
		url := srv.URL("contra")
		importer := reviewOpen(t, url, 5*time.Second, "importer")
		wrong := writeJournal(t, "wrong.jsonl", sent("b", "ch_b", 999, "re_b", 1))
		afterReadItems = func(string) {
			afterReadItems = nil
			if _, _, err := importFile(t, importer, wrong); err != nil {
				t.Error(err)
			}
		}
		defer func() { afterReadItems = nil }()
		loader := reviewOpen(t, url, 5*time.Second, "loader")
		err := loader.Load(context.Background(), importPlan("b", "ch_b"))
		wantInputError(t, "a load racing an import of records of another amount", err, "amount")
	})
}
