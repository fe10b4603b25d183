package stripe

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkReceiver measures the receiver of Stripe's events (verify the
// signature, read the event, keep it durably, answer 200) over an events
// file in the test's temp dir: one event at a time (one fsync each), and
// 8 goroutines per core posting at once, as Stripe's parallel deliveries
// do (their Adds share fsyncs: group commit). It reports events kept per
// second and the events file's fsyncs per event (scripts/bench's
// stripe-webhook row reads both).
func BenchmarkReceiver(b *testing.B) {
	for _, c := range []struct {
		name string
		par  int // goroutines per core; 0: one at a time
	}{{"serial", 0}, {"parallel", 8}} {
		b.Run(c.name, func(b *testing.B) {
			const secret = "whsec_refundkit_bench"
			f, err := OpenEvents(filepath.Join(b.TempDir(), "events.jsonl"), []string{secret}, true)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			r, err := NewReceiver(ReceiverConfig{Secrets: []string{secret}, Events: f})
			if err != nil {
				b.Fatal(err)
			}
			// Signed before the clock starts: the signing is Stripe's work.
			now := time.Now()
			bodies, sigs := make([][]byte, b.N), make([]string, b.N)
			for i := range b.N {
				bodies[i] = benchEvent(i)
				sigs[i] = sign(bodies[i], secret, now)
			}
			var next atomic.Int64
			serve := func() bool {
				i := next.Add(1) - 1
				req := httptest.NewRequest(http.MethodPost, EventsPath, bytes.NewReader(bodies[i]))
				req.Header.Set(SignatureHeader, sigs[i])
				w := httptest.NewRecorder()
				r.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Errorf("event %d: answered %d: %s", i, w.Code, w.Body)
					return false
				}
				return true
			}
			fsyncs0 := f.Fsyncs()
			b.ReportAllocs()
			b.ResetTimer()
			if c.par == 0 {
				for range b.N {
					if !serve() {
						return
					}
				}
			} else {
				b.SetParallelism(c.par)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if !serve() {
							return
						}
					}
				})
			}
			b.StopTimer()
			if st := r.Stats(); st.Added != int64(b.N) || st.Duplicates != 0 {
				b.Fatalf("kept %d events (%d duplicates), want %d once each", st.Added, st.Duplicates, b.N)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64(f.Fsyncs()-fsyncs0)/float64(b.N), "fsyncs/event")
		})
	}
}

// benchEvent is the i-th of distinct refund.updated events, each of its
// own refund, charge and item, of the size the simulator sends.
func benchEvent(i int) []byte {
	return fmt.Appendf(nil, `{"id":"evt_bench%09d","object":"event","api_version":"2023-10-16","created":%d,"type":"refund.updated","livemode":false,"pending_webhooks":1,"request":{"id":null,"idempotency_key":null},"data":{"object":{"id":"re_bench%09d","object":"refund","amount":%d,"currency":"usd","charge":"ch_bench%09d","status":"succeeded","metadata":{"refundkit_batch":"B","refundkit_item":"it%d","refundkit_attempt":"1"}},"previous_attributes":{"status":"pending"}}}`,
		i, 1_700_000_000+i, i, 100+i%9900, i, i)
}
