package journal

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// realItems makes the records a real run leaves for items [from, to): an
// intent and a refunded record each, with ids shaped like Stripe's.
func realItems(recs []Record, from, to int) []Record {
	recs = recs[:0]
	ts := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	for i := from; i < to; i++ {
		item := fmt.Sprintf("item-%09d", i)
		suffix := fmt.Sprintf("%022s", strconv.FormatUint(uint64(i)*0x9e3779b97f4a7c15>>8, 36))
		ts = ts.Add(time.Millisecond)
		recs = append(recs, Record{V: Version, Type: TypeIntent, Time: ts, Batch: "b-2026-11-30", Item: item,
			Charge: "ch_" + suffix[:2] + suffix, Attempt: 1, Key: "refundkit:b-2026-11-30:" + item + ":1",
			Amount: int64(100 + i%5000), Currency: "eur", Reason: "requested_by_customer"},
			Record{V: Version, Type: TypeRefunded, Time: ts.Add(time.Second), Batch: "b-2026-11-30", Item: item,
				Attempt: 1, Refund: "re_" + suffix[:2] + suffix, Amount: int64(100 + i%5000), Currency: "eur",
				Status: "succeeded", Source: SourceAPI})
	}
	return recs
}

// foldRealShape folds items of the real shape into a new State, a batch of
// records at a time, and returns the heap the State keeps a item
// (HeapInuse after GC, before and after) and the time Apply took.
func foldRealShape(tb testing.TB, items int) (perItem float64, applied time.Duration) {
	const batch = 1 << 15
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	s := NewState()
	var recs []Record
	for from := 0; from < items; from += batch {
		recs = realItems(recs, from, min(from+batch, items))
		start := time.Now()
		for i := range recs {
			s.Apply(&recs[i])
		}
		applied += time.Since(start)
	}
	recs = nil // only the State's memory counts
	runtime.GC()
	runtime.ReadMemStats(&after)
	if s.Len() != items {
		tb.Fatalf("Len = %d, want %d", s.Len(), items)
	}
	runtime.KeepAlive(s)
	return float64(after.HeapInuse-before.HeapInuse) / float64(items), applied
}

// BenchmarkStateRealShape folds 1M items of the real shape (2M records)
// and reports Apply's time a record and the heap the State keeps a item.
//
//	go test ./journal -run '^$' -bench StateRealShape -count 5
func BenchmarkStateRealShape(b *testing.B) {
	const items = 1_000_000
	var applied time.Duration
	var perItem float64
	for b.Loop() {
		var d time.Duration
		perItem, d = foldRealShape(b, items)
		applied += d
	}
	b.ReportMetric(float64(applied.Nanoseconds())/float64(b.N*2*items), "ns/record")
	b.ReportMetric(perItem, "bytes/item")
}

// TestStateMemory keeps a State of the real shape within 130 bytes an
// item, ids, strings, table and all (the aim is 150; 48-byte slots with
// 8-byte table slots took 136 here; 40-byte entries and 4-byte table slots
// take 120).
func TestStateMemory(t *testing.T) {
	if perItem, _ := foldRealShape(t, 1<<18); perItem > 130 {
		t.Errorf("%.1f bytes an item, want at most 130", perItem)
	}
}

// TestRealItemsShape pins the ids the benchmark uses to the real lengths.
func TestRealItemsShape(t *testing.T) {
	recs := realItems(nil, 123456, 123458)
	r, f := recs[0], recs[1]
	if len(r.Batch) != 12 || len(r.Item) != 14 || len(r.Charge) != 27 || len(f.Refund) != 27 {
		t.Errorf("lengths batch %d item %d charge %d refund %d, want 12 14 27 27", len(r.Batch), len(r.Item), len(r.Charge), len(f.Refund))
	}
	if recs[0].Charge == recs[2].Charge || recs[1].Refund == recs[3].Refund {
		t.Error("two items share a charge")
	}
}

// BenchmarkStateLookup looks items of a 1M-item State up in random order,
// as a plan that lists them in another order than the journal does.
//
//	go test ./journal -run '^$' -bench StateLookup -count 5
func BenchmarkStateLookup(b *testing.B) {
	const items = 1_000_000
	s := NewState()
	recs := realItems(nil, 0, items)
	for i := range recs {
		s.Apply(&recs[i])
	}
	names := make([]string, items)
	for i := range names {
		names[i] = recs[2*i].Item
	}
	recs = nil
	rand.New(rand.NewPCG(3, 4)).Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	i := 0
	for b.Loop() {
		if st, ok := s.Lookup("b-2026-11-30", names[i]); !ok || st.Status != StatusRefunded {
			b.Fatalf("Lookup(%s) = %+v, %v", names[i], st, ok)
		}
		if i++; i == items {
			i = 0
		}
	}
}
