package natsjs

// Payment locks and items given back, against a real nats-server
// (natstest): a lock must never stand for a dead claim, nor be taken from
// a live one; a run that gave an item back must not take it from a rerun.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
)

// helpers (reviewServer, reviewOpen, reviewPlan, intent) are in review_test.go

// kill makes c a worker killed -9: no renewal, no Nak, no release.
func kill(c *Checkpoint) {
	pause(c)
	c.nc.Close()
}

// pause makes c a worker SIGSTOPped: its connection stays, its renewals
// stop, and what it does next it does after the pause.
func pause(c *Checkpoint) {
	c.Pause()
}

// lockedPair is two items of one charge, the first claimed by holder with
// its payment's lock taken, the second claimed by waiter.
func lockedPair(t *testing.T, url string, lease time.Duration) (holder, waiter *Checkpoint, x, y refund.Claimed) {
	t.Helper()
	plan := reviewPlan("B", 2, func(int) string { return "ch_same" })
	holder = reviewOpen(t, url, lease, "holder")
	if err := holder.Load(context.Background(), plan); err != nil {
		t.Fatal(err)
	}
	got, _, err := holder.Claim(context.Background(), 1, false)
	if err != nil || len(got) != 1 {
		t.Fatalf("claim: %v %v", got, err)
	}
	if _, err := holder.LockPayments(context.Background(), "B", got[0].Item, []string{"ch_same"}); err != nil {
		t.Fatal(err)
	}
	waiter = reviewOpen(t, url, lease, "waiter")
	if err := waiter.Load(context.Background(), plan); err != nil {
		t.Fatal(err)
	}
	var other []refund.Claimed
	for len(other) == 0 {
		if other, _, err = waiter.Claim(context.Background(), 1, false); err != nil {
			t.Fatal(err)
		}
	}
	return holder, waiter, got[0], other[0]
}

