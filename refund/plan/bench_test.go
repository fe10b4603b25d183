package plan

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
)

// chargesCSV is a spreadsheet export of rows charges with ids as long as
// Stripe's (27 characters), an amount, a currency and a reason.
func chargesCSV(rows int) []byte {
	var b bytes.Buffer
	b.WriteString("charge,amount,currency,reason\r\n")
	for i := 0; i < rows; i++ {
		fmt.Fprintf(&b, "ch_3Pq%021d,%d,usd,requested_by_customer\r\n", i, 100+i%99900)
	}
	return b.Bytes()
}

// BenchmarkPlanCSV reads a 1,000,000-row CSV. Besides time and allocations
// per read it reports rows/s and the heap a read plan keeps per row.
func BenchmarkPlanCSV(b *testing.B) {
	const rows = 1_000_000
	data := chargesCSV(rows)
	kept := keptPerRow(b, data, rows)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		p, err := Read(bytes.NewReader(data), "bench.csv", Options{Batch: "bench"})
		if err != nil || p.Len() != rows {
			b.Fatalf("%v, %v", p, err)
		}
	}
	b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(kept, "kept-B/row")
}

// keptPerRow is the heap a plan read from data holds once reading is done.
func keptPerRow(b *testing.B, data []byte, rows int) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	p, err := Read(bytes.NewReader(data), "bench.csv", Options{Batch: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(p)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(rows)
}
