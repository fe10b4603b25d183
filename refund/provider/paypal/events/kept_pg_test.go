package events

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/checkpoint/postgres/pgtest"
	store "github.com/refundkit/refundkit/refund/provider/events"
	"github.com/refundkit/refundkit/refund/provider/events/pgstore"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// PayPal's events kept in the PostgreSQL checkpoint's database: two
// receivers behind one balancer keep a retry once, every reader verifies
// each row again (a forged one is never stored), and a row changed in the
// table is refused.
func TestEventsPGKeepsOnceAndVerifiesOnRead(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDB(t)
	rig, c, v := setup(t)
	codec, err := Codec(v)
	if err != nil {
		t.Fatal(err)
	}
	open := func() *pgstore.Store[Kept] {
		p, err := pgstore.Open(ctx, url, codec, EventsTable)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	a, b := open(), open()
	s := signer(c, rig.url("CERT-1"))
	kept := func(body []byte, tid string, sg interface {
		Sign([]byte, string, string, time.Time) Headers
	}) Kept {
		return Kept{V: KeptVersion, Received: now, Headers: sg.Sign(body, webhookID, tid, now), Payload: string(body)}
	}
	pending := kept(refundEvent("WH-1", "PAYMENT.REFUND.PENDING", "PENDING", 1, now.Add(-2*time.Minute)), "T-1", s)
	done := kept(refundEvent("WH-2", "PAYMENT.CAPTURE.REFUNDED", "COMPLETED", 1, now.Add(-time.Minute)), "T-2", s)

	// The same event at both receivers at once: one row.
	var wg sync.WaitGroup
	var mu sync.Mutex
	added := 0
	for _, p := range []*pgstore.Store[Kept]{a, b, a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := p.Add(ctx, done)
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
		t.Fatalf("%d receivers added WH-2, want 1", added)
	}
	if ok, err := b.Add(ctx, pending); !ok || err != nil {
		t.Fatalf("Add WH-1: %v %v", ok, err)
	}
	other := mustCerts(t, now.Add(-time.Hour), now.Add(24*time.Hour)) // its own root, not trusted
	forged := kept(refundEvent("WH-3", "PAYMENT.REFUND.FAILED", "FAILED", 1, now), "T-3", signer(other, rig.url("CERT-1")))
	var invalid *store.InvalidError
	if _, err := a.Add(ctx, forged); !errors.As(err, &invalid) {
		t.Fatalf("a forged event: %v, want *InvalidError", err)
	}

	got, ok, err := (&Telling{Events: a}).Told(ctx, "REF-1")
	if err != nil || !ok || got.Status != refund.RefundSucceeded || got.Amount != 500 || got.Capture != "CAP-1" {
		t.Fatalf("Told REF-1: %+v %v %v", got, ok, err)
	}
	all, err := (&Telling{Events: b}).AllTold(ctx)
	if err != nil || len(all) != 1 || all[0].ID != "REF-1" || all[0].Status != refund.RefundSucceeded {
		t.Fatalf("AllTold: %+v %v", all, err)
	}

	// A row edited in the table verifies no more: named by its seq.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `UPDATE refundkit.paypal_events SET doc = jsonb_set(doc, '{payload}', to_jsonb(replace(doc->>'payload', '"COMPLETED"', '"FAILED"'))) WHERE dedup_key = 'WH-2'`); err != nil {
		t.Fatal(err)
	}
	var corrupt *store.CorruptError
	if _, _, err := (&Telling{Events: a}).Told(ctx, "REF-1"); !errors.As(err, &corrupt) || corrupt.Where != "refundkit.paypal_events" {
		t.Fatalf("Told over an edited row: %v, want a *CorruptError of refundkit.paypal_events", err)
	}
}
