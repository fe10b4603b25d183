package natsjs

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
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

// A bucket whose stream would drop what it acknowledged (an age, a count
// or size limit discarding old messages, per-message TTLs: set by an
// operator's nats stream edit) is refused, a bucket of deliveries as the
// checkpoint's own: a delivery answered 2xx, or a journal record, would
// go. A limit that refuses new messages loses nothing and is taken.
func TestBucketThatDropsMessagesIsRefused(t *testing.T) {
	srv := reviewServer(t, true)
	ctx := context.Background()
	url := srv.URL("ck") + "?monitor=" + srv.MonitorURL()
	ck := reviewOpen(t, url, 5*time.Second, "w1")
	if err := ck.Load(ctx, reviewPlan("B", 1, func(int) string { return "ch_1" })); err != nil {
		t.Fatal(err)
	}
	kv, err := ck.EventsBucket(ctx, "stripe", true)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		edit func(*jetstream.StreamConfig)
		want string // "": taken
	}{
		{"max_age", func(s *jetstream.StreamConfig) { s.MaxAge, s.Duplicates = time.Hour, time.Minute }, "max_age"},
		{"max_msgs", func(s *jetstream.StreamConfig) { s.MaxMsgs, s.Discard = 1000, jetstream.DiscardOld }, "max_msgs"},
		{"max_bytes", func(s *jetstream.StreamConfig) { s.MaxBytes, s.Discard = 1<<30, jetstream.DiscardOld }, "max_bytes"},
		{"max_msgs, discard new", func(s *jetstream.StreamConfig) { s.MaxMsgs, s.Discard = 1000, jetstream.DiscardNew }, ""},
		{"allow_msg_ttl", func(s *jetstream.StreamConfig) { s.AllowMsgTTL = true }, "allow_msg_ttl"}, // last: the server cannot undo it
	} {
		for _, stream := range []string{"KV_" + kv.Bucket(), "KV_refundkit_ck"} {
			st, err := ck.js.Stream(ctx, stream)
			if err != nil {
				t.Fatal(err)
			}
			was := st.CachedInfo().Config
			cfg := was
			c.edit(&cfg)
			if _, err := ck.js.UpdateStream(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			if stream == "KV_refundkit_ck" {
				var c2 *Checkpoint
				c2, err = Open(ctx, url, Options{Lease: 5 * time.Second, Worker: "w2"}, false)
				if err == nil {
					c2.Close()
				}
			} else {
				_, err = ck.EventsBucket(ctx, "stripe", false)
			}
			var de *DurabilityError
			switch {
			case c.want == "" && err != nil:
				t.Errorf("%s on %s: %v, want it taken", c.name, stream, err)
			case c.want != "" && (!errors.As(err, &de) || !strings.Contains(err.Error(), c.want)):
				t.Errorf("%s on %s: %v, want a *DurabilityError naming %s", c.name, stream, err, c.want)
			}
			if c.name == "allow_msg_ttl" {
				continue // last: the server cannot undo it
			}
			if _, err := ck.js.UpdateStream(ctx, was); err != nil {
				t.Fatal(err)
			}
		}
	}
}
