package notes

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/refundkit/refundkit/refund/checkpoint/postgres/pgtest"
	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
)

func openPGStore(t *testing.T, url string, others bool) *PG {
	t.Helper()
	open := OpenPG
	if others {
		open = OpenPGOthers
	}
	p, err := open(context.Background(), url, [][]byte{testKey})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func execSQL(t *testing.T, url, sql string, args ...any) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatal(err)
	}
}

func TestPGAddDedupQueries(t *testing.T) {
	url := pgtest.NewDB(t)
	p := openPGStore(t, url, false)
	a, b, c := note(wire.EventRefund, "RF1", "PAY1"), note(wire.EventRefundFailed, "RF1", "PAY1"), note(wire.EventRefund, "RF2", "PAY2")
	mustAdd(t, p, a, true)
	mustAdd(t, p, a, false)
	mustAdd(t, p, b, true)
	mustAdd(t, p, c, true)
	unsigned := note(wire.EventRefund, "RF3", "PAY3")
	delete(unsigned.Item.AdditionalData, wire.SignatureField)
	var invalid *InvalidError
	if _, err := p.Add(ctx, unsigned); !errors.As(err, &invalid) {
		t.Fatalf("unsigned: %v", err)
	}
	check := func(s Store) {
		t.Helper()
		all, err := s.All(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := pspsOf(all); !slices.Equal(got, []string{"REFUND:RF1", "REFUND_FAILED:RF1", "REFUND:RF2"}) {
			t.Errorf("All: %v", got)
		}
		if !all[0].Received.Equal(a.Received) || !wire.Verify(&all[0].Item, testKey) || all[0].Item.Amount != a.Item.Amount {
			t.Errorf("a row read back: %+v", all[0])
		}
		rf1, err := s.ForRefund(ctx, "RF1")
		if err != nil || !slices.Equal(pspsOf(rf1), []string{"REFUND:RF1", "REFUND_FAILED:RF1"}) {
			t.Errorf("ForRefund RF1: %v, %v", pspsOf(rf1), err)
		}
		pay2, err := s.ForPayment(ctx, "PAY2")
		if err != nil || !slices.Equal(pspsOf(pay2), []string{"REFUND:RF2"}) {
			t.Errorf("ForPayment PAY2: %v, %v", pspsOf(pay2), err)
		}
	}
	check(p)
	p.Close()
	p2 := openPGStore(t, url, false) // migrated already: a second open migrates nothing
	mustAdd(t, p2, a, false)
	check(p2)

	// The others are a table of their own.
	o := openPGStore(t, url, true)
	auth := note(wire.EventAuthorisation, "PAY9", "")
	mustAdd(t, o, auth, true)
	mustAdd(t, o, auth, false)
	mustAdd(t, o, a, true) // not in the others' table yet
	if all, err := o.All(ctx); err != nil || !slices.Equal(pspsOf(all), []string{"AUTHORISATION:PAY9", "REFUND:RF1"}) {
		t.Errorf("others: %v, %v", pspsOf(all), err)
	}
	check(p2)
}

// TestPGTwoReceiversAddingOneNotification: receivers behind a load
// balancer get Adyen's retries of one notification at once: one row, one
// of them told added.
func TestPGTwoReceiversAddingOneNotification(t *testing.T) {
	url := pgtest.NewDB(t)
	stores := []*PG{openPGStore(t, url, false), openPGStore(t, url, false)}
	for round := range 5 {
		n := note(wire.EventRefund, "RF"+string(rune('A'+round)), "PAY1")
		var wg sync.WaitGroup
		var mu sync.Mutex
		added := 0
		start := make(chan struct{})
		for i := range 8 {
			wg.Go(func() {
				<-start
				ok, err := stores[i%2].Add(ctx, n)
				if err != nil {
					t.Error(err)
					return
				}
				// Committed before Add returned: the other store reads it.
				if got, err := stores[(i+1)%2].ForRefund(ctx, n.Item.PSPReference); err != nil || len(got) != 1 {
					t.Errorf("read back at once: %d, %v", len(got), err)
				}
				if ok {
					mu.Lock()
					added++
					mu.Unlock()
				}
			})
		}
		close(start)
		wg.Wait()
		if added != 1 {
			t.Errorf("round %d: added %d times", round, added)
		}
	}
	all, err := stores[0].All(ctx)
	if err != nil || len(all) != 5 {
		t.Fatalf("rows: %d, %v", len(all), err)
	}
}

// TestPGRefusesAnAlteredRow: a row changed in the database (its doc, or a
// column that files it under another refund) is refused naming its seq.
func TestPGRefusesAnAlteredRow(t *testing.T) {
	for _, tc := range []struct {
		name, sql, want string
	}{
		{"amount", `UPDATE refundkit.adyen_notifications SET doc = jsonb_set(doc, '{item,amount,value}', '1') WHERE psp_reference = 'RF2'`, "hmacSignature does not verify"},
		{"moved", `UPDATE refundkit.adyen_notifications SET psp_reference = 'RF1' WHERE psp_reference = 'RF2'`, `columns (psp_reference "RF1"`},
		{"version", `UPDATE refundkit.adyen_notifications SET doc = jsonb_set(doc, '{v}', '7') WHERE psp_reference = 'RF2'`, "unknown version v=7"},
		{"dedup key", `UPDATE refundkit.adyen_notifications SET dedup_key = 'x' WHERE psp_reference = 'RF2'`, `dedup_key "x"`},
		{"not a notification", `UPDATE refundkit.adyen_notifications SET doc = '[1]' WHERE psp_reference = 'RF2'`, "not a notification"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := pgtest.NewDB(t)
			p := openPGStore(t, url, false)
			mustAdd(t, p, note(wire.EventRefund, "RF1", "PAY1"), true)
			mustAdd(t, p, note(wire.EventRefund, "RF2", "PAY1"), true)
			execSQL(t, url, tc.sql)
			_, err := p.ForPayment(ctx, "PAY1")
			var corrupt *CorruptError
			if !errors.As(err, &corrupt) || corrupt.Line != 2 {
				t.Fatalf("%v, want *CorruptError at seq 2", err)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "refundkit.adyen_notifications:2: ") || !strings.Contains(msg, tc.want) {
				t.Errorf("%q, want %q", msg, tc.want)
			}
			if _, err := p.All(ctx); !errors.As(err, &corrupt) {
				t.Errorf("All: %v", err)
			}
		})
	}
}

func TestPGURLErrorsHoldNoPassword(t *testing.T) {
	_, err := OpenPG(ctx, "postgres://u:s3cret@127.0.0.1:1/db?connect_timeout=1", [][]byte{testKey})
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("%v", err)
	}
	_, err = OpenPG(ctx, "postgres://u:s3cret@127.0.0.1:notaport/db", [][]byte{testKey})
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("%v", err)
	}
}
