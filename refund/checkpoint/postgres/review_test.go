package postgres

// These tests were written by a review of the shared checkpoint, each
// failing on the defect its comment describes (in the present tense, as
// found); they now guard the fixes.

// Adversarial review of issue 13: each test shows a way the PostgreSQL
// checkpoint breaks a promise a file journal keeps.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/checkpoint/postgres/pgtest"
	"github.com/refundkit/refundkit/refund/provider/stripe"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/refund/sim/stripesim/simtest"
)

// meetBeforeCreate lets no refund be created until two look-ups were made
// (or a while passed, when the second look-up is rightly kept waiting for
// the first refund): the interleaving of two hosts that start together.
type meetBeforeCreate struct {
	refund.Provider
	finds atomic.Int32
	both  chan struct{}
}

func (p *meetBeforeCreate) Find(ctx context.Context, pay refund.Payment) ([]refund.Refund, error) {
	r, err := p.Provider.Find(ctx, pay)
	if p.finds.Add(1) == 2 {
		close(p.both)
	}
	return r, err
}

func (p *meetBeforeCreate) Create(ctx context.Context, it *refund.Item, attempt int) (refund.Answer, error) {
	select {
	case <-p.both:
	case <-time.After(3 * time.Second):
	}
	return p.Provider.Create(ctx, it, attempt)
}

// TestOneChargeTwoItemsAcrossWorkersRefundedOnce: a plan that names one
// payment twice under two batches gets one refund and one hold from one
// run with two workers (the payment locks serialise them, so the second
// look-up sees the first refund), and the same from two runs sharing the
// checkpoint (its payment locks span runs). Named once by charge and once
// by payment intent in one batch, it is two partial refunds, each item's,
// from one run or two.
func TestOneChargeTwoItemsAcrossWorkersRefundedOnce(t *testing.T) {
	for _, tc := range []struct {
		name, plan string
		want       int // refunds on the charge
	}{
		// The second batch's item is held for the first's refund.
		{"two batches", `{"batch":"b1","item":"x","charge":"ch_sim0000001","amount":100}
{"batch":"b2","item":"x","charge":"ch_sim0000001","amount":100}
`, 1},
		// Two partial refunds of one payment, planned by its two names:
		// each item's, neither held.
		{"charge and payment intent", `{"batch":"b1","item":"by_charge","charge":"ch_sim0000001","amount":100}
{"batch":"b1","item":"by_intent","payment_intent":"pi_sim0000001","amount":100}
`, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refundsOnCharge := func(runs int) int {
				url := pgtest.NewDB(t)
				sim := simtest.Start(t, stripesim.Config{Charges: stripesim.GenerateCharges(1, 1)})
				p := &meetBeforeCreate{Provider: stripe.New(sim.URL, "sk_test_x", 4), both: make(chan struct{})}
				var wg sync.WaitGroup
				for w := range runs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						cp := open(t, url, fmt.Sprintf("w%d", w), time.Minute)
						_, err := refund.Run(context.Background(), refund.Config{
							Provider: p, Checkpoint: cp, Workers: 2 / runs,
							OnResult: func(r refund.Result) { t.Logf("run %d: %s %s: %s %s", w, r.Item, r.Status, r.Code, r.Message) },
						}, strings.NewReader(tc.plan), "plan")
						if err != nil {
							t.Errorf("run %d: %v", w, err)
						}
					}()
				}
				wg.Wait()
				n := 0
				for _, r := range sim.Refunds() {
					if r.Charge == "ch_sim0000001" && r.Status == "succeeded" {
						n++
					}
				}
				return n
			}
			if n := refundsOnCharge(1); n != tc.want {
				t.Fatalf("one run, two workers: %d refunds on the charge, want %d", n, tc.want)
			}
			if n := refundsOnCharge(2); n != tc.want {
				t.Errorf("two runs sharing the checkpoint: %d refunds on the charge, want %d as one run gives", n, tc.want)
			}
		})
	}
}

