package postgres

// Written by a second review of the shared checkpoint (after 08968ab),
// each failing on the defect its comment describes (as found); they now
// guard the fixes: payment locks belong to the item's claim, not to the
// worker's name.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund/checkpoint/postgres/pgtest"
)

// TestFailedUnlockDoesNotHoldThePaymentForever: unlock's DELETE failing
// (the database restarting, a lock_timeout) "only leaves the locks to run
// out with their lease" (claims.go LockPayments), but renew renews every
// payment lock of the worker (claims.go renew: WHERE worker = $1), released
// items' too. The payment stays locked while that worker lives: another
// item of the payment waits in LockPayments for ever, and the worker that
// leaked the lock waits (waitForOthers) for that item: neither ends.
func TestFailedUnlockDoesNotHoldThePaymentForever(t *testing.T) {
	url := pgtest.NewDB(t)
	ctx := context.Background()
	const lease = 2 * time.Second
	a := open(t, url, "a", lease)
	plan := planOf("b1", 2, 0)
	plan[1].Item.Charge = plan[0].Item.Charge // two items of one payment
	if err := a.Load(ctx, plan); err != nil {
		t.Fatal(err)
	}
	if got, _, err := a.Claim(ctx, 1, false); err != nil || len(got) != 1 || got[0].Item != "i1" {
		t.Fatalf("%+v %v", got, err)
	}
	pay := []string{plan[0].Item.Charge}
	unlock, err := a.LockPayments(ctx, "b1", "i1", pay)
	if err != nil {
		t.Fatal(err)
	}
	// i1 is refunded, then its unlock fails: its row is locked past
	// lock_timeout.
	if err := a.Append(intent(plan[0].Item, 1), refunded(plan[0].Item, "re_1")); err != nil {
		t.Fatal(err)
	}
	tx, err := a.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM refundkit.payment_locks FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	unlock()
	tx.Rollback(ctx)
	if err := a.Release(ctx, "b1", "i1"); err != nil {
		t.Fatal(err)
	}

	b := open(t, url, "b", lease)
	if err := b.Load(ctx, plan); err != nil {
		t.Fatal(err)
	}
	if got, _, err := b.Claim(ctx, 1, false); err != nil || len(got) != 1 || got[0].Item != "i2" {
		t.Fatalf("%+v %v", got, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 3*lease)
	defer cancel()
	if unlockB, err := b.LockPayments(wctx, "b1", "i2", pay); err != nil {
		var holder string
		a.pool.QueryRow(ctx, `SELECT worker || ' for ' || item || ', lease ' || (lease_until - clock_timestamp())::text FROM refundkit.payment_locks`).Scan(&holder)
		t.Errorf("another item of the payment still waits 3 leases after the item that locked it was released (the lock is %s): %v", holder, err)
	} else {
		unlockB()
	}
	// And a, done with its items, waits for b's: both wait for ever.
	_, wait, err := a.Claim(ctx, 1, false)
	t.Logf("a, done with its items, is told to wait %v (%v) for b's item", wait, err)
}

// TestStaleWorkerOfTheSameNameKeepsTheLiveOnesPaymentLocks: a worker
// paused past its lease lets a new process take its --worker name (Open).
// When the paused one resumes and ends, its Close deletes every payment
// lock of the name (postgres.go close: DELETE ... WHERE worker = $1),
// the live process's too, while its claim is live and Holds passes: another
// worker's item of the same payment takes the lock, and both items are
// looked up and sent at once.
func TestStaleWorkerOfTheSameNameKeepsTheLiveOnesPaymentLocks(t *testing.T) {
	url := pgtest.NewDB(t)
	ctx := context.Background()
	old := open(t, url, "w", time.Minute)
	// Paused past its lease: no renewals, last seen long ago.
	old.StopRenewing()
	if _, err := old.pool.Exec(ctx, `UPDATE refundkit.workers SET last_seen = clock_timestamp() - interval '1 hour' WHERE worker = 'w'`); err != nil {
		t.Fatal(err)
	}
	live := open(t, url, "w", time.Minute)
	plan := planOf("b1", 2, 0)
	plan[1].Item.Charge = plan[0].Item.Charge
	if err := live.Load(ctx, plan); err != nil {
		t.Fatal(err)
	}
	if got, _, err := live.Claim(ctx, 1, false); err != nil || len(got) != 1 {
		t.Fatalf("%+v %v", got, err)
	}
	pay := []string{plan[0].Item.Charge}
	if _, err := live.LockPayments(ctx, "b1", "i1", pay); err != nil {
		t.Fatal(err)
	}
	old.Close() // resumed, it ends

	b := open(t, url, "b", time.Minute)
	if err := b.Load(ctx, plan); err != nil {
		t.Fatal(err)
	}
	if got, _, err := b.Claim(ctx, 1, false); err != nil || len(got) != 1 {
		t.Fatalf("%+v %v", got, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := b.LockPayments(wctx, "b1", "i2", pay)
	if err == nil && live.Holds(ctx, "b1", "i1") == nil {
		t.Errorf("b took the payment lock of i2 while the live worker w holds i1 of the same payment (Holds passes): an older process named w deleted w's locks when it closed")
	} else if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
}
