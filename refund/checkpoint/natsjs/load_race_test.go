package natsjs

import (
	"context"
	"fmt"
	"sync"
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

// A read of every item while workers rewrite them misses none: a watch's
// replay skips a value replaced while it runs (before, 12 reads of 200
// under 8 writers missed 1 to 8 of 1000 values, and audit's export with
// them).
func TestReadItemsWhileTheyAreRewritten(t *testing.T) {
	srv := reviewServer(t, false)
	c := reviewOpen(t, srv.URL("reread"), 5*time.Second, "w")
	const n = 1000
	if err := c.Load(context.Background(), reviewPlan("B", n, func(i int) string { return fmt.Sprintf("ch_%d", i) })); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; ; i = (i + 8) % n {
				select {
				case <-stop:
					return
				default:
				}
				k := itemKey("B", fmt.Sprintf("it%05d", i))
				e, err := c.kv.Get(context.Background(), k)
				if err != nil {
					continue
				}
				c.kv.Update(context.Background(), k, e.Value(), e.Revision()) // a rewrite, as a worker's
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	for read := range 40 {
		items, err := c.readItems(context.Background(), itemsOf("B"))
		if err != nil {
			t.Fatal(err)
		}
		if len(items) != n {
			t.Fatalf("read %d: %d of %d items", read, len(items), n)
		}
	}
}