// TestClaimWaitsWhileOpenItemsAreLocked: an item row locked by
// another transaction (an import, which locks every item of its batches;
// another worker's claim or release not yet committed) is skipped by the
// claim, and waitForOthers, which looks only at claimed_by, says nothing
// is left: the run ends at once, exit 0, having done nothing, while every
// item is open and unclaimed.
func TestClaimWaitsWhileOpenItemsAreLocked(t *testing.T) {
	url := pgtest.NewDB(t)
	ctx := context.Background()
	a := open(t, url, "a", time.Minute)
	plan := planOf("b1", 3, 0)
	if err := a.Load(ctx, plan); err != nil {
		t.Fatal(err)
	}
	tx, err := a.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// What Import does first (export.go:110).
	if _, err := tx.Exec(ctx, `SELECT 1 FROM refundkit.items WHERE batch = 'b1' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	got, wait, err := a.Claim(ctx, 3, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 && wait == 0 {
		t.Errorf("claim with 3 open, unclaimed items locked by another transaction: none claimed and wait 0 (\"nothing left for this run\"): the run ends as if done")
	}
}

// TestRunWaitsForAnImportHoldingTheBatch: the same through Run, as
// refund does: a worker started while journal-merge -o imports returns no
// error and no result (refund exits 0) with every item unrefunded.
func TestRunWaitsForAnImportHoldingTheBatch(t *testing.T) {
	url := pgtest.NewDB(t)
	ctx := context.Background()
	sim := simtest.Start(t, stripesim.Config{Charges: stripesim.GenerateCharges(3, 1)})
	loader := open(t, url, "loader", time.Minute)
	plan := planOf("b1", 3, 0)
	if err := loader.Load(ctx, plan); err != nil {
		t.Fatal(err)
	}
	tx, err := loader.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM refundkit.items WHERE batch = 'b1' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for _, pl := range plan {
		fmt.Fprintf(&text, `{"batch":"b1","item":%q,"charge":%q}`+"\n", pl.Item.Item, pl.Item.Charge)
	}
	w := open(t, url, "w", time.Minute)
	results := 0
	// The import ends a while after the worker started: the worker waits
	// for it instead of ending as if the batch were done.
	imported := make(chan struct{})
	go func() {
		defer close(imported)
		time.Sleep(500 * time.Millisecond)
		tx.Rollback(ctx)
	}()
	defer func() { <-imported }()
	sum, err := refund.Run(ctx, refund.Config{Provider: stripe.New(sim.URL, "sk_test_x", 4), Checkpoint: w, Workers: 2,
		OnResult: func(refund.Result) { results++ }}, strings.NewReader(text.String()), "plan")
	if err != nil || results < len(plan) {
		t.Errorf("Run: %v, with %d of %d items answered, %d refund calls: %s", err, results, len(plan), sim.Creates(), sum.String())
	}
}

// TestDryRunChecksTheLoadedPlan: a dry run against the checkpoint never
// binds the plan (shared is false in a dry run, engine.go:157), so a plan
// whose amount differs from the loaded one is reported as would-refund,
// exit 0, where the real run refuses it (exit 2).
func TestDryRunChecksTheLoadedPlan(t *testing.T) {
	url := pgtest.NewDB(t)
	ctx := context.Background()
	a := open(t, url, "a", time.Minute)
	if err := a.Load(ctx, planOf("b1", 2, 100)); err != nil {
		t.Fatal(err)
	}
	ro, err := Open(ctx, url, Options{}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	edited := `{"batch":"b1","item":"i1","charge":"ch_sim0000001","amount":100}
{"batch":"b1","item":"i2","charge":"ch_sim0000002","amount":999}
`
	var statuses []string
	_, err = refund.Run(ctx, refund.Config{Checkpoint: ro, DryRun: true, Offline: true,
		OnResult: func(r refund.Result) { statuses = append(statuses, r.Item+":"+r.Status) }}, strings.NewReader(edited), "plan")
	var ie *refund.InputError
	if !errors.As(err, &ie) {
		t.Errorf("dry run of a plan the checkpoint refuses: err %v, results %v; the real run stops with an input error at line 2", err, statuses)
	}
}

// TestReadOnlyOpenWritesNothing: audit, journal-merge's export and
// dry runs open the checkpoint "read-only", yet Open migrates: aimed at the
// wrong database, a read-only tool creates the refundkit schema there (and
// audit then reads an empty checkpoint: see the cli test).
func TestReadOnlyOpenWritesNothing(t *testing.T) {
	url := pgtest.NewDB(t)
	ctx := context.Background()
	ro, err := Open(ctx, url, Options{}, true)
	if err != nil {
		t.Fatalf("read-only open of a database that holds no checkpoint: %v", err)
	}
	defer ro.Close()
	var tables int
	if err := ro.pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_schema = 'refundkit'`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Errorf("a read-only open created %d refundkit tables in a database that held no checkpoint, instead of saying it holds none", tables)
	}
}

