package natsjs

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// The deliveries' buckets and the checkpoints' share one namespace on a
// server (a checkpoint may be named ck_stripe_events): neither is ever
// opened as the other, whichever came first.
func TestEventsBucketIsNeverACheckpoint(t *testing.T) {
	srv := reviewServer(t, true)
	ctx := context.Background()
	url := func(name string) string { return srv.URL(name) + "?monitor=" + srv.MonitorURL() }

	ck := reviewOpen(t, url("ck"), 5*time.Second, "w1")
	kv, err := ck.EventsBucket(ctx, "stripe", true)
	if err != nil {
		t.Fatal(err)
	}
	if kv.Bucket() != "refundkit_ck_stripe_events" {
		t.Errorf("bucket %s", kv.Bucket())
	}
	again, err := ck.EventsBucket(ctx, "stripe", true) // a second receiver
	if err != nil || again.Bucket() != kv.Bucket() {
		t.Fatalf("the bucket again: %v", err)
	}
	var cfg *ConfigError
	if _, err := ck.EventsBucket(ctx, "paypal", false); !errors.As(err, &cfg) || !errors.Is(err, ErrNoEvents) {
		t.Errorf("a missing bucket, for reading: %v, want ErrNoEvents", err)
	}
	if _, err := ck.EventsBucket(ctx, "stripe", false); err != nil {
		t.Errorf("the bucket, for reading: %v", err)
	}
	for _, readOnly := range []bool{false, true} {
		_, err = Open(ctx, url("ck_stripe_events"), Options{Lease: 5 * time.Second, Worker: "w2"}, readOnly)
		if !errors.As(err, &cfg) || !strings.Contains(err.Error(), "keeps webhook deliveries") {
			t.Errorf("the events bucket opened as a checkpoint (read only %v): %v", readOnly, err)
		}
	}

	// A checkpoint made first under the name: refused as a bucket of
	// deliveries, and left as it was.
	other := reviewOpen(t, url("x_paypal_events"), 5*time.Second, "w3")
	if err := other.Load(ctx, reviewPlan("B", 2, func(int) string { return "ch_1" })); err != nil {
		t.Fatal(err)
	}
	x := reviewOpen(t, url("x"), 5*time.Second, "w4")
	if _, err := x.EventsBucket(ctx, "paypal", true); !errors.As(err, &cfg) || !strings.Contains(err.Error(), "another checkpoint is named x_paypal_events") {
		t.Errorf("a checkpoint opened as the bucket of deliveries: %v", err)
	}
	if err := other.Load(ctx, reviewPlan("B", 2, func(int) string { return "ch_1" })); err != nil {
		t.Errorf("the checkpoint after: %v", err)
	}
}
