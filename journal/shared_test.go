package journal

import (
	"fmt"
	"testing"
	"time"
)

func refundedRecord(batch, item, refund string) *Record {
	return &Record{V: 1, Type: TypeRefunded, Time: time.Unix(1, 0), Batch: batch, Item: item, Charge: "ch_" + item,
		Attempt: 1, Amount: 100, Currency: "usd", Refund: refund, Status: SucceededStatus}
}

func TestSharedRefundFindsARefundCreditedToTwoItems(t *testing.T) {
	s := NewState()
	s.Apply(refundedRecord("B", "a", "re_1"))
	s.Apply(refundedRecord("B", "b", "re_2"))
	s.Apply(refundedRecord("B", "b", "re_2")) // the same record again: no second credit
	s.Apply(refundedRecord("C", "c", "re_1")) // another batch's item, the same refund
	for _, tc := range []struct {
		id, batch, item string
		shared          bool
	}{
		{"re_1", "B", "a", false}, // the first credited keeps it
		{"re_1", "C", "c", true},
		{"re_2", "B", "b", false},
		{"re_9", "B", "z", false},
		{"", "B", "a", false},
	} {
		b, it, shared := s.SharedRefund(tc.id, tc.batch, tc.item)
		if shared != tc.shared || shared && (b != "B" || it != "a") {
			t.Errorf("SharedRefund(%q, %q, %q) = %q %q %v, want shared %v (first B a)", tc.id, tc.batch, tc.item, b, it, shared, tc.shared)
		}
	}
}

func TestRepeatedCountsExactlyWithinABusyBucket(t *testing.T) {
	// Three hashes in one bucket of the bitmap, one of them twice.
	hs := []uint64{1<<40 | 1, 1<<40 | 2, 1<<40 | 2, 1<<40 | 3, 7 << 60}
	got := repeated(hs)
	if len(got) != 1 || !got[1<<40|2] {
		t.Fatalf("repeated = %v, want only %d", got, uint64(1<<40|2))
	}
	if repeated([]uint64{1, 2, 3}) != nil {
		t.Fatal("repeated of distinct hashes is not nil")
	}
}

// BenchmarkSharedRefund is the first SharedRefund of a state of a million
// refunded items, each its own refund: what a rerun of a done batch pays
// to know that no refund is credited twice.
func BenchmarkSharedRefund(b *testing.B) {
	s := NewState()
	for i := range 1_000_000 {
		item := fmt.Sprintf("ch_%024d", i)
		s.Apply(refundedRecord("B", item, fmt.Sprintf("re_%024d", i)))
	}
	b.ResetTimer()
	for b.Loop() {
		s.twice = twice{}
		if _, _, shared := s.SharedRefund("re_x", "B", "x"); shared {
			b.Fatal("shared")
		}
	}
}