// TestSelectOnlyRoleOpensReadOnly: an auditor's role that may only
// read the checkpoint (USAGE on the schema, SELECT on its tables) cannot
// open it read-only: Open takes the migration lock and runs CREATE SCHEMA /
// CREATE TABLE IF NOT EXISTS first (schema.go:72-80).
func TestSelectOnlyRoleOpensReadOnly(t *testing.T) {
	url := pgtest.NewDB(t)
	ctx := context.Background()
	a := open(t, url, "a", time.Minute)
	if err := a.Load(ctx, planOf("b1", 1, 0)); err != nil {
		t.Fatal(err)
	}
	s := pgtest.Shared()
	role := fmt.Sprintf("auditor_%d", time.Now().UnixNano())
	if err := s.CreateRole(ctx, role, "auditor-pw"); err != nil {
		t.Fatal(err)
	}
	var db string
	a.pool.QueryRow(ctx, `SELECT current_database()`).Scan(&db)
	for _, q := range []string{
		`GRANT CONNECT ON DATABASE ` + db + ` TO ` + role,
		`GRANT USAGE ON SCHEMA refundkit TO ` + role,
		`GRANT SELECT ON ALL TABLES IN SCHEMA refundkit TO ` + role,
		`REVOKE CREATE ON SCHEMA public FROM PUBLIC`,
	} {
		if _, err := a.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	ro, err := Open(ctx, s.TCPURL(db, role, "auditor-pw"), Options{}, true)
	if err != nil {
		t.Fatalf("a read-only role opening the checkpoint read-only: %v", err)
	}
	defer ro.Close()
	if _, _, err := ro.Export(ctx, new(strings.Builder), nil); err != nil {
		t.Fatalf("export as the read-only role: %v", err)
	}
}

// TestRerunTalliesHeldItems: a rerun over a file journal
// answers every plan item (skipped, or failed "held in an earlier run"),
// so refund exits 1 while an item is held. A rerun over the checkpoint
// claims only open items (claims.go:41): held and failed items are never
// answered, the summary counts no failure, and refund exits 0.
func TestRerunTalliesHeldItems(t *testing.T) {
	url := pgtest.NewDB(t)
	ctx := context.Background()
	charges := stripesim.GenerateCharges(2, 1)
	charges[1].Refunds = []stripesim.SeedRefund{{Amount: 50, Metadata: map[string]string{refund.MetaBatch: "older", refund.MetaItem: "x"}}}
	sim := simtest.Start(t, stripesim.Config{Charges: charges})
	plan := `{"batch":"b1","item":"i1","charge":"ch_sim0000001","amount":100}
{"batch":"b1","item":"i2","charge":"ch_sim0000002","amount":100}
`
	run := func(worker string) refund.Summary {
		cp := open(t, url, worker, time.Minute)
		sum, err := refund.Run(ctx, refund.Config{Provider: stripe.New(sim.URL, "sk_test_x", 4), Checkpoint: cp, Workers: 2,
			OnResult: func(refund.Result) {}}, strings.NewReader(plan), "plan")
		if err != nil {
			t.Fatal(err)
		}
		return sum
	}
	if first := run("first"); first.ByStatus[refund.StatusFailed] != 1 {
		t.Fatalf("first run: %s; want i2 held", first.String())
	}
	// A rerun works on nothing (the items are settled) and says so; the
	// batch's tally, from which refund's exit comes, still counts the held
	// item as failed.
	cp := open(t, url, "again", time.Minute)
	again, err := refund.Run(ctx, refund.Config{Provider: stripe.New(sim.URL, "sk_test_x", 4), Checkpoint: cp, Workers: 2,
		OnResult: func(refund.Result) {}}, strings.NewReader(plan), "plan")
	if err != nil || again.CreateCalls != 0 {
		t.Fatalf("rerun: %v, %s", err, again.String())
	}
	bs, err := cp.Progress(ctx)
	if err != nil || len(bs) != 1 || bs[0].ByStatus["failed"] != 1 || bs[0].ByStatus["refunded"] != 1 {
		t.Errorf("the batch after the rerun: %+v %v; want 1 refunded, 1 failed (held)", bs, err)
	}
}

// TestAppendOnALockedRowFailsWithinALease: Append (records.go:70), Release and the
// claim run with no deadline and no lock_timeout: an item row locked by
// anything else (an operator's open transaction, an import whose client
// hung) blocks the worker's outcome write for as long as the lock lasts;
// its renewals fail meanwhile, and every other worker polls the expired
// but locked row every 100 ms (waitForOthers) instead of finishing.
func TestAppendOnALockedRowFailsWithinALease(t *testing.T) {
	url := pgtest.NewDB(t)
	ctx := context.Background()
	const lease = time.Second
	a := open(t, url, "a", lease)
	plan := planOf("b1", 1, 0)
	if err := a.Load(ctx, plan); err != nil {
		t.Fatal(err)
	}
	if got, _, err := a.Claim(ctx, 1, false); err != nil || len(got) != 1 {
		t.Fatalf("%+v %v", got, err)
	}
	tx, err := a.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM refundkit.items FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Append(intent(plan[0].Item, 1)) }()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("Append succeeded past a row another transaction locks")
		}
		t.Logf("append returned: %v", err)
	case <-time.After(5 * lease):
		t.Errorf("Append still blocked after 5 leases on a row another transaction locks: no deadline, the worker hangs as long as the lock")
		tx.Rollback(ctx)
		<-done
	}
}

