package natsjs

// Review tests: each is a path by which the checkpoint could hang a run,
// lose work or leak a secret, against a real nats-server (natstest).

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/checkpoint/natsjs/natstest"
)

func reviewServer(t *testing.T, syncAlways bool) *natstest.Server {
	t.Helper()
	srv, err := natstest.Start(natstest.Options{SyncAlways: syncAlways})
	if err != nil {
		t.Skipf("no nats-server: %v", err)
	}
	t.Cleanup(func() { srv.Stop() })
	return srv
}

func reviewOpen(t *testing.T, url string, lease time.Duration, worker string) *Checkpoint {
	t.Helper()
	c, err := Open(context.Background(), url, Options{Lease: lease, Worker: worker}, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func reviewPlan(batch string, n int, charge func(i int) string) []refund.PlanLine {
	var plan []refund.PlanLine
	for i := range n {
		plan = append(plan, refund.PlanLine{Line: i + 1, Item: &refund.Item{Batch: batch, Item: fmt.Sprintf("it%05d", i), Charge: charge(i), Amount: 100, Currency: "usd"}})
	}
	return plan
}

func intent(batch, item, charge string) *journal.Record {
	return &journal.Record{V: journal.Version, Type: journal.TypeIntent, Time: time.Now().UTC(), Batch: batch, Item: item,
		Charge: charge, Attempt: 1, Key: "rk-" + batch + "-" + item + "-1", Amount: 100, Currency: "usd"}
}

// A plan of thousands of items loads on a server that syncs every write:
// the asynchronous publishes of storeItems and queue do not stall.
func TestReviewLoadLargePlanSyncAlways(t *testing.T) {
	srv := reviewServer(t, true)
	c := reviewOpen(t, srv.URL("big"), 5*time.Second, "w1")
	plan := reviewPlan("B", 6000, func(i int) string { return fmt.Sprintf("ch_%05d", i) })
	if err := c.Load(context.Background(), plan); err != nil {
		t.Fatalf("load of %d items: %v", len(plan), err)
	}
}

// A worker whose --lease is longer than the ack-wait of the batch's queue
// (made by another worker) renews its claims within that ack-wait: no
// other worker can claim an item it holds.
func TestReviewRenewFollowsQueueAckWait(t *testing.T) {
	srv := reviewServer(t, false)
	url := srv.URL("renew")
	const ackWait = 1500 * time.Millisecond
	plan := reviewPlan("B", 1, func(int) string { return "ch_1" })
	first := reviewOpen(t, url, ackWait, "first") // makes the queue, ack-wait 1.5 s
	if err := first.Load(context.Background(), plan); err != nil {
		t.Fatal(err)
	}
	long := reviewOpen(t, url, 30*time.Second, "long")
	if err := long.Load(context.Background(), plan); err != nil {
		t.Fatal(err)
	}
	got, _, err := long.Claim(context.Background(), 1, false)
	if err != nil || len(got) != 1 {
		t.Fatalf("claim: %v %v", got, err)
	}
	claimedAt := time.Now()
	// Until two ack-waits have passed, the other worker must find nothing
	// to claim: long renews its claim.
	for time.Since(claimedAt) < 2*ackWait {
		stolen, wait, err := first.Claim(context.Background(), 1, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(stolen) > 0 {
			t.Fatalf("after %s another worker claimed the item a live worker holds (its renewals follow its own --lease, not the queue's ack-wait)", time.Since(claimedAt).Round(time.Millisecond))
		}
		time.Sleep(wait) // the poll interval Claim asks for
	}
	if err := long.Holds(context.Background(), "B", got[0].Item); err != nil {
		t.Fatalf("the live claim is lost: %v", err)
	}
}

// A token written as the URL's user (the NATS form nats://TOKEN@host) is
// not printed.
func TestReviewRedactUserOnlyURL(t *testing.T) {
	r := Redact("nats://s3cr3tt0ken@127.0.0.1:4222/x")
	if strings.Contains(r, "s3cr3tt0ken") {
		t.Fatalf("Redact shows the URL's token: %s", r)
	}
}

// A worker paused past its ack-wait, whose item another worker claimed
// meanwhile, resumes: the renewal that fires first must not make Holds
// answer from the clock that the claim is live.
func TestReviewRenewAfterPauseDoesNotReviveClaim(t *testing.T) {
	srv := reviewServer(t, false)
	url := srv.URL("pause")
	const lease = time.Second
	plan := reviewPlan("B", 1, func(int) string { return "ch_1" })
	paused := reviewOpen(t, url, lease, "paused")
	if err := paused.Load(context.Background(), plan); err != nil {
		t.Fatal(err)
	}
	x, _, err := paused.Claim(context.Background(), 1, false)
	if err != nil || len(x) != 1 {
		t.Fatalf("claim: %v %v", x, err)
	}
	if err := paused.Append(intent("B", x[0].Item, "ch_1")); err != nil {
		t.Fatal(err)
	}
	// SIGSTOP: no renewal.
	paused.Pause()
	other := reviewOpen(t, url, lease, "other")
	if err := other.Load(context.Background(), plan); err != nil {
		t.Fatal(err)
	}
	for {
		got, wait, err := other.Claim(context.Background(), 1, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 1 {
			break
		}
		time.Sleep(wait) // Claim's poll interval, until the ack-wait ran out
	}
	// SIGCONT: the renewal ticker fires before the worker's next Holds.
	paused.renew()
	if err := paused.Holds(context.Background(), "B", x[0].Item); err == nil {
		t.Fatal("Holds says the claim is live after another worker took the item: the renewal moved its deadline")
	}
}

// The monitoring address's credentials (monitor=http://user:pw@host) are
// not printed either.
func TestReviewRedactMonitorPassword(t *testing.T) {
	r := Redact("nats://127.0.0.1:4222/x?monitor=http://admin:m0nit0rpw@127.0.0.1:8222&replicas=1")
	if strings.Contains(r, "m0nit0rpw") {
		t.Fatalf("Redact shows the monitor's password: %s", r)
	}
	if !strings.Contains(r, "replicas=1") || !strings.Contains(r, "127.0.0.1:8222") {
		t.Fatalf("Redact lost the rest of the URL: %s", r)
	}
	srv := reviewServer(t, false)
	// A monitoring address that does not answer: the error names it.
	_, err := Open(context.Background(), srv.URL("mon")+"?monitor=http://admin:m0nit0rpw@127.0.0.1:1", Options{}, false)
	if err == nil || strings.Contains(err.Error(), "m0nit0rpw") {
		t.Fatalf("Open's error shows the monitor's password (or no error): %v", err)
	}
}
