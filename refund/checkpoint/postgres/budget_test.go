package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/refundkit/refundkit/refund/checkpoint/postgres/pgtest"
)

// counts is what a budget told its worker, in order.
type counts chan int

func (ch counts) apply(n int) { ch <- n }

// await waits for the count n; deadline is a failure timeout, never a
// synchronisation.
func (ch counts) await(t *testing.T, who string, n int) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case got := <-ch:
			if got == n {
				return
			}
		case <-deadline:
			t.Fatalf("%s was never told of %d live workers", who, n)
		}
	}
}

func share(t *testing.T, c *Checkpoint, account string) (*Budget, counts) {
	t.Helper()
	ch := make(counts, 100)
	b, err := c.ShareBudget(context.Background(), account, 0.8, ch.apply)
	if err != nil {
		t.Fatal(err)
	}
	return b, ch
}

// The live workers of one account split its budget: a worker that joins
// or ends is counted at once (they notify), one whose last_seen went
// stale (it died) within the poll, and another account's workers are
// apart.
func TestBudgetCountsTheAccountsLiveWorkers(t *testing.T) {
	url := pgtest.NewDB(t)
	const lease = 3 * time.Second
	a := open(t, url, "A", lease)
	ba, cha := share(t, a, "stripe test acct1")
	if n := ba.Workers(); n != 1 {
		t.Fatalf("alone: %d workers, want 1", n)
	}
	cha.await(t, "A alone", 1)
	b := open(t, url, "B", lease)
	bb, _ := share(t, b, "stripe test acct1")
	if n := bb.Workers(); n != 2 {
		t.Fatalf("B joining A: B counts %d, want 2", n)
	}
	cha.await(t, "A after B joined", 2)
	c := open(t, url, "C", lease)
	_, chc := share(t, c, "stripe test acct1")
	chc.await(t, "C", 3)
	cha.await(t, "A after C joined", 3)
	other := open(t, url, "D", lease)
	bd, _ := share(t, other, "stripe live acct2")
	if n := bd.Workers(); n != 1 {
		t.Fatalf("another account's worker counts %d, want 1", n)
	}

	// Its part in the checkpoint, for the operator.
	var part float64
	if err := a.pool.QueryRow(context.Background(), `SELECT budget_share FROM refundkit.workers WHERE worker = 'A'`).Scan(&part); err != nil {
		t.Fatal(err)
	}
	if part < 0.266 || part > 0.267 {
		t.Fatalf("A's budget_share %v, want 0.8/3", part)
	}

	c.Close()
	cha.await(t, "A after C ended", 2)

	// A worker that dies leaves its row as it was: it stops being counted
	// once its last_seen is older than two thirds of its lease.
	ghost := func(seen string) {
		t.Helper()
		if _, err := a.pool.Exec(context.Background(), `INSERT INTO refundkit.workers (worker, host, pid, account, lease, last_seen)
			VALUES ('ghost', 'h', 1, 'stripe test acct1', '3s', clock_timestamp() - $1::interval)
			ON CONFLICT (worker) DO UPDATE SET last_seen = EXCLUDED.last_seen`, seen); err != nil {
			t.Fatal(err)
		}
	}
	ghost("0s")
	cha.await(t, "A after a fourth worker appeared", 3)
	ghost("2500ms") // older than 2/3 of its 3s lease
	cha.await(t, "A after that worker died", 2)

	// A name taken again by a run without a budget is not counted under
	// its predecessor's account.
	b.Close()
	cha.await(t, "A after B ended", 1)
	b2 := open(t, url, "B", lease)
	var account *string
	if err := b2.pool.QueryRow(context.Background(), `SELECT account FROM refundkit.workers WHERE worker = 'B'`).Scan(&account); err != nil {
		t.Fatal(err)
	}
	if account != nil {
		t.Fatalf("B registered again keeps account %q", *account)
	}
}