// TestRedactHidesTheKeysPassphrase: Redact (postgres.go:226), which names
// the checkpoint in audit's and journal-merge's messages, redacts only the
// password: sslpassword (the client key's passphrase, which libpq and pgx
// take in the URL) is printed as given.
func TestRedactHidesTheKeysPassphrase(t *testing.T) {
	const secret = "key-Passphrase-77"
	u := "postgres://app@db.example/refunds?sslmode=verify-full&sslcert=/etc/c.pem&sslkey=/etc/k.pem&sslpassword=" + secret
	if got := Redact(u); strings.Contains(got, secret) {
		t.Errorf("Redact prints the key's passphrase: %s", got)
	}
}

// lateProvider answers the item's first call with Stripe's own 500 and
// completes that call later (Facts.LateOutcomes: Stripe repairing an
// incident): when a second key is sent, or at the end of the test.
type lateProvider struct {
	refund.Provider
	looked           chan struct{} // closed at the first look-up: the item is claimed
	lookedOnce, fire sync.Once
	late, lateDone   chan struct{}
	first            atomic.Bool
	keys             atomic.Int32
}

func newLateProvider(p refund.Provider) *lateProvider {
	return &lateProvider{Provider: p, looked: make(chan struct{}), late: make(chan struct{}), lateDone: make(chan struct{})}
}

func (p *lateProvider) Find(ctx context.Context, pay refund.Payment) ([]refund.Refund, error) {
	p.lookedOnce.Do(func() { close(p.looked) })
	return p.Provider.Find(ctx, pay)
}

