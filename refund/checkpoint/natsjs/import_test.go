package natsjs

// Import and CheckJournal (journal-merge -o nats://...) against a real
// nats-server (natstest): every binding holds, a worker's claim or write is
// never overwritten, and the same import twice adds nothing.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/checkpoint/natsjs/natstest"
)

// helpers (reviewServer, reviewOpen) are in review_test.go

var importT0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// sent is an item's intent (attempt 1) and, with id, its refund, on charge
// for amount; n orders their times.
func sent(item, charge string, amount int64, id string, n int) []*journal.Record {
	ts := importT0.Add(time.Duration(n) * time.Second)
	recs := []*journal.Record{{V: journal.Version, Type: journal.TypeIntent, Time: ts, Batch: "B", Item: item, Charge: charge,
		Attempt: 1, Key: refund.IdempotencyKey("B", item, 1), Amount: amount, Currency: "usd"}}
	if id != "" {
		recs = append(recs, &journal.Record{V: journal.Version, Type: journal.TypeRefunded, Time: ts.Add(time.Millisecond), Batch: "B", Item: item,
			Charge: charge, Attempt: 1, Key: refund.IdempotencyKey("B", item, 1), Refund: id, Amount: amount, Currency: "usd", Status: "succeeded", Source: journal.SourceAPI})
	}
	return recs
}