// A live holder keeps its payment's lock however long its item takes: its
// beats tell the waiter it is alive.
func TestLockOfLiveHolderIsNotTaken(t *testing.T) {
	srv := reviewServer(t, false)
	const lease = 2 * time.Second
	holder, waiter, x, y := lockedPair(t, srv.URL("live"), lease)
	ctx, cancel := context.WithTimeout(context.Background(), 4*lease)
	defer cancel()
	if _, err := waiter.LockPayments(ctx, "B", y.Item, []string{"ch_same"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the lock of a live holder was taken (or the wait failed) after %s: %v", 4*lease, err)
	}
	// and the holder still writes for its item.
	if err := holder.Append(intent("B", x.Item, "ch_same")); err != nil {
		t.Fatalf("the live holder was fenced: %v", err)
	}
}

// A holder paused past its lease has its claim ended by the waiter that
// takes the lock: after the pause it can write nothing for its item, an
// intent included, so it sends nothing.
func TestLockOfPausedHolderFencesIt(t *testing.T) {
	srv := reviewServer(t, false)
	const lease = time.Second
	holder, waiter, x, y := lockedPair(t, srv.URL("paused"), lease)
	pause(holder)
	ctx, cancel := context.WithTimeout(context.Background(), 20*lease)
	defer cancel()
	unlock, err := waiter.LockPayments(ctx, "B", y.Item, []string{"ch_same"})
	if err != nil {
		t.Fatalf("the lock of a holder paused for %s is never free: %v", 20*lease, err)
	}
	defer unlock()
	var lost *refund.LostClaimError
	if err := holder.Append(intent("B", x.Item, "ch_same")); !errors.As(err, &lost) {
		t.Fatalf("the paused holder wrote an intent after its claim was ended: %v", err)
	}
	info, ok, err := waiter.Inspect(context.Background(), "B", x.Item)
	if err != nil || !ok || !info.Released {
		t.Fatalf("the fenced item is not marked given back: %+v %v %v", info, ok, err)
	}
}

// An item of a payment whose lock is held by an item of a worker that died
// gets the lock once the dead claim's ack-wait has run out, even when the
// waiting worker has no free slot to claim the dead item itself.
func TestReviewPaymentLockOfDeadWorker(t *testing.T) {
	srv := reviewServer(t, false)
	url := srv.URL("lock")
	const lease = time.Second
	plan := reviewPlan("B", 2, func(int) string { return "ch_same" })
	dead := reviewOpen(t, url, lease, "dead")
	if err := dead.Load(context.Background(), plan); err != nil {
		t.Fatal(err)
	}
	x, _, err := dead.Claim(context.Background(), 1, false)
	if err != nil || len(x) != 1 {
		t.Fatalf("claim: %v %v", x, err)
	}
	if _, err := dead.LockPayments(context.Background(), "B", x[0].Item, []string{"ch_same"}); err != nil {
		t.Fatal(err)
	}
	kill(dead)

	live := reviewOpen(t, url, lease, "live")
	if err := live.Load(context.Background(), plan); err != nil {
		t.Fatal(err)
	}
	var y []refund.Claimed
	for len(y) == 0 { // the other item, pending
		y, _, err = live.Claim(context.Background(), 1, false)
		if err != nil {
			t.Fatal(err)
		}
	}
	if y[0].Item == x[0].Item {
		t.Fatalf("the dead worker's item was claimed first")
	}
	// A worker with one slot (-j 1), busy with y: it claims nothing more
	// until y is done. Twenty leases is far past the dead claim's end.
	ctx, cancel := context.WithTimeout(context.Background(), 20*lease)
	defer cancel()
	unlock, err := live.LockPayments(ctx, "B", y[0].Item, []string{"ch_same"})
	if err != nil {
		t.Fatalf("the payment's lock, held by a worker dead for %s, is never free: %v", 20*lease, err)
	}
	unlock()
}

// A worker that gave an item back unsettled leaves it to the next run: a
// run started since re-queues it, and the worker that gave it back does
// not take that message away from it.
func TestReviewReleasedItemRequeuedByRerun(t *testing.T) {
	srv := reviewServer(t, false)
	url := srv.URL("rerun")
	plan := reviewPlan("B", 2, func(i int) string { return fmt.Sprintf("ch_%d", i) })
	old := reviewOpen(t, url, 5*time.Second, "old")
	if err := old.Load(context.Background(), plan); err != nil {
		t.Fatal(err)
	}
	got, _, err := old.Claim(context.Background(), 2, false)
	if err != nil || len(got) != 2 {
		t.Fatalf("claim: %v %v", got, err)
	}
	x := got[0]
	if err := old.Append(intent("B", x.Item, "ch_0")); err != nil {
		t.Fatal(err)
	}
	if err := old.Release(context.Background(), "B", x.Item); err != nil { // in doubt: given back
		t.Fatal(err)
	}
	// A second run starts while the old one still works on the other item.
	rerun := reviewOpen(t, url, 5*time.Second, "rerun")
	if err := rerun.Load(context.Background(), plan); err != nil {
		t.Fatal(err)
	}
	// The old run asks for more work first.
	if more, _, err := old.Claim(context.Background(), 1, false); err != nil || len(more) != 0 {
		t.Fatalf("old run claimed again: %v %v", more, err)
	}
	// and ends: its other item given back too.
	if err := old.Release(context.Background(), "B", got[1].Item); err != nil {
		t.Fatal(err)
	}
	var taken []refund.Claimed
	for !slices.ContainsFunc(taken, func(cl refund.Claimed) bool { return cl.Item == x.Item }) {
		cl, wait, err := rerun.Claim(context.Background(), 1, false)
		if err != nil {
			t.Fatal(err)
		}
		taken = append(taken, cl...)
		if len(cl) == 0 && wait == 0 {
			t.Fatalf("the rerun ended (wait 0) without the item in doubt it queued again (%v): the old run ended its message", taken)
		}
		time.Sleep(wait)
	}
}

// A held item queued again by a worker with --allow-refunded-charges is
// that worker's to retry: a worker of the batch without the flag neither
// acknowledges its message (the retry would be lost) nor waits for it for
// ever.
func TestHeldItemQueuedForRetryIsLeftToAWorkerWithTheFlag(t *testing.T) {
	srv := reviewServer(t, false)
	url := srv.URL("held")
	plan := reviewPlan("B", 1, func(int) string { return "ch_held" })
	first := reviewOpen(t, url, 5*time.Second, "first")
	if err := first.Load(context.Background(), plan); err != nil {
		t.Fatal(err)
	}
	got, _, err := first.Claim(context.Background(), 1, false)
	if err != nil || len(got) != 1 {
		t.Fatalf("claim: %v %v", got, err)
	}
	held := &journal.Record{V: journal.Version, Type: journal.TypeFailed, Time: time.Now().UTC(), Batch: "B", Item: got[0].Item,
		Charge: "ch_held", Attempt: 1, Code: refund.CodeRefundedByOtherBatch, Final: true, Message: "held"}
	if err := first.Append(intent("B", got[0].Item, "ch_held"), held); err != nil {
		t.Fatal(err)
	}
	if err := first.Release(context.Background(), "B", got[0].Item); err != nil {
		t.Fatal(err)
	}

	without := reviewOpen(t, url, 5*time.Second, "without")
	if err := without.Load(context.Background(), plan); err != nil {
		t.Fatal(err)
	}
	with, err := Open(context.Background(), url, Options{Lease: 5 * time.Second, Worker: "with", RetryHeld: true}, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { with.Close() })
	if err := with.Load(context.Background(), plan); err != nil {
		t.Fatal(err)
	}
	// The worker without the flag is delivered the item first: it leaves
	// it, and ends (it waits for no worker to retry a held item, as with
	// PostgreSQL).
	for {
		cl, wait, err := without.Claim(context.Background(), 1, false)
		if err != nil || len(cl) != 0 {
			t.Fatalf("a worker without --allow-refunded-charges claimed a held item: %v %v", cl, err)
		}
		if wait == 0 {
			break
		}
		time.Sleep(wait)
	}
	var taken []refund.Claimed
	for len(taken) == 0 {
		cl, wait, err := with.Claim(context.Background(), 1, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(cl) == 0 && wait == 0 {
			t.Fatal("the worker with --allow-refunded-charges ended without the held item it queued: its message was acknowledged by a worker without the flag")
		}
		taken = cl
		time.Sleep(wait)
	}
	if taken[0].Item != got[0].Item {
		t.Fatalf("claimed %v", taken)
	}
}

// A batch's consumer deleted by hand halts the run with an error naming
// it, instead of a claim loop that polls for ever.
func TestClaimFromADeletedConsumerHalts(t *testing.T) {
	srv := reviewServer(t, false)
	c := reviewOpen(t, srv.URL("gone"), 5*time.Second, "w")
	if err := c.Load(context.Background(), reviewPlan("B", 2, func(i int) string { return fmt.Sprintf("ch_%d", i) })); err != nil {
		t.Fatal(err)
	}
	if err := c.work.DeleteConsumer(context.Background(), consumerName("B")); err != nil {
		t.Fatal(err)
	}
	for try := 0; ; try++ {
		cl, wait, err := c.Claim(context.Background(), 1, false)
		if err != nil {
			if !strings.Contains(err.Error(), "no consumer") {
				t.Fatalf("the error does not say the consumer is gone: %v", err)
			}
			return
		}
		if len(cl) != 0 || wait == 0 || try > 100 {
			t.Fatalf("claim from a deleted consumer: %v, wait %s, %d tries", cl, wait, try)
		}
		time.Sleep(wait)
	}
}

// Items a worker gives back before any call (stopped by SIGTERM, a look-up
// that failed) go to the batch's other workers at once, not to the next
// run; a worker left with only what it gave back, held by no one, ends
// instead of waiting for itself.
func TestItemsGivenBackGoToTheOtherWorkers(t *testing.T) {
	srv := reviewServer(t, false)
	url := srv.URL("back")
	plan := reviewPlan("B", 3, func(i int) string { return fmt.Sprintf("ch_%d", i) })
	a := reviewOpen(t, url, 5*time.Second, "a")
	if err := a.Load(context.Background(), plan); err != nil {
		t.Fatal(err)
	}
	got, _, err := a.Claim(context.Background(), 3, false)
	if err != nil || len(got) != 3 {
		t.Fatalf("claim: %v %v", got, err)
	}
	for _, cl := range got[:2] {
		if err := a.Release(context.Background(), "B", cl.Item); err != nil {
			t.Fatal(err)
		}
	}
	// a still holds the third; it takes neither given back item again,
	// and waits while its own claim is queued.
	if cl, wait, err := a.Claim(context.Background(), 3, false); err != nil || len(cl) != 0 || wait == 0 {
		t.Fatalf("a, holding an item, claimed %v (wait %s, %v)", cl, wait, err)
	}
	b := reviewOpen(t, url, 5*time.Second, "b")
	if err := b.Load(context.Background(), plan); err != nil {
		t.Fatal(err)
	}
	var taken []refund.Claimed
	for len(taken) < 2 {
		cl, wait, err := b.Claim(context.Background(), 3, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(cl) == 0 && wait == 0 {
			t.Fatalf("b ended with %v: the items a gave back are not delivered to it", taken)
		}
		taken = append(taken, cl...)
		time.Sleep(wait)
	}
	for _, cl := range taken {
		if cl.Item == got[2].Item {
			t.Fatalf("b claimed %s, which a holds", cl.Item)
		}
	}
	// a gives back its last item: it waits while b holds the two it gave
	// back (b may settle them: the batch's tally waits for that), and
	// while b, alive, may take the third; it ends once b gave back the two
	// and ended.
	if err := a.Release(context.Background(), "B", got[2].Item); err != nil {
		t.Fatal(err)
	}
	if cl, wait, err := a.Claim(context.Background(), 3, false); err != nil || len(cl) != 0 || wait == 0 {
		t.Fatalf("a, while b holds the items it gave back, claimed %v (wait %s, %v)", cl, wait, err)
	}
	for _, cl := range taken {
		if err := b.Release(context.Background(), "B", cl.Item); err != nil {
			t.Fatal(err)
		}
	}
	if cl, wait, err := a.Claim(context.Background(), 3, false); err != nil || len(cl) != 0 || wait == 0 {
		t.Fatalf("a, while b is alive and may take the item a gave back last, claimed %v (wait %s, %v)", cl, wait, err)
	}
	b.Close()
	for {
		cl, wait, err := a.Claim(context.Background(), 3, false)
		if err != nil || len(cl) != 0 {
			t.Fatalf("a claimed %v: %v", cl, err)
		}
		if wait == 0 {
			break
		}
		time.Sleep(wait)
	}
}

// A run whose slots are as many as the items it gave back is not handed
// those items again and again in place of the rest: the queue delivers
// redeliveries first, and a claim that only passed messages over asks
// again.
func TestGivenBackItemsDoNotStarveAClaim(t *testing.T) {
	srv := reviewServer(t, false)
	c := reviewOpen(t, srv.URL("starve"), 5*time.Second, "w")
	if err := c.Load(context.Background(), reviewPlan("B", 4, func(i int) string { return fmt.Sprintf("ch_%d", i) })); err != nil {
		t.Fatal(err)
	}
	first, _, err := c.Claim(context.Background(), 2, false)
	if err != nil || len(first) != 2 {
		t.Fatalf("claim: %v %v", first, err)
	}
	for _, cl := range first {
		if err := c.Release(context.Background(), "B", cl.Item); err != nil {
			t.Fatal(err)
		}
	}
	next, _, err := c.Claim(context.Background(), 2, false)
	if err != nil || len(next) != 2 {
		t.Fatalf("the claim after two items were given back took %v (%v): it was handed them again instead of the two waiting", next, err)
	}
	for _, cl := range next {
		if cl.Item == first[0].Item || cl.Item == first[1].Item {
			t.Fatalf("claimed %s again, which this run gave back", cl.Item)
		}
	}
}

// A worker paused between writing an item given back and its Nak (past
// its claim's deadline) sends no Nak: the server takes one by stream
// sequence, and a late one would give the item another worker claimed
// meanwhile to a third, fencing the second.
func TestLateGiveBackDoesNotMoveANewClaim(t *testing.T) {
	srv := reviewServer(t, false)
	url := srv.URL("late")
	const lease = time.Second
	plan := reviewPlan("B", 1, func(int) string { return "ch_1" })
	old := reviewOpen(t, url, lease, "old")
	if err := old.Load(context.Background(), plan); err != nil {
		t.Fatal(err)
	}
	x, _, err := old.Claim(context.Background(), 1, false)
	if err != nil || len(x) != 1 {
		t.Fatalf("claim: %v %v", x, err)
	}
	next := reviewOpen(t, url, lease, "next")
	if err := next.Load(context.Background(), plan); err != nil {
		t.Fatal(err)
	}
	// Paused right after its write: next claims the item once old's
	// ack-wait runs out.
	beforeGiveBack = func() {
		pause(old)
		for {
			got, wait, err := next.Claim(context.Background(), 1, false)
			if err != nil {
				t.Error(err)
				return
			}
			if len(got) > 0 {
				return
			}
			time.Sleep(max(wait, 10*time.Millisecond))
		}
	}
	defer func() { beforeGiveBack = nil }()
	if err := old.Release(context.Background(), "B", x[0].Item); err != nil {
		t.Fatal(err)
	}
	third := reviewOpen(t, url, lease, "third")
	if err := third.Load(context.Background(), plan); err != nil {
		t.Fatal(err)
	}
	if stolen, _, err := third.Claim(context.Background(), 1, false); err != nil || len(stolen) != 0 {
		t.Fatalf("a late give-back moved the item next holds to a third worker: %v %v", stolen, err)
	}
	if err := next.Append(intent("B", x[0].Item, "ch_1")); err != nil {
		t.Fatalf("next, holding the item, was fenced: %v", err)
	}
}
