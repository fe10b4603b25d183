package journal

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"
)

func TestOnPaymentFindsEveryItemOfAPayment(t *testing.T) {
	s := NewState()
	intent := func(batch, item, psp string) {
		s.Apply(&Record{V: Version, Type: TypeIntent, Batch: batch, Item: item, PSPReference: psp, Attempt: 1, Amount: 100, Currency: "eur"})
	}
	refunded := func(batch, item, psp, refund, status string) {
		s.Apply(&Record{V: Version, Type: TypeRefunded, Batch: batch, Item: item, PSPReference: psp, Attempt: 1, Refund: refund, Amount: 100, Currency: "eur", Status: status})
	}
	intent("A", "pay-1", "PAY1")
	refunded("A", "pay-1", "PAY1", "REF1", PendingStatus)
	intent("B", "pay-1", "PAY1") // another batch, the same payment
	intent("A", "pay-2", "PAY2")
	s.Apply(&Record{V: Version, Type: TypeIntent, Batch: "A", Item: "ch-3", Charge: "ch_3", Attempt: 1})
	s.Apply(&Record{V: Version, Type: TypeFailed, Batch: "A", Item: "ch-3", Charge: "ch_3", Attempt: 1, Code: "card_declined", Final: true})

	names := func(items []PaymentItem) []string {
		var out []string
		for _, p := range items {
			out = append(out, p.Batch+"/"+p.Item+":"+p.State.Status.String())
		}
		return out
	}
	for _, tc := range []struct {
		keys []string
		want []string
	}{
		{[]string{"PAY1"}, []string{"A/pay-1:pending", "B/pay-1:in_doubt"}},
		{[]string{"PAY2"}, []string{"A/pay-2:in_doubt"}},
		{[]string{"ch_3"}, []string{"A/ch-3:failed"}}, // every state: the caller judges
		{[]string{"PAY2", "PAY1", "PAY2"}, []string{"A/pay-1:pending", "B/pay-1:in_doubt", "A/pay-2:in_doubt"}},
		{[]string{"PAY9", ""}, nil},
		{nil, nil},
	} {
		if got := names(s.OnPayment(tc.keys...)); !slices.Equal(got, tc.want) {
			t.Errorf("OnPayment(%q) = %q, want %q", tc.keys, got, tc.want)
		}
	}
	if got := s.OnPayment("PAY1")[0].State.Refund; got != "REF1" {
		t.Errorf("pay-1's refund = %q, want REF1", got)
	}

	// Built once, the index follows later records: a new item, and a new
	// state of an item it holds.
	intent("C", "late", "PAY1")
	refunded("B", "pay-1", "PAY1", "REF2", "succeeded")
	if got, want := names(s.OnPayment("PAY1")), []string{"A/pay-1:pending", "B/pay-1:refunded", "C/late:in_doubt"}; !slices.Equal(got, want) {
		t.Errorf("after later records: %q, want %q", got, want)
	}
	// An item stays on the payment its first record bound it to: a record
	// naming another (merged journals) marks it Rebound, and moves nothing.
	s.Apply(&Record{V: Version, Type: TypeIntent, Batch: "C", Item: "late", PSPReference: "PAY7", Attempt: 2})
	if got := names(s.OnPayment("PAY7")); got != nil {
		t.Errorf("OnPayment(PAY7) = %q, want none", got)
	}
	if got := s.OnPayment("PAY1"); len(got) != 3 || !got[2].State.Rebound {
		t.Errorf("OnPayment(PAY1) = %+v, want late, rebound, still there", got)
	}
}

// TestOnPaymentManyTargets grows the index past its first tables, with
// many items on some payments, against a map.
func TestOnPaymentManyTargets(t *testing.T) {
	s := NewState()
	want := map[string][]string{}
	rng := rand.New(rand.NewPCG(1, 2))
	made := 0
	add := func(n int) {
		for range n {
			made++
			item := fmt.Sprintf("i%d", made)
			target := fmt.Sprintf("PAY%d", rng.IntN(3000))
			s.Apply(&Record{V: Version, Type: TypeIntent, Batch: "b", Item: item, PSPReference: target, Attempt: 1})
			want[target] = append(want[target], item)
		}
	}
	add(5000)
	s.OnPayment("PAY0") // builds it
	add(5000)           // and these go in as they come
	for target, items := range want {
		var got []string
		for _, p := range s.OnPayment(target) {
			got = append(got, p.Item)
		}
		if !slices.Equal(got, items) {
			t.Fatalf("OnPayment(%s) = %q, want %q", target, got, items)
		}
	}
}

// BenchmarkOnPayment builds the index of a 1M-item State of the real
// shape (an item each payment) on the first ask, and asks for payments in
// random order: ns/op is one ask; build-ms the first, and bytes/item what
// the index keeps beside the State.
//
//	go test ./journal -run '^$' -bench OnPayment -count 5
func BenchmarkOnPayment(b *testing.B) {
	const items = 1_000_000
	s := NewState()
	recs := realItems(nil, 0, items)
	for i := range recs {
		s.Apply(&recs[i])
	}
	charges := make([]string, items)
	for i := range charges {
		charges[i] = recs[2*i].Charge
	}
	recs = nil
	rand.New(rand.NewPCG(3, 4)).Shuffle(len(charges), func(i, j int) { charges[i], charges[j] = charges[j], charges[i] })
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	s.OnPayment(charges[0])
	built := time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&after)
	i := 0
	for b.Loop() {
		if got := s.OnPayment(charges[i]); len(got) != 1 || got[0].State.Status != StatusRefunded {
			b.Fatalf("OnPayment(%s) = %+v", charges[i], got)
		}
		if i++; i == items {
			i = 0
		}
	}
	b.ReportMetric(float64(built.Milliseconds()), "build-ms")
	b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/items, "bytes/item")
	runtime.KeepAlive(s)
}
