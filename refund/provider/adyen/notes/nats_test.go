package notes

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/refundkit/refundkit/refund/checkpoint/natsjs/natstest"
	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
)

// The NATS store keeps Adyen's notifications as the file does: one per
// dedup key, the first, whatever originalReference a later one names; a
// payment's look-up finds the same in both.
func TestNATSKeepsWhatTheFileKeeps(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	keys := [][]byte{key}
	note := func(orig string) wire.Notification {
		it := wire.Item{PSPReference: "RF1", OriginalReference: orig, MerchantAccountCode: "M", MerchantReference: "ref",
			Amount: wire.Amount{Value: 100, Currency: "EUR"}, EventCode: wire.EventRefund, Success: "true"}
		it.AdditionalData = map[string]string{wire.SignatureField: wire.Sign(&it, key)}
		return wire.Notification{V: wire.Version, Received: time.Now().UTC(), Item: it}
	}
	srv, err := natstest.Start(natstest.Options{SyncAlways: true})
	if err != nil {
		t.Fatalf("the NATS tests need nats-server (make test installs it): %v", err)
	}
	t.Cleanup(func() { srv.Stop() })
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", srv.Port))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "refundkit_ck_adyen_events", History: 1, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	ns, err := OpenNATS(kv, keys, nc.Close)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	fs, err := OpenFile(filepath.Join(t.TempDir(), "n.jsonl"), keys, true)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	for name, st := range map[string]Store{"file": fs, "nats": ns} {
		a1, err1 := st.Add(ctx, note("P1"))
		a2, err2 := st.Add(ctx, note("P2"))
		p1, _ := st.ForPayment(ctx, "P1")
		p2, _ := st.ForPayment(ctx, "P2")
		all, err := st.All(ctx)
		if !a1 || a2 || err1 != nil || err2 != nil || err != nil || len(p1) != 1 || len(p2) != 0 || len(all) != 1 {
			t.Errorf("%s: added %v %v (%v %v); payment P1 %d, P2 %d; %d kept (%v): want the first only", name, a1, a2, err1, err2, len(p1), len(p2), len(all), err)
		}
	}
	if _, err := OpenNATS(kv, nil, nil); err == nil {
		t.Error("a store with no HMAC key opened")
	}
}
