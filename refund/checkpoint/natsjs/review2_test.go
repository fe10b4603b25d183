package natsjs

// Regression tests of a hostile review of the checkpoint's claims, locks,
// presences and tally (each comment says the defect it found; each holds
// now). Helpers from review_test.go and lock_test.go.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund"
)

// A worker that gave back many items (a provider outage: every look-up
// failed) and is alone with them must end (wait 0), not spin inside one
// Claim: each left item is Nak'd with a delay of pollWait (<= 250 ms), and
// the claim loop asks again while a full batch came back with nothing
// taken: once cycling through the left items takes longer than that delay,
// a fetch is never short and Claim never returns.
func TestReviewManyLeftItemsSpinClaim(t *testing.T) {
	srv := reviewServer(t, false)
	c := reviewOpen(t, srv.URL("spin"), 30*time.Second, "w")
	const n = 3000
	if err := c.Load(context.Background(), reviewPlan("B", n, func(i int) string { return fmt.Sprintf("ch_%d", i) })); err != nil {
		t.Fatal(err)
	}
	var got []refund.Claimed
	for len(got) < n {
		cl, _, err := c.Claim(context.Background(), 500, false)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, cl...)
	}
	for _, cl := range got {
		if err := c.Release(context.Background(), "B", cl.Item); err != nil {
			t.Fatal(err)
		}
	}
	// -j 1: one free slot. A spin never returns: the test binary's own
	// deadline bounds it, not a wall-clock guess a busy machine overruns.
	ctx, cancel := context.WithCancel(context.Background())
	if d, ok := t.Deadline(); ok {
		ctx, cancel = context.WithDeadline(context.Background(), d.Add(-30*time.Second))
	}
	defer cancel()
	start := time.Now()
	for {
		cl, wait, err := c.Claim(ctx, 1, false)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
				t.Fatalf("one Claim did not return within %s (it spins over the %d items it left): %v", time.Since(start).Round(time.Second), n, err)
			}
			t.Fatal(err)
		}
		if len(cl) != 0 {
			t.Fatalf("claimed %v, which it gave back", cl)
		}
		if wait == 0 {
			t.Logf("ended after %s", time.Since(start).Round(time.Millisecond))
			return
		}
		time.Sleep(wait)
	}
}

// The presence stream lives in memory: a single server's restart (kill -9
// or not) loses it, and a worker at its batch's end that gave an item back
// asks it which workers are alive.
func TestReviewPresenceAfterServerRestart(t *testing.T) {
	srv := reviewServer(t, false)
	c := reviewOpen(t, srv.URL("pres"), 3*time.Second, "w")
	if err := c.Load(context.Background(), reviewPlan("B", 2, func(i int) string { return fmt.Sprintf("ch_%d", i) })); err != nil {
		t.Fatal(err)
	}
	got, _, err := c.Claim(context.Background(), 2, false)
	if err != nil || len(got) != 2 {
		t.Fatalf("claim: %v %v", got, err)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// a look-up failed meanwhile: both items given back (retry until the
	// client has reconnected).
	for _, cl := range got {
		for try := 0; ; try++ {
			err := c.Release(context.Background(), "B", cl.Item)
			if err == nil {
				break
			}
			if try > 100 {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		cl, wait, err := c.Claim(context.Background(), 2, false)
		if err != nil {
			if time.Now().After(deadline) {
				t.Fatalf("after a server restart, Claim still fails: %v", err)
			}
			t.Logf("claim: %v", err)
			time.Sleep(time.Second)
			continue
		}
		if len(cl) != 0 {
			t.Fatalf("claimed %v", cl)
		}
		if wait == 0 {
			return
		}
		time.Sleep(wait)
	}
}

// Progress waits, with no deadline of its own, until its watch has seen
// the latest write of the batch's items; the watch ignores deletes. An item
// key deleted by hand (nats kv del) as the last write makes the run's final
// tally (refund.go: Progress(context.WithoutCancel(ctx))) wait for ever.
func TestReviewTallyAfterDeletedItem(t *testing.T) {
	srv := reviewServer(t, false)
	c := reviewOpen(t, srv.URL("del"), 5*time.Second, "w")
	plan := reviewPlan("B", 2, func(i int) string { return fmt.Sprintf("ch_%d", i) })
	if err := c.Load(context.Background(), plan); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Progress(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.kv.Delete(context.Background(), itemKey("B", plan[1].Item.Item)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Progress(ctx); err != nil {
		t.Fatalf("Progress after an item's key was deleted: %v", err)
	}
}

// The tally's watch after a server kill -9 and restart: the final tally
// must still come.
func TestReviewTallyAfterServerRestart(t *testing.T) {
	srv := reviewServer(t, false)
	c := reviewOpen(t, srv.URL("tr"), 3*time.Second, "w")
	plan := reviewPlan("B", 2, func(i int) string { return fmt.Sprintf("ch_%d", i) })
	if err := c.Load(context.Background(), plan); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Progress(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, _, err := c.Claim(context.Background(), 1, false)
	if err != nil || len(got) != 1 {
		t.Fatalf("claim: %v %v", got, err)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	for try := 0; ; try++ {
		err := c.Append(intent("B", got[0].Item, got[0].Item))
		if err == nil {
			break
		}
		if try > 100 {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bs, err := c.Progress(ctx)
	if err != nil {
		t.Fatalf("Progress after a server restart: %v", err)
	}
	t.Logf("%+v", bs)
}

// A holder whose one renewal's flush timed out (a network blip longer than
// a third of a lease) is past its deadline by its own clock: renew still
// sends its +WPI (the server keeps the message its), but beats its lock no
// more until the engine next asks Holds, which it does only before a
// request. A holder inside one long provider call (slower than a lease) is
// then fenced while alive, and its outcome cannot be written: exit 3 for a
// worker that did nothing wrong.
func TestReviewLiveHolderInLongCallFencedAfterOneFailedRenewal(t *testing.T) {
	srv := reviewServer(t, false)
	const lease = 2 * time.Second
	holder, waiter, x, y := lockedPair(t, srv.URL("blip"), lease)
	if err := holder.Append(intent("B", x.Item, "ch_same")); err != nil {
		t.Fatal(err)
	}
	// The blip: one renewal's flush failed, its deadline passed.
	holder.Mu.Lock()
	holder.Held[key{Batch: "B", Item: x.Item}].Deadline = time.Now().Add(-time.Millisecond)
	holder.Mu.Unlock()
	// The holder is in its provider call (no Holds) for 3 leases; the
	// network is fine again and renewLoop runs.
	ctx, cancel := context.WithTimeout(context.Background(), 3*lease)
	defer cancel()
	unlock, err := waiter.LockPayments(ctx, "B", y.Item, []string{"ch_same"})
	if err == nil {
		unlock()
		t.Errorf("the waiter took the lock of a live holder (its renewals reached the server all along)")
	}
	if !errors.Is(err, context.DeadlineExceeded) && err != nil {
		t.Fatal(err)
	}
	var lost *refund.LostClaimError
	if err := holder.Append(intent("B", x.Item, "ch_same")); errors.As(err, &lost) {
		t.Errorf("the live holder's outcome cannot be written: %v", err)
	}
}
