package natsstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/refundkit/refundkit/refund/checkpoint/natsjs/natstest"
	"github.com/refundkit/refundkit/refund/provider/events"
)

// delivery is a stand-in for a provider's: Sig "ok" verifies.
type delivery struct {
	ID, Refund, Payment, Sig string
	Amount                   int64
}

var codec = &events.Codec[delivery]{
	File: "events", Noun: "event",
	Check: func(d *delivery) string {
		if d.Sig != "ok" {
			return "the signature does not verify"
		}
		return ""
	},
	Key:   func(d *delivery) string { return d.ID },
	Refs:  func(d *delivery) (string, string) { return d.Refund, d.Payment },
	Clone: func(d delivery) delivery { return d },
}

func start(t *testing.T) (*natstest.Server, func() *Store[delivery]) {
	t.Helper()
	srv, err := natstest.Start(natstest.Options{SyncAlways: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	open := func() *Store[delivery] {
		t.Helper()
		nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", srv.Port))
		if err != nil {
			t.Fatal(err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		kv, err := js.CreateOrUpdateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: "refundkit_ck_stripe_events", History: 1, Storage: jetstream.FileStorage})
		if err != nil {
			t.Fatal(err)
		}
		s := New(kv, codec, nc.Close)
		t.Cleanup(func() { s.Close() })
		return s
	}
	return srv, open
}

func ids(ds []delivery) string {
	var b []string
	for _, d := range ds {
		b = append(b, d.ID)
	}
	return strings.Join(b, ",")
}

func TestManyReceiversKeepARetryOnce(t *testing.T) {
	_, open := start(t)
	ctx := context.Background()
	stores := []*Store[delivery]{open(), open(), open()}
	var added sync.Map
	var wg sync.WaitGroup
	for r := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				d := delivery{ID: fmt.Sprintf("evt_%d", i), Refund: fmt.Sprintf("re_%d", i%5), Payment: "ch_1", Sig: "ok", Amount: 100}
				ok, err := stores[r%len(stores)].Add(ctx, d)
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					if _, dup := added.LoadOrStore(d.ID, r); dup {
						t.Errorf("%s added twice", d.ID)
					}
				}
			}
		}()
	}
	wg.Wait()
	all, err := open().All(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 20 {
		t.Fatalf("kept %d deliveries, want the 20 distinct once each", len(all))
	}
	n := 0
	added.Range(func(any, any) bool { n++; return true })
	if n != 20 {
		t.Fatalf("%d Adds said added, want 20", n)
	}
}

func TestReadsByRefundAndPaymentInTheOrderReceived(t *testing.T) {
	_, open := start(t)
	ctx := context.Background()
	s := open()
	for _, d := range []delivery{
		{ID: "evt_3", Refund: "re_b", Payment: "ch_1"},
		{ID: "evt_1", Refund: "re_a", Payment: "ch_1"},
		{ID: "evt_2", Refund: "re_b", Payment: "ch_2"},
		{ID: "evt_0", Refund: "", Payment: "ch_2"}, // a charge's event that names no refund
	} {
		d.Sig = "ok"
		if ok, err := s.Add(ctx, d); !ok || err != nil {
			t.Fatalf("Add(%s) = %v, %v", d.ID, ok, err)
		}
	}
	for _, c := range []struct {
		what string
		read func() ([]delivery, error)
		want string
	}{
		{"refund re_b", func() ([]delivery, error) { return s.ForRefund(ctx, "re_b") }, "evt_3,evt_2"},
		{"refund re_a", func() ([]delivery, error) { return s.ForRefund(ctx, "re_a") }, "evt_1"},
		{"refund re_none", func() ([]delivery, error) { return s.ForRefund(ctx, "re_none") }, ""},
		{"payment ch_1", func() ([]delivery, error) { return s.ForPayment(ctx, "ch_1") }, "evt_3,evt_1"},
		{"payment ch_2", func() ([]delivery, error) { return s.ForPayment(ctx, "ch_2") }, "evt_2,evt_0"},
		{"all", func() ([]delivery, error) { return s.All(ctx) }, "evt_3,evt_1,evt_2,evt_0"},
	} {
		got, err := c.read()
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		if ids(got) != c.want {
			t.Errorf("%s: %q, want %q", c.what, ids(got), c.want)
		}
	}
}

func TestAForgedDeliveryIsRefusedAndNothingKept(t *testing.T) {
	_, open := start(t)
	ctx := context.Background()
	s := open()
	ok, err := s.Add(ctx, delivery{ID: "evt_f", Refund: "re_1", Payment: "ch_1", Sig: "forged"})
	var inv *events.InvalidError
	if ok || !errors.As(err, &inv) {
		t.Fatalf("Add of a forgery = %v, %v; want an InvalidError", ok, err)
	}
	if all, err := s.All(ctx); err != nil || len(all) != 0 {
		t.Fatalf("after a forgery the bucket holds %v (%v), want nothing", ids(all), err)
	}
}

