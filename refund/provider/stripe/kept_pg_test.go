package stripe

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/checkpoint/postgres/pgtest"
	"github.com/refundkit/refundkit/refund/provider/events"
	"github.com/refundkit/refundkit/refund/provider/events/pgstore"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func keptEvent(t *testing.T, id, typ, status string, created int64, secret string) Kept {
	t.Helper()
	body := refundEvent(id, typ, status, created, 500)
	return Kept{V: KeptVersion, Received: time.Now().UTC(), Signature: sign(body, secret, time.Now()), Payload: string(body)}
}

// Stripe's events kept in the PostgreSQL checkpoint's database: two
// receivers behind one balancer keep a retry once, every reader verifies
// each row again, and a row changed in the table is refused.
func TestEventsPGKeepsOnceAndVerifiesOnRead(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDB(t)
	const secret = "whsec_pg_test"
	open := func() *pgstore.Store[Kept] {
		p, err := pgstore.Open(ctx, url, Codec([]string{secret}), EventsTable)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	a, b := open(), open()
	created, updated := keptEvent(t, "evt_1", "refund.created", "pending", 1, secret), keptEvent(t, "evt_2", "refund.updated", "succeeded", 2, secret)

	// The same event at both receivers at once: one row.
	var wg sync.WaitGroup
	var mu sync.Mutex
	added := 0
	for _, p := range []*pgstore.Store[Kept]{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := p.Add(ctx, updated)
			if err != nil {
				t.Error(err)
			}
			if ok {
				mu.Lock()
				added++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if added != 1 {
		t.Fatalf("%d receivers added evt_2, want 1", added)
	}
	if ok, err := b.Add(ctx, created); !ok || err != nil {
		t.Fatalf("Add evt_1: %v %v", ok, err)
	}
	forged := keptEvent(t, "evt_3", "refund.failed", "failed", 3, "whsec_not_it")
	var invalid *events.InvalidError
	if _, err := a.Add(ctx, forged); !errors.As(err, &invalid) {
		t.Fatalf("a forged event: %v, want *InvalidError", err)
	}

	got, ok, err := (&Telling{Events: a}).Told(ctx, "re_1")
	if err != nil || !ok || got.Status != refund.RefundSucceeded || got.Amount != 500 {
		t.Fatalf("Told re_1: %+v %v %v", got, ok, err)
	}
	all, err := (&Telling{Events: b}).AllTold(ctx)
	if err != nil || len(all) != 1 || all[0].ID != "re_1" {
		t.Fatalf("AllTold: %+v %v", all, err)
	}

	// A row edited in the table verifies no more: named by its seq.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `UPDATE refundkit.stripe_events SET doc = jsonb_set(doc, '{payload}', to_jsonb(replace(doc->>'payload', '"succeeded"', '"failed"'))) WHERE dedup_key = 'evt_2'`); err != nil {
		t.Fatal(err)
	}
	var corrupt *events.CorruptError
	if _, _, err := (&Telling{Events: a}).Told(ctx, "re_1"); !errors.As(err, &corrupt) || corrupt.Where != "refundkit.stripe_events" {
		t.Fatalf("Told over an edited row: %v, want a *CorruptError of refundkit.stripe_events", err)
	}
}