// writeJournal writes recs as a journal file, one commit, and returns its
// path.
func writeJournal(t testing.TB, name string, recs ...[]*journal.Record) string {
	t.Helper()
	var body []byte
	n := 0
	for _, rs := range recs {
		for _, r := range rs {
			line, err := journal.MarshalLine(nil, r)
			if err != nil {
				t.Fatal(err)
			}
			body = append(body, line...)
			n++
		}
	}
	body = journal.AppendCommit(body, body, n)
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, body, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// importFile imports the journal at path into c as journal-merge -o does:
// checked first, then merged with what c exports, then imported.
func importFile(t testing.TB, c *Checkpoint, path string) (int, []string, error) {
	t.Helper()
	if err := checkFile(t, c, path); err != nil {
		return 0, nil, err
	}
	exp := filepath.Join(t.TempDir(), "export.jsonl")
	f, err := os.Create(exp)
	if err != nil {
		t.Fatal(err)
	}
	_, last, err := c.Export(context.Background(), f, nil)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	var merged bytes.Buffer
	if _, err := journal.Merge([]string{exp, path}, &merged); err != nil {
		t.Fatal(err)
	}
	return c.Import(context.Background(), &merged, "the merge", last)
}

func checkFile(t testing.TB, c *Checkpoint, path string) error {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return c.CheckJournal(context.Background(), f, filepath.Base(path))
}

// exported is every record line c holds.
func exported(t *testing.T, c *Checkpoint) string {
	t.Helper()
	var b bytes.Buffer
	if _, _, err := c.Export(context.Background(), &b, nil); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// importPlan is a plan of batch B, item and charge in turn, 1.00 USD each.
func importPlan(itemCharge ...string) []refund.PlanLine {
	var plan []refund.PlanLine
	for i := 0; i+1 < len(itemCharge); i += 2 {
		plan = append(plan, refund.PlanLine{Line: i/2 + 1, Item: &refund.Item{Batch: "B", Item: itemCharge[i], Charge: itemCharge[i+1], Amount: 100, Currency: "usd"}})
	}
	return plan
}

// wantInputError fails unless err is a *refund.InputError saying every
// one of wants.
func wantInputError(t *testing.T, what string, err error, wants ...string) {
	t.Helper()
	var ie *refund.InputError
	if !errors.As(err, &ie) {
		t.Fatalf("%s: %v (%T), want a *refund.InputError", what, err, err)
	}
	for _, w := range wants {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: %q does not say %q", what, err, w)
		}
	}
}

// An import into an empty checkpoint stores each item's records, binds
// its refunds to it and indexes it on its payment; the same import again
// adds nothing; a worker then claims only what the import left unsettled.
func TestImportIdempotentIndexedAndSettled(t *testing.T) {
	srv := reviewServer(t, false)
	url := srv.URL("imp")
	c := reviewOpen(t, url, 5*time.Second, "journal-merge")
	part := writeJournal(t, "a.jsonl", sent("i1", "ch_1", 100, "re_1", 1))
	whole := writeJournal(t, "ab.jsonl", sent("i1", "ch_1", 100, "re_1", 1), sent("i2", "ch_2", 100, "re_2", 2), sent("i3", "ch_3", 100, "", 3))

	n, batches, err := importFile(t, c, part)
	if err != nil || n != 2 || len(batches) != 1 || batches[0] != "B" {
		t.Fatalf("first import: %d records of %v, %v; want 2 of [B]", n, batches, err)
	}
	// As if the import of the whole journal had died after its first item:
	// the same import again writes only the rest.
	n, _, err = importFile(t, c, whole)
	if err != nil || n != 3 {
		t.Fatalf("the whole journal over the part: %d records, %v; want 3", n, err)
	}
	before := exported(t, c)
	n, batches, err = importFile(t, c, whole)
	if err != nil || n != 0 || len(batches) != 0 {
		t.Fatalf("the same import again: %d records of %v, %v; want nothing", n, batches, err)
	}
	if after := exported(t, c); after != before {
		t.Errorf("the same import again changed the checkpoint:\n%s\nwas\n%s", after, before)
	}

	reader, err := Open(context.Background(), url, Options{}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if b, it, ok, err := reader.Holder("re_2"); err != nil || !ok || b != "B" || it != "i2" {
		t.Errorf("Holder(re_2) = %s %s %v %v, want B i2", b, it, ok, err)
	}
	for charge, want := range map[string]journal.Status{"ch_1": journal.StatusRefunded, "ch_3": journal.StatusInDoubt} {
		items, err := reader.OnPayment([]string{charge})
		if err != nil || len(items) != 1 || items[0].State.Status != want {
			t.Errorf("OnPayment(%s) = %+v, %v; want one item, %s", charge, items, err, want)
		}
	}

	w := reviewOpen(t, url, 5*time.Second, "w1")
	if err := w.Load(context.Background(), importPlan("i1", "ch_1", "i2", "ch_2", "i3", "ch_3", "i4", "ch_4")); err != nil {
		t.Fatal(err)
	}
	claimed := map[string]refund.Claimed{}
	for {
		got, wait, err := w.Claim(context.Background(), 10, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, cl := range got {
			claimed[cl.Item] = cl
		}
		if len(got) == 0 && (wait == 0 || len(claimed) == 2) {
			break
		}
		time.Sleep(wait) // Claim's poll interval
	}
	if len(claimed) != 2 || !claimed["i3"].Known || claimed["i3"].State.Status != journal.StatusInDoubt || claimed["i4"].Known {
		t.Errorf("claimed %+v, want i3 (in doubt, as imported) and i4 (new) only", claimed)
	}
}

// Records that bind an item otherwise than the plan line the checkpoint
// stores are refused, at the journal's line, and nothing is written.
func TestImportRefusesWhatThePlanContradicts(t *testing.T) {
	srv := reviewServer(t, false)
	url := srv.URL("plan")
	w := reviewOpen(t, url, 5*time.Second, "w1")
	if err := w.Load(context.Background(), importPlan("i1", "ch_1", "i2", "ch_2")); err != nil {
		t.Fatal(err)
	}
	c := reviewOpen(t, url, 5*time.Second, "journal-merge")
	for _, tc := range []struct {
		what  string
		path  string
		wants []string
	}{
		{"another charge", writeJournal(t, "charge.jsonl", sent("i2", "ch_2", 100, "re_2", 1), sent("i1", "ch_9", 100, "re_9", 2)),
			[]string{"charge.jsonl:3: ", `item "i1"`, `charge "ch_1"`, `charge "ch_9"`, "line 1 of the plan"}},
		{"another amount", writeJournal(t, "amount.jsonl", sent("i1", "ch_1", 800, "", 1)),
			[]string{"amount.jsonl:1: ", `item "i1"`, "amount 100", "800 as sent"}},
	} {
		err := checkFile(t, c, tc.path)
		wantInputError(t, tc.what, err, tc.wants...)
		t.Logf("%s: %v", tc.what, err)
		// Import refuses the merge too, when asked without the check.
		if _, _, err := importWithoutCheck(t, c, tc.path); err == nil {
			t.Errorf("%s: Import took the merge", tc.what)
		} else {
			wantInputError(t, tc.what+", Import", err, `item "i1"`)
		}
		if got := exported(t, c); got != "" {
			t.Errorf("%s: records were written:\n%s", tc.what, got)
		}
	}
}

// importWithoutCheck is importFile without CheckJournal first: Import's
// own checks.
func importWithoutCheck(t *testing.T, c *Checkpoint, path string) (int, []string, error) {
	t.Helper()
	exp := filepath.Join(t.TempDir(), "export.jsonl")
	f, err := os.Create(exp)
	if err != nil {
		t.Fatal(err)
	}
	_, last, err := c.Export(context.Background(), f, nil)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	var merged bytes.Buffer
	if _, err := journal.Merge([]string{exp, path}, &merged); err != nil {
		t.Fatal(err)
	}
	return c.Import(context.Background(), &merged, "the merge", last)
}

// Records that name another payment than the records an item holds (no
// plan stored) are refused at their line; so is a refund the checkpoint
// credits to another item, or one a journal credits to two.
func TestImportRefusesWhatStoredRecordsContradict(t *testing.T) {
	srv := reviewServer(t, false)
	c := reviewOpen(t, srv.URL("recs"), 5*time.Second, "journal-merge")
	if _, _, err := importFile(t, c, writeJournal(t, "first.jsonl", sent("i1", "ch_1", 100, "re_1", 1))); err != nil {
		t.Fatal(err)
	}
	before := exported(t, c)
	for _, tc := range []struct {
		what  string
		path  string
		wants []string
	}{
		{"another payment", writeJournal(t, "payment.jsonl", sent("i1", "ch_2", 100, "", 2)),
			[]string{"payment.jsonl:1: ", `item "i1"`, "charge ch_2", "charge ch_1"}},
		{"a refund of another item", writeJournal(t, "refund.jsonl", sent("i0", "ch_0", 100, "", 0), sent("i2", "ch_2", 100, "re_1", 2)),
			[]string{"refund.jsonl:3: ", `item "i2"`, "re_1", `item "i1"`}},
		{"a refund of two items", writeJournal(t, "two.jsonl", sent("i3", "ch_3", 100, "re_3", 3), sent("i4", "ch_4", 100, "re_3", 4)),
			[]string{"two.jsonl:4: ", "re_3", `item "i3"`, `item "i4"`}},
	} {
		err := checkFile(t, c, tc.path)
		wantInputError(t, tc.what, err, tc.wants...)
		t.Logf("%s: %v", tc.what, err)
		if _, _, err := importWithoutCheck(t, c, tc.path); err == nil {
			t.Errorf("%s: Import took the merge", tc.what)
		} else {
			wantInputError(t, tc.what+", Import", err)
		}
		if got := exported(t, c); got != before {
			t.Errorf("%s: the checkpoint changed:\n%s", tc.what, got)
		}
		if _, ok, err := c.Inspect(context.Background(), "B", "i2"); err != nil || ok {
			t.Errorf("%s: item i2 was stored (%v)", tc.what, err)
		}
	}
}

// An item a worker holds is not imported into: the whole import is
// refused (exit 4 in journal-merge) until the worker gives it back.
func TestImportRefusesAHeldItem(t *testing.T) {
	srv := reviewServer(t, false)
	url := srv.URL("held")
	w := reviewOpen(t, url, 5*time.Second, "w1")
	if err := w.Load(context.Background(), importPlan("i1", "ch_1", "i2", "ch_2")); err != nil {
		t.Fatal(err)
	}
	got, _, err := w.Claim(context.Background(), 1, false)
	if err != nil || len(got) != 1 || got[0].Item != "i1" {
		t.Fatalf("claim: %+v %v", got, err)
	}
	c := reviewOpen(t, url, 5*time.Second, "journal-merge")
	j := writeJournal(t, "j.jsonl", sent("i1", "ch_1", 100, "re_1", 1), sent("i2", "ch_2", 100, "re_2", 2))
	_, _, err = importFile(t, c, j)
	var busy *BusyError
	if !errors.As(err, &busy) || !strings.Contains(err.Error(), "w1") || !strings.Contains(err.Error(), `item "i1"`) {
		t.Fatalf("import over a held item: %v, want a *BusyError naming w1 and i1", err)
	}
	t.Logf("refused: %v", err)
	if s := exported(t, c); s != "" {
		t.Fatalf("records were written beside the held item:\n%s", s)
	}
	// The worker's claim stands: its writes go in.
	if err := w.Append(sent("i1", "ch_1", 100, "", 5)...); err != nil {
		t.Fatalf("the worker's write after the refused import: %v", err)
	}
	if err := w.Release(context.Background(), "B", "i1"); err != nil {
		t.Fatal(err)
	}
	// Given back: imported now, the worker's intent kept beside the
	// journal's records.
	n, _, err := importFile(t, c, j)
	if err != nil || n != 4 {
		t.Fatalf("import once the item was given back: %d, %v; want 4 records", n, err)
	}
	if info, _, _ := c.Inspect(context.Background(), "B", "i1"); info.Records != 3 || info.Status != "refunded" {
		t.Errorf("item i1 after the import: %+v, want 3 records, refunded", info)
	}
}

// A worker's write between the import's read and its write is read again,
// never overwritten: a plan's load (which gives the items their plan
// lines) is kept, and a claim stops the import part way, which the same
// import completes once the claim is given back.
func TestImportRacingAWorker(t *testing.T) {
	srv := reviewServer(t, false)
	url := srv.URL("race")
	c := reviewOpen(t, url, 5*time.Second, "journal-merge")
	if _, _, err := importFile(t, c, writeJournal(t, "intents.jsonl", sent("i1", "ch_1", 100, "", 1), sent("i2", "ch_2", 100, "", 2))); err != nil {
		t.Fatal(err)
	}
	w := reviewOpen(t, url, 5*time.Second, "w1")
	var once sync.Once
	beforeImportWrite = func(batch, item string) {
		once.Do(func() {
			// Before the import writes i1: the plan's load writes both
			// items (their plan lines), then the worker claims both and
			// gives i1 back.
			if err := w.Load(context.Background(), importPlan("i1", "ch_1", "i2", "ch_2")); err != nil {
				t.Errorf("load: %v", err)
				return
			}
			n := 0
			for n < 2 {
				got, wait, err := w.Claim(context.Background(), 2-n, false)
				if err != nil {
					t.Errorf("claim: %v", err)
					return
				}
				n += len(got)
				time.Sleep(wait) // Claim's poll interval, 0 once it took them
			}
			if err := w.Release(context.Background(), "B", "i1"); err != nil {
				t.Errorf("release: %v", err)
			}
		})
	}
	defer func() { beforeImportWrite = nil }()
	j := writeJournal(t, "refunds.jsonl", sent("i2", "ch_2", 100, "re_2", 2), sent("i1", "ch_1", 100, "re_1", 1))
	_, _, err := importFile(t, c, j)
	var partial *PartialImportError
	if !errors.As(err, &partial) || partial.Written != 1 || partial.Items != 2 || !errors.As(err, new(*BusyError)) {
		t.Fatalf("import racing a claim: %v, want it stopped at the claimed item (busy) after writing the other", err)
	}
	t.Logf("stopped: %v", err)
	if info, _, _ := c.Inspect(context.Background(), "B", "i1"); info.Status != "refunded" || !info.Released {
		t.Errorf("item i1, given back before the import wrote it: %+v, want refunded and still given back", info)
	}
	if info, _, _ := c.Inspect(context.Background(), "B", "i2"); info.Worker != "w1" || info.Gen != 1 || info.Records != 1 {
		t.Errorf("item i2, claimed before the import wrote it: %+v, want w1's claim 1 and its 1 record", info)
	}
	var plans bytes.Buffer
	if n, err := c.ExportPlans(context.Background(), &plans, nil); err != nil || n != 2 {
		t.Errorf("plan lines after the import: %d, %v; want both kept", n, err)
	}
	if err := w.Release(context.Background(), "B", "i2"); err != nil {
		t.Fatal(err)
	}
	n, _, err := importFile(t, c, j)
	if err != nil || n != 1 {
		t.Fatalf("the same import once the claim was given back: %d, %v; want i2's refund", n, err)
	}
	if info, _, _ := c.Inspect(context.Background(), "B", "i2"); info.Status != "refunded" {
		t.Errorf("item i2: %+v, want refunded", info)
	}
	if n, _, err := importFile(t, c, j); err != nil || n != 0 {
		t.Errorf("the same import a third time: %d, %v; want nothing", n, err)
	}
}

// BenchmarkImport imports a journal of 1000 refunded items into a new
// checkpoint on a server that syncs every write (items/s), then the same
// journal again, which writes nothing (again-ms).
func BenchmarkImport(b *testing.B) {
	srv, err := natstest.Start(natstest.Options{SyncAlways: true})
	if err != nil {
		b.Skipf("no nats-server: %v", err)
	}
	defer srv.Stop()
	const items = 1000
	var recs [][]*journal.Record
	for i := range items {
		recs = append(recs, sent(fmt.Sprintf("i%04d", i), fmt.Sprintf("ch_%04d", i), 100, fmt.Sprintf("re_%04d", i), i))
	}
	path := writeJournal(b, "j.jsonl", recs...)
	var again time.Duration
	for n := 0; n < b.N; n++ {
		b.StopTimer()
		c, err := Open(context.Background(), srv.URL(fmt.Sprintf("bench%d", n)), Options{Worker: "journal-merge"}, false)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if got, _, err := importFile(b, c, path); err != nil || got != 2*items {
			b.Fatalf("import: %d records, %v; want %d", got, err, 2*items)
		}
		b.StopTimer()
		start := time.Now()
		if got, _, err := importFile(b, c, path); err != nil || got != 0 {
			b.Fatalf("the same import again: %d records, %v; want none", got, err)
		}
		again += time.Since(start)
		c.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(items*b.N)/b.Elapsed().Seconds(), "items/s")
	b.ReportMetric(float64(again.Milliseconds())/float64(b.N), "again-ms")
}