// A value edited in the bucket, or moved under another delivery's key,
// settles nothing: every reader refuses it, naming the bucket and revision.
func TestAnEditedOrMovedValueIsRefusedOnRead(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(s *Store[delivery], kv jetstream.KeyValue) error
		want string
	}{
		{"edited", func(s *Store[delivery], kv jetstream.KeyValue) error {
			_, err := kv.Put(context.Background(), s.key(&delivery{ID: "evt_1", Refund: "re_1", Payment: "ch_1"}),
				[]byte(`{"ID":"evt_1","Refund":"re_1","Payment":"ch_1","Sig":"tampered","Amount":1}`))
			return err
		}, "the signature does not verify"},
		{"moved", func(s *Store[delivery], kv jetstream.KeyValue) error {
			_, err := kv.Put(context.Background(), s.key(&delivery{ID: "evt_9", Refund: "re_1", Payment: "ch_1"}),
				[]byte(`{"ID":"evt_1","Refund":"re_2","Payment":"ch_1","Sig":"ok","Amount":100}`))
			return err
		}, "not its own"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, open := start(t)
			ctx := context.Background()
			s := open()
			if _, err := s.Add(ctx, delivery{ID: "evt_1", Refund: "re_1", Payment: "ch_1", Sig: "ok", Amount: 100}); err != nil {
				t.Fatal(err)
			}
			if err := c.edit(s, s.kv); err != nil {
				t.Fatal(err)
			}
			_, err := s.ForRefund(ctx, "re_1")
			var ce *events.CorruptError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "refundkit_ck_stripe_events") {
				t.Fatalf("ForRefund after the value was %s: %v; want a CorruptError naming the bucket and %q", c.name, err, c.want)
			}
		})
	}
}

// What Add answered is on disk: a kill -9 of the server right after loses
// nothing (sync_interval: always).
func TestAnAddedDeliverySurvivesAKilledServer(t *testing.T) {
	srv, open := start(t)
	ctx := context.Background()
	if ok, err := open().Add(ctx, delivery{ID: "evt_k", Refund: "re_k", Payment: "ch_k", Sig: "ok"}); !ok || err != nil {
		t.Fatalf("Add = %v, %v", ok, err)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	got, err := open().ForRefund(ctx, "re_k")
	if err != nil || ids(got) != "evt_k" {
		t.Fatalf("after kill -9 and restart: %q, %v; want evt_k", ids(got), err)
	}
}

// A delivery is one by its dedup key, as in a File: a later one of the
// key is not kept, whatever refund and payment it names; and where two
// receivers raced and both were stored, a reader of both takes the first
// only (a reader of the later one's refund or payment alone still finds
// it: the race needs two signed deliveries of one key naming different
// payments at once, which no provider sends).
func TestOneDeliveryPerDedupKeyAsAFile(t *testing.T) {
	_, open := start(t)
	ctx := context.Background()
	s := open()
	if ok, err := s.Add(ctx, delivery{ID: "evt_1", Refund: "re_1", Payment: "ch_1", Sig: "ok"}); !ok || err != nil {
		t.Fatalf("first: %v %v", ok, err)
	}
	if ok, err := s.Add(ctx, delivery{ID: "evt_1", Refund: "re_1", Payment: "ch_2", Sig: "ok"}); ok || err != nil {
		t.Fatalf("the same key naming another payment: added %v, %v; want a duplicate", ok, err)
	}
	if got, err := s.ForPayment(ctx, "ch_2"); err != nil || len(got) != 0 {
		t.Errorf("payment ch_2: %v, %v; want none", ids(got), err)
	}
	// The race: a second value of evt_1, under its own key, stored later.
	late := delivery{ID: "evt_1", Refund: "re_2", Payment: "ch_2", Sig: "ok"}
	doc, _ := json.Marshal(late)
	if _, err := s.kv.Create(ctx, s.key(&late), doc); err != nil {
		t.Fatal(err)
	}
	for name, read := range map[string]func() ([]delivery, error){
		"all":     func() ([]delivery, error) { return s.All(ctx) },
		"re_1":    func() ([]delivery, error) { return s.ForRefund(ctx, "re_1") },
		"payment": func() ([]delivery, error) { return s.ForPayment(ctx, "ch_1") },
	} {
		got, err := read()
		if err != nil || len(got) != 1 || got[0].Payment != "ch_1" {
			t.Errorf("%s: %+v, %v; want the first evt_1 only", name, got, err)
		}
	}
}

// A refund id or a dedup key too long for a key's token is kept under its
// hash: the connection stays up, and the delivery is found by it.
func TestALongIDIsKeptUnderItsHash(t *testing.T) {
	_, open := start(t)
	ctx := context.Background()
	s := open()
	long := delivery{ID: "evt_" + strings.Repeat("x", 3500), Refund: "re_" + strings.Repeat("y", 3500), Payment: "ch_1", Sig: "ok"}
	if ok, err := s.Add(ctx, long); !ok || err != nil {
		t.Fatalf("a long delivery: %v %v", ok, err)
	}
	if ok, err := s.Add(ctx, long); ok || err != nil {
		t.Fatalf("its retry: added %v, %v; want a duplicate", ok, err)
	}
	if got, err := s.ForRefund(ctx, long.Refund); err != nil || len(got) != 1 || got[0].ID != long.ID {
		t.Fatalf("found by its refund: %d, %v", len(got), err)
	}
	if ok, err := s.Add(ctx, delivery{ID: "evt_2", Refund: "re_2", Payment: "ch_1", Sig: "ok"}); !ok || err != nil {
		t.Fatalf("a short one after: %v %v", ok, err)
	}
	if k := s.key(&long); len(k) > 3*(maxToken+1)+2 {
		t.Errorf("key of %d bytes", len(k))
	}
}
