package stripesim

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// BenchmarkRefundsStripeGo is the whole path a refund run takes: stripe-go's
// client, loopback HTTP with keep-alive, the simulator. One op is one
// refund created with its own idempotency key; client and server share the
// machine's cores.
func BenchmarkRefundsStripeGo(b *testing.B) {
	s := start(b, Config{Charges: GenerateCharges(b.N, 1)})
	c := newClients(s, clientOpts{keepAlive: true})
	var next atomic.Int64
	b.SetParallelism(8) // I/O bound: several calls in flight per core
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := simNumber(next.Add(1))
			p := refundParams("ch_sim"+id, 0, "bench:"+id)
			p.AddMetadata("refundkit_item", id)
			if _, err := c.refunds.New(p); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "refunds/s")
	if st := s.Stats(); st.RefundsCreated != int64(b.N) {
		b.Errorf("created %d refunds for %d ops", st.RefundsCreated, b.N)
	}
}

// simNumber is the number part of GenerateCharges' n-th ids.
func simNumber(n int64) string { return fmt.Sprintf("%07d", n) }

// BenchmarkHandlerCreate is the simulator's own cost per refund, without
// network or client: what it takes from a benchmark's CPU budget.
func BenchmarkHandlerCreate(b *testing.B) {
	s := New(Config{Charges: GenerateCharges(b.N, 1)})
	h := s.Handler()
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := simNumber(next.Add(1))
			form := url.Values{"charge": {"ch_sim" + id}, "metadata[refundkit_item]": {id}}
			req := httptest.NewRequest("POST", "/v1/refunds", strings.NewReader(form.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Authorization", "Bearer "+testKey)
			req.Header.Set("Idempotency-Key", "bench:"+id)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != http.StatusOK {
				b.Errorf("status %d: %s", w.Code, w.Body)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "refunds/s")
}

// BenchmarkHandlerListByCharge is a reconciliation read: the refunds of one
// charge that has a few.
func BenchmarkHandlerListByCharge(b *testing.B) {
	charges := GenerateCharges(1000, 1)
	for i := range charges {
		charges[i].Refunds = []SeedRefund{{Amount: 1}, {Amount: 2, Metadata: map[string]string{"refundkit_item": strconv.Itoa(i)}}}
	}
	s := New(Config{Charges: charges})
	h := s.Handler()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			req := httptest.NewRequest("GET", "/v1/refunds?charge="+charges[i%len(charges)].ID+"&limit=100", nil)
			req.Header.Set("Authorization", "Bearer "+testKey)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != http.StatusOK {
				b.Errorf("status %d: %s", w.Code, w.Body)
				return
			}
		}
	})
}