// A budget needs a registered worker: a read-only checkpoint has none.
func TestBudgetRefusedReadOnly(t *testing.T) {
	url := pgtest.NewDB(t)
	open(t, url, "A", time.Second) // the schema
	r, err := Open(context.Background(), url, Options{Worker: "R"}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.ShareBudget(context.Background(), "x", 0.8, func(int) {}); err == nil {
		t.Fatal("a budget on a read-only checkpoint: want an error")
	}
}

// BenchmarkBudgetCount is one count of an account's live workers, what a
// worker asks every sixth of a lease (and on a NOTIFY): the cost of a part
// per live worker, beside BenchmarkBudgetTokenFromTable.
func BenchmarkBudgetCount(b *testing.B) {
	url := pgtest.NewDB(b)
	c, err := Open(context.Background(), url, Options{Worker: "A", Lease: 30 * time.Second}, false)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if _, err := c.ShareBudget(context.Background(), "stripe test bench", 0.8, func(int) {}); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		var n int
		if err := c.pool.QueryRow(ctx, liveWorkersSQL, "stripe test bench", c.Worker, c.Lease().String()).Scan(&n); err != nil || n != 1 {
			b.Fatal(n, err)
		}
	}
}

// BenchmarkBudgetTokenFromTable is one token taken from a bucket the
// database keeps (a GCRA row: the theoretical arrival time pushed on by
// one request's interval, unlogged, without waiting for a durable
// commit): what the other design pays per request, or per batch of
// tokens. Not used by refundkit: measured for docs/design.md.
func BenchmarkBudgetTokenFromTable(b *testing.B) {
	url := pgtest.NewDB(b)
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		b.Fatal(err)
	}
	cfg.RuntimeParams["synchronous_commit"] = "off"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE UNLOGGED TABLE bench_bucket (account text PRIMARY KEY, tat timestamptz NOT NULL);
		INSERT INTO bench_bucket VALUES ('stripe test bench', clock_timestamp())`); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		var wait time.Duration
		if err := conn.QueryRow(ctx, `UPDATE bench_bucket SET tat = greatest(tat, clock_timestamp()) + interval '10 ms'
			WHERE account = $1 RETURNING greatest(tat - interval '10 ms' - clock_timestamp(), interval '0')`, "stripe test bench").Scan(&wait); err != nil {
			b.Fatal(err)
		}
	}
}

// A worker that holds no claim for a while (its items are done, and it
// waits for the others') gives its part to the others, and takes it back
// when it claims again; one that has not claimed yet keeps its part.
func TestBudgetIdleWorkerGivesItsPart(t *testing.T) {
	url := pgtest.NewDB(t)
	const lease = 3 * time.Second
	a := open(t, url, "A", lease)
	_, cha := share(t, a, "stripe test acct1")
	b := open(t, url, "B", lease)
	_, chb := share(t, b, "stripe test acct1")
	cha.await(t, "A after B joined", 2)
	ctx := context.Background()
	if err := b.Load(ctx, planOf("B1", 3, 100)); err != nil {
		t.Fatal(err)
	}
	got, _, err := b.Claim(ctx, 1, false)
	if err != nil || len(got) != 1 {
		t.Fatalf("claim: %v, %v", got, err)
	}
	// B holds a claim: both count 2 still. It gives the item back and,
	// holding none, gives its part too.
	if err := b.Release(ctx, got[0].Batch, got[0].Item); err != nil {
		t.Fatal(err)
	}
	cha.await(t, "A after B went idle", 1)
	var part float64
	if err := a.pool.QueryRow(ctx, `SELECT budget_share FROM refundkit.workers WHERE worker = 'B'`).Scan(&part); err != nil || part != 0 {
		t.Fatalf("B idle: budget_share %v (%v), want 0", part, err)
	}
	got, _, err = b.Claim(ctx, 1, false)
	if err != nil || len(got) != 1 {
		t.Fatalf("claim again: %v, %v", got, err)
	}
	cha.await(t, "A after B claimed again", 2)
	select {
	case n := <-chb:
		t.Logf("B was told %d", n)
	default:
	}
}
