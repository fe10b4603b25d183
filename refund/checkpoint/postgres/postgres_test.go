package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/audit"
	"github.com/refundkit/refundkit/refund/checkpoint/postgres/pgtest"
	"github.com/refundkit/refundkit/refund/provider/stripe"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/refund/sim/stripesim/simtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func open(t *testing.T, url, worker string, lease time.Duration) *Checkpoint {
	t.Helper()
	c, err := Open(context.Background(), url, Options{Worker: worker, Lease: lease}, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func planOf(batch string, n int, amount int64) []refund.PlanLine {
	lines := make([]refund.PlanLine, n)
	for i := range lines {
		lines[i] = refund.PlanLine{Line: i + 1, Item: &refund.Item{Batch: batch, Item: fmt.Sprintf("i%d", i+1), Charge: fmt.Sprintf("ch_sim%07d", i+1), Amount: amount}}
	}
	return lines
}

func intent(it *refund.Item, attempt int) *journal.Record {
	return &journal.Record{V: journal.Version, Type: journal.TypeIntent, Time: time.Now().UTC(), Batch: it.Batch, Item: it.Item,
		Charge: it.Charge, Attempt: attempt, Key: refund.IdempotencyKey(it.Batch, it.Item, attempt), Amount: it.Amount}
}

func refunded(it *refund.Item, id string) *journal.Record {
	return &journal.Record{V: journal.Version, Type: journal.TypeRefunded, Time: time.Now().UTC(), Batch: it.Batch, Item: it.Item,
		Charge: it.Charge, Attempt: 1, Key: refund.IdempotencyKey(it.Batch, it.Item, 1), Refund: id, Amount: 100, Currency: "usd", Status: journal.SucceededStatus, Source: journal.SourceAPI}
}

// expire ends every lease in the database now, as a paused holder's would
// end: no sleeping for a lease to run out.
func expire(t *testing.T, c *Checkpoint) {
	t.Helper()
	if _, err := c.pool.Exec(context.Background(), `UPDATE refundkit.items SET lease_until = clock_timestamp() - interval '1 second' WHERE claimed_by IS NOT NULL`); err != nil {
		t.Fatal(err)
	}
}

func TestMigrateTwiceAndRefuseNewerSchema(t *testing.T) {
	url := pgtest.NewDB(t)
	a := open(t, url, "a", time.Minute)
	open(t, url, "b", time.Minute) // a second worker migrates nothing
	var versions int
	if err := a.pool.QueryRow(context.Background(), `SELECT count(*) FROM refundkit.schema_migrations`).Scan(&versions); err != nil {
		t.Fatal(err)
	}
	if versions != SchemaVersion {
		t.Fatalf("%d migrations recorded, want %d", versions, SchemaVersion)
	}
	if _, err := a.pool.Exec(context.Background(), `INSERT INTO refundkit.schema_migrations (version) VALUES ($1)`, SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	_, err := Open(context.Background(), url, Options{}, true)
	if err == nil || !strings.Contains(err.Error(), "newer than this build") {
		t.Fatalf("a newer schema: got %v", err)
	}
}

func TestLoadSamePlanIsANoOpAndAnotherIsRefusedNamingTheItem(t *testing.T) {
	url := pgtest.NewDB(t)
	a, b := open(t, url, "a", time.Minute), open(t, url, "b", time.Minute)
	ctx := context.Background()
	plan := planOf("b1", 5, 100)
	if err := a.Load(ctx, plan); err != nil {
		t.Fatal(err)
	}
	// The same items in another order are the same plan.
	reversed := append([]refund.PlanLine(nil), plan...)
	for i, j := 0, len(reversed)-1; i < j; i, j = i+1, j-1 {
		reversed[i], reversed[j] = reversed[j], reversed[i]
	}
	if err := b.Load(ctx, reversed); err != nil {
		t.Fatalf("the same plan again: %v", err)
	}

	edited := planOf("b1", 5, 100)
	edited[3].Item.Amount = 250
	var ie *refund.InputError
	err := b.Load(ctx, edited)
	if !errors.As(err, &ie) || ie.Line != 4 || !strings.Contains(err.Error(), `"i4"`) || !strings.Contains(err.Error(), "amount 250 here, 100 in the checkpoint") {
		t.Fatalf("an edited item: got %v", err)
	}
	longer := planOf("b1", 6, 100)
	if err := b.Load(ctx, longer); !errors.As(err, &ie) || ie.Line != 6 || !strings.Contains(err.Error(), `"i6" is not in the plan`) {
		t.Fatalf("a new item: got %v", err)
	}
	shorter := planOf("b1", 4, 100)
	if err := b.Load(ctx, shorter); !errors.As(err, &ie) || ie.Line != 0 || !strings.Contains(err.Error(), `"i5"`) || !strings.Contains(err.Error(), "missing from this plan") {
		t.Fatalf("a missing item: got %v", err)
	}
	var items int
	if err := a.pool.QueryRow(ctx, `SELECT count(*) FROM refundkit.items WHERE batch = 'b1'`).Scan(&items); err != nil || items != 5 {
		t.Fatalf("items stored: %d, %v; want the first plan's 5", items, err)
	}
}

func TestClaimsAreExclusiveAndALostClaimIsFenced(t *testing.T) {
	url := pgtest.NewDB(t)
	ctx := context.Background()
	a, b := open(t, url, "a", time.Minute), open(t, url, "b", time.Minute)
	plan := planOf("b1", 3, 0)
	for _, c := range []*Checkpoint{a, b} {
		if err := c.Load(ctx, plan); err != nil {
			t.Fatal(err)
		}
	}
	got, _, err := a.Claim(ctx, 2, false)
	if err != nil || len(got) != 2 || got[0].Item != "i1" || got[1].Item != "i2" || got[0].Known {
		t.Fatalf("a's claim: %+v, %v", got, err)
	}
	got, _, err = b.Claim(ctx, 5, false)
	if err != nil || len(got) != 1 || got[0].Item != "i3" {
		t.Fatalf("b's claim, beside a's: %+v, %v", got, err)
	}
	// Nothing left for b while a's leases are live: it is told to wait.
	got, wait, err := b.Claim(ctx, 5, false)
	if err != nil || len(got) != 0 || wait <= 0 {
		t.Fatalf("b with everything claimed: %+v, wait %v, %v", got, wait, err)
	}
	if err := a.Append(intent(plan[0].Item, 1)); err != nil {
		t.Fatal(err)
	}

	// a is paused past its leases: b takes i1 over and finds it in doubt.
	expire(t, a)
	got, _, err = b.Claim(ctx, 5, false)
	if err != nil || len(got) != 2 || got[0].Item != "i1" || got[1].Item != "i2" || !got[0].Known || got[0].State.Status != journal.StatusInDoubt || got[0].State.Attempt != 1 {
		t.Fatalf("b's take-over: %+v, %v", got, err)
	}
	// a wakes: its writes are fenced, and nothing of them is kept.
	var lost *refund.LostClaimError
	if err := a.Append(refunded(plan[0].Item, "re_late")); !errors.As(err, &lost) || lost.Item != "i1" {
		t.Fatalf("a's append after losing its claim: %v", err)
	}
	if err := a.Holds(ctx, "b1", "i1"); !errors.As(err, &lost) {
		t.Fatalf("a.Holds after losing its claim: %v", err)
	}
	// i2, which a never wrote for: past its own deadline, a asks the
	// database, and learns b took it.
	a.Mu.Lock()
	a.Held[key{Batch: "b1", Item: "i2"}].Deadline = time.Time{}
	a.Mu.Unlock()
	if err := a.Holds(ctx, "b1", "i2"); !errors.As(err, &lost) || !strings.Contains(err.Error(), "another worker took it") {
		t.Fatalf("a.Holds of i2 after b took it: %v", err)
	}
	var recs int
	if err := a.pool.QueryRow(ctx, `SELECT count(*) FROM refundkit.records WHERE rec LIKE '%re_late%'`).Scan(&recs); err != nil || recs != 0 {
		t.Fatalf("fenced records written: %d, %v", recs, err)
	}
	// b, the holder, writes; a release leaves the item settled for all.
	if err := b.Append(refunded(plan[0].Item, "re_1")); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, "b1", "i1"); err != nil {
		t.Fatal(err)
	}
	st, known, err := a.Lookup("b1", "i1")
	if err != nil || !known || st.Status != journal.StatusRefunded || st.Refund != "re_1" {
		t.Fatalf("i1 after b's refund: %+v %v %v", st, known, err)
	}
	c := open(t, url, "c", time.Minute)
	if err := c.Load(ctx, plan); err != nil {
		t.Fatal(err)
	}
	got, _, err = c.Claim(ctx, 5, false)
	for _, cl := range got {
		if cl.Item == "i1" {
			t.Fatalf("a refunded item was claimed again: %+v", got)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}

func TestHoldsRenewsPastItsDeadlineWhileNoOneTookTheItem(t *testing.T) {
	url := pgtest.NewDB(t)
	ctx := context.Background()
	a := open(t, url, "a", time.Minute)
	plan := planOf("b1", 1, 0)
	if err := a.Load(ctx, plan); err != nil {
		t.Fatal(err)
	}
	if got, _, err := a.Claim(ctx, 1, false); err != nil || len(got) != 1 {
		t.Fatalf("%+v %v", got, err)
	}
	a.Mu.Lock()
	a.Held[key{Batch: "b1", Item: "i1"}].Deadline = time.Time{}
	a.Mu.Unlock()
	if err := a.Holds(ctx, "b1", "i1"); err != nil {
		t.Fatalf("a claim no one took: %v", err)
	}
	a.Mu.Lock()
	renewed := a.Held[key{Batch: "b1", Item: "i1"}].Deadline
	a.Mu.Unlock()
	if !renewed.After(time.Now()) {
		t.Fatalf("the deadline was not renewed: %v", renewed)
	}
}

func TestRenewalKeepsALongCallsLease(t *testing.T) {
	url := pgtest.NewDB(t)
	ctx := context.Background()
	// Renewals tick every third of the lease, each given a third to
	// answer: long enough for a busy machine's database.
	const lease = 4500 * time.Millisecond
	a, b := open(t, url, "a", lease), open(t, url, "b", lease)
	plan := planOf("b1", 1, 0)
	a.Load(ctx, plan)
	b.Load(ctx, plan)
	if got, _, err := a.Claim(ctx, 1, false); err != nil || len(got) != 1 {
		t.Fatalf("%+v %v", got, err)
	}
	var first time.Time
	a.pool.QueryRow(ctx, `SELECT lease_until FROM refundkit.items`).Scan(&first)
	// Two leases later, a's renewals have kept the item a's.
	deadline := time.Now().Add(2 * lease)
	for time.Now().Before(deadline) {
		got, _, err := b.Claim(ctx, 1, false)
		if err != nil || len(got) != 0 {
			t.Fatalf("b took a's renewed claim: %+v %v", got, err)
		}
		time.Sleep(lease / 10)
	}
	var later time.Time
	a.pool.QueryRow(ctx, `SELECT lease_until FROM refundkit.items`).Scan(&later)
	if !later.After(first) {
		t.Fatalf("the lease was not renewed: %v, then %v", first, later)
	}
	if err := a.Holds(ctx, "b1", "i1"); err != nil {
		t.Fatal(err)
	}
}

func TestExportIsTheJournalAFileHoldsAndImportReplaces(t *testing.T) {
	url := pgtest.NewDB(t)
	ctx := context.Background()
	a := open(t, url, "a", time.Minute)
	plan := planOf("b1", 3, 0)
	a.Load(ctx, plan)
	a.Claim(ctx, 3, false)
	var want []*journal.Record
	for i, pl := range plan[:2] {
		recs := []*journal.Record{intent(pl.Item, 1), refunded(pl.Item, fmt.Sprintf("re_%d", i))}
		for _, r := range recs {
			if err := a.Append(r); err != nil {
				t.Fatal(err)
			}
		}
		want = append(want, recs...)
	}
	var buf bytes.Buffer
	n, last, err := a.Export(ctx, &buf, nil)
	if err != nil || n != 4 || last == 0 {
		t.Fatalf("export: %d records, last %d, %v", n, last, err)
	}
	sc := journal.NewScanner(bytes.NewReader(buf.Bytes()), "export")
	var got []*journal.Record
	for sc.Scan() {
		got = append(got, sc.Record())
	}
	if sc.Err() != nil || sc.Torn() != nil || len(got) != len(want) {
		t.Fatalf("export read back: %d records, %v, torn %v", len(got), sc.Err(), sc.Torn())
	}
	for i := range want {
		w, _ := journal.MarshalLine(nil, want[i])
		g, _ := journal.MarshalLine(nil, got[i])
		if !bytes.Equal(w, g) {
			t.Fatalf("record %d:\n got %s\nwant %s", i, g, w)
		}
	}
	if !bytes.Contains(buf.Bytes(), []byte(`"type":"commit"`)) {
		t.Fatal("export has no commit lines: not what a file journal holds")
	}

	// An import while a holds live claims is refused.
	var busy *BusyError
	if _, _, err := a.Import(ctx, bytes.NewReader(buf.Bytes()), "merged", last); !errors.As(err, &busy) {
		t.Fatalf("import with live claims: %v", err)
	}
	a.Close()
	// Adding i3's refund (a file journal of another host), after a released.
	var more bytes.Buffer
	more.Write(buf.Bytes())
	line, _ := journal.MarshalLine(nil, refunded(plan[2].Item, "re_2"))
	more.Write(journal.AppendCommit(line, line, 1))
	b := open(t, url, "b", time.Minute)
	if _, _, err := b.Import(ctx, bytes.NewReader(more.Bytes()), "merged", last-1); !errors.As(err, &busy) {
		t.Fatalf("import of an export older than the checkpoint: %v", err)
	}
	n2, batches, err := b.Import(ctx, bytes.NewReader(more.Bytes()), "merged", last)
	if err != nil || n2 != 5 || len(batches) != 1 {
		t.Fatalf("import: %d %v %v", n2, batches, err)
	}
	var status string
	b.pool.QueryRow(ctx, `SELECT status FROM refundkit.items WHERE item = 'i3'`).Scan(&status)
	if status != "refunded" {
		t.Fatalf("i3's status after import: %q", status)
	}
	b.Load(ctx, plan)
	if got, wait, err := b.Claim(ctx, 3, false); err != nil || len(got) != 0 || wait != 0 {
		t.Fatalf("claims after every item was refunded: %+v %v %v", got, wait, err)
	}
}

func TestPasswordNeverInErrors(t *testing.T) {
	const pw = "s3cret-Pa55word"
	s := pgtest.Shared()
	if err := s.CreateRole(context.Background(), "pwuser", pw); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	for _, url := range []string{
		s.TCPURL("postgres", "pwuser", "wrong-"+pw),
		strings.Replace(s.TCPURL("postgres", "pwuser", pw), "postgres?", "no_such_db?", 1),
		"postgres://pwuser:" + pw + "@127.0.0.1:1/x?sslmode=disable&connect_timeout=2",
		"postgres://pwuser:" + pw + "@[bad/x",
		"postgres://u@host/db?password=" + pw + "&sslmode=nonsense",
	} {
		_, err := Open(context.Background(), url, Options{}, true)
		if err == nil {
			t.Fatalf("%s: opened", Redact(url))
		}
		if strings.Contains(err.Error(), pw) {
			t.Fatalf("the password is in the error: %v", err)
		}
		if strings.Contains(Redact(url), pw) {
			t.Fatalf("the password is in Redact: %s", Redact(url))
		}
	}
}

// TestWorkersShareABatchExactlyOnce runs three engines on one checkpoint and
// one plan, as three hosts would: every item refunded once, each by one.
func TestWorkersShareABatchExactlyOnce(t *testing.T) {
	url := pgtest.NewDB(t)
	const items = 60
	sim := simtest.Start(t, stripesim.Config{Charges: stripesim.GenerateCharges(items, 1), Seed: 3,
		Faults: stripesim.Faults{ErrorAfterCommitShare: 0.1, DropAfterCommitShare: 0.05, GatewayTimeoutShare: 0.05}})
	var plan strings.Builder
	for i := 1; i <= items; i++ {
		fmt.Fprintf(&plan, `{"batch":"b1","item":"i%d","charge":"ch_sim%07d"}`+"\n", i, i)
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		results = map[string][]refund.Result{}
	)
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cp := open(t, url, fmt.Sprintf("w%d", w), time.Minute)
			_, err := refund.Run(context.Background(), refund.Config{
				Provider: stripe.New(sim.URL, "sk_test_x", 4), Checkpoint: cp, Workers: 4,
				ResendAfter500: true,
				OnResult: func(r refund.Result) {
					mu.Lock()
					results[r.Item] = append(results[r.Item], r)
					mu.Unlock()
				},
			}, strings.NewReader(plan.String()), "plan")
			if err != nil {
				t.Errorf("worker %d: %v", w, err)
			}
		}()
	}
	wg.Wait()
	perItem := map[string]int{}
	for _, r := range sim.Refunds() {
		perItem[r.Metadata[refund.MetaItem]]++
	}
	for i := 1; i <= items; i++ {
		if n := perItem[fmt.Sprintf("i%d", i)]; n != 1 {
			t.Errorf("item i%d: %d refunds at the simulator", i, n)
		}
	}
	// Items left in doubt by a lost answer are settled by another worker
	// or a rerun; none is worked on by two at once.
	for item, rs := range results {
		for _, r := range rs[:len(rs)-1] {
			if r.Status == refund.StatusRefunded {
				t.Errorf("item %s was worked on after it was refunded: %+v", item, rs)
			}
		}
	}
}

// TestSettlingRecordEndsTheClaim: a refunded item's claim ends with its
// record (a holder killed before Release leaves no claim behind), and the
// holder may still journal a second refund it found for the item.
func TestSettlingRecordEndsTheClaim(t *testing.T) {
	url := pgtest.NewDB(t)
	ctx := context.Background()
	a := open(t, url, "a", time.Minute)
	plan := planOf("b1", 1, 0)
	a.Load(ctx, plan)
	if got, _, err := a.Claim(ctx, 1, false); err != nil || len(got) != 1 {
		t.Fatalf("%+v %v", got, err)
	}
	if err := a.Append(refunded(plan[0].Item, "re_1")); err != nil {
		t.Fatal(err)
	}
	_, claims, _, err := a.Holders(ctx, nil)
	if err != nil || len(claims) != 0 {
		t.Fatalf("claims after the item was refunded: %+v %v", claims, err)
	}
	if err := a.Append(refunded(plan[0].Item, "re_2")); err != nil {
		t.Fatalf("a second refund found, after the first: %v", err)
	}
	// Another worker claiming meanwhile would have fenced it: the
	// generation moves only with a claim.
	var n int
	a.pool.QueryRow(ctx, `SELECT count(*) FROM refundkit.records`).Scan(&n)
	if n != 2 {
		t.Fatalf("%d records, want 2", n)
	}
}

// TestExportMeansWhatAFileJournalOfTheBatchMeans runs one batch twice, on
// twin simulators (the same charges, the same faults): once with a file
// journal, once with three workers on the checkpoint. The export must say
// of every item what the file says, and audit (with the plan, and the
// simulator itself) must find both clean.
func TestExportMeansWhatAFileJournalOfTheBatchMeans(t *testing.T) {
	url := pgtest.NewDB(t)
	const items = 40
	cfg := stripesim.Config{Charges: stripesim.GenerateCharges(items, 1), Seed: 5}
	var plan strings.Builder
	for i := 1; i <= items; i++ {
		fmt.Fprintf(&plan, `{"batch":"b1","item":"i%d","charge":"ch_sim%07d","amount":%d}`+"\n", i, i, 100+i)
	}
	run := func(sim *simtest.Sim, cp refund.Checkpoint) {
		t.Helper()
		if _, err := refund.Run(context.Background(), refund.Config{
			Provider: stripe.New(sim.URL, "sk_test_x", 4), Checkpoint: cp, Workers: 4, OnResult: func(refund.Result) {},
		}, strings.NewReader(plan.String()), "plan"); err != nil {
			t.Fatal(err)
		}
	}
	fileSim, pgSim := simtest.Start(t, cfg), simtest.Start(t, cfg)
	path := t.TempDir() + "/file.jsonl"
	w, state, _, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	run(fileSim, refund.Journal(w, state))
	w.Close()
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run(pgSim, open(t, url, fmt.Sprintf("w%d", i), time.Minute))
		}()
	}
	wg.Wait()

	var export bytes.Buffer
	if _, _, err := open(t, url, "reader", time.Minute).Export(context.Background(), &export, []string{"b1"}); err != nil {
		t.Fatal(err)
	}
	fromFile, _, err := journal.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	exported := t.TempDir() + "/export.jsonl"
	if err := os.WriteFile(exported, export.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	fromDB, torn, err := journal.Load(exported)
	if err != nil || torn != nil {
		t.Fatalf("the export as a journal: %v, torn %v", err, torn)
	}
	if fromFile.Len() != items || fromDB.Len() != items {
		t.Fatalf("items: file %d, export %d, want %d", fromFile.Len(), fromDB.Len(), items)
	}
	fromFile.Each(func(batch, item string, f journal.ItemState) {
		d, ok := fromDB.Lookup(batch, item)
		// Refund ids are the simulators' own; everything else must agree.
		f.Refund, d.Refund, f.SentAt, d.SentAt = "", "", 0, 0
		if !ok || f != d {
			t.Errorf("item %s: file %+v, export %+v", item, f, d)
		}
	})
	for name, j := range map[string][]byte{"file": mustRead(t, path), "export": export.Bytes()} {
		a := audit.New()
		if err := a.AddPlan(strings.NewReader(plan.String()), "plan"); err != nil {
			t.Fatal(err)
		}
		if _, err := a.AddJournal(bytes.NewReader(j), name); err != nil {
			t.Fatal(err)
		}
		sim := fileSim
		if name == "export" {
			sim = pgSim
		}
		rep, err := a.Run(context.Background(), audit.Options{Provider: stripe.New(sim.URL, "sk_test_x", 4), Workers: 4}, func(f *audit.Finding) {
			t.Errorf("%s: finding %+v", name, f)
		})
		if err != nil || !rep.Clean() {
			t.Fatalf("%s: audit not clean: %v %v", name, err, rep.Lines())
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