func (p *lateProvider) Create(ctx context.Context, it *refund.Item, attempt int) (refund.Answer, error) {
	p.keys.Add(1)
	if p.first.CompareAndSwap(false, true) {
		go func() {
			<-p.late
			p.Provider.Create(context.Background(), it, attempt)
			close(p.lateDone)
		}()
		return refund.Answer{}, &refund.Failure{Class: refund.ClassIndeterminate, Status: 500, Code: "api_error", Message: "an incident"}
	}
	a, err := p.Provider.Create(ctx, it, attempt)
	p.completeLate()
	return a, err
}

func (p *lateProvider) completeLate() {
	p.fire.Do(func() { close(p.late) })
	<-p.lateDone
}

// TestResendAfter500NoNewKeyForA500OfThisRun: with --resend-after-500
// a run never sends an item that got Stripe's 500 again in that run ("no
// new key in this run", process.go): the late completion Stripe may still
// make has until a later run. Two runs sharing the checkpoint: the other
// one claims the item as soon as the first releases it and sends a new
// key at once, and the late completion makes a second refund.
func TestResendAfter500NoNewKeyForA500OfThisRun(t *testing.T) {
	plan := `{"batch":"b1","item":"i1","charge":"ch_sim0000001","amount":100}` + "\n"
	refunds := func(runs int) (int, int32) {
		url := pgtest.NewDB(t)
		sim := simtest.Start(t, stripesim.Config{Charges: stripesim.GenerateCharges(1, 1)})
		p := newLateProvider(stripe.New(sim.URL, "sk_test_x", 4))
		var wg sync.WaitGroup
		// Every worker starts before the 500: the batch's run.
		cps := make([]*Checkpoint, runs)
		for w := range runs {
			cps[w] = open(t, url, fmt.Sprintf("w%d", w), time.Minute)
		}
		for w := range runs {
			if w > 0 {
				<-p.looked // the first run holds the item
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				cp := cps[w]
				refund.Run(context.Background(), refund.Config{Provider: p, Checkpoint: cp, Workers: 1, ResendAfter500: true,
					OnResult: func(r refund.Result) { t.Logf("run %d: %s %s %s", w, r.Item, r.Status, r.Code) }}, strings.NewReader(plan), "plan")
			}()
		}
		wg.Wait()
		p.completeLate()
		return len(sim.Refunds()), p.keys.Load()
	}
	if n, keys := refunds(1); n != 1 || keys != 1 {
		t.Fatalf("one run: %d refunds, %d keys sent; want 1, 1", n, keys)
	}
	if n, keys := refunds(2); n != 1 {
		t.Errorf("two runs sharing the checkpoint: %d refunds of one item (%d keys sent within one batch's execution)", n, keys)
	}
}

// TestSameWorkerNameTwiceIsRefused: --worker given the same name on two hosts is
// accepted (Open: ON CONFLICT DO UPDATE, postgres.go:115). The second
// treats the first's live claims as its own: waitForOthers
// (claimed_by <> $3) tells it nothing is left while the first still works,
// and its Close marks the shared name stopped, so audit shows a live
// worker holding live claims as stopped.
func TestSameWorkerNameTwiceIsRefused(t *testing.T) {
	url := pgtest.NewDB(t)
	ctx := context.Background()
	a := open(t, url, "host", time.Minute)
	plan := planOf("b1", 1, 0)
	a.Load(ctx, plan)
	if got, _, err := a.Claim(ctx, 1, false); err != nil || len(got) != 1 {
		t.Fatalf("%+v %v", got, err)
	}
	b, err := Open(ctx, url, Options{Worker: "host", Lease: time.Minute}, false)
	if err != nil {
		t.Logf("a second live worker of the same name is refused: %v", err)
		return
	}
	b.Load(ctx, plan)
	if _, wait, err := b.Claim(ctx, 1, false); err == nil && wait == 0 {
		t.Errorf("a second worker named like a live one: told nothing is left (wait 0) while the first holds a live claim")
	}
	b.Close()
	_, _, workers, err := a.Holders(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range workers {
		if w.Worker == "host" && w.Stopped != nil && w.LiveLease > 0 {
			t.Errorf("worker %q shown stopped with %d live claims: the other process of that name still runs", w.Worker, w.LiveLease)
		}
	}
}
