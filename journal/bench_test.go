package journal

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// writeBigJournal writes a journal the way a run of items refunds leaves
// it: per item an intent, then (refunded) its outcome, or only a refunded
// record when intents is false (a backfill). Shards of one batch differ in
// their items and interleave in time. It returns the record count.
func writeBigJournal(tb testing.TB, path string, items int, intents bool, shard int) int {
	tb.Helper()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	var line []byte
	ts := time.Date(2024, 5, 1, 9, 0, 0, 0, time.UTC).Add(time.Duration(shard) * 97 * time.Microsecond)
	records := 0
	for i := range items {
		item := fmt.Sprintf("ord_%d_%09d", shard, i)
		suffix := strconv.FormatInt(int64(i*64+shard)*7919+1000000000000000, 36)
		ts = ts.Add(1733 * time.Microsecond)
		if intents {
			line, _ = MarshalLine(line[:0], &Record{V: Version, Type: TypeIntent, Time: ts, Batch: "2024-05-refunds", Item: item,
				Charge: "ch_3PabcdefGHIJ" + suffix, Attempt: 1, Key: "refundkit:2024-05-refunds:" + item + ":1",
				Amount: int64(100 + i%5000), Reason: "requested_by_customer"})
			bw.Write(line)
			records++
			ts = ts.Add(211 * time.Millisecond)
		}
		line, _ = MarshalLine(line[:0], &Record{V: Version, Type: TypeRefunded, Time: ts, Batch: "2024-05-refunds", Item: item,
			Attempt: 1, Refund: "re_3PabcdefGHIJ" + suffix, Amount: int64(100 + i%5000), Currency: "eur", Status: "succeeded", Source: SourceAPI})
		bw.Write(line)
		records++
	}
	if err := bw.Flush(); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	return records
}

// BenchmarkLoad loads a 1M-record journal: 500k items with intent and
// refunded records, and 1M items with a refunded record each.
func BenchmarkLoad(b *testing.B) {
	for _, c := range []struct {
		name    string
		items   int
		intents bool
	}{
		{"500k-items-intent-refunded", 500_000, true},
		{"1M-items-refunded", 1_000_000, false},
	} {
		b.Run(c.name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "j.jsonl")
			records := writeBigJournal(b, path, c.items, c.intents, 0)
			info, _ := os.Stat(path)
			b.SetBytes(info.Size())
			b.ReportAllocs()
			var st *State
			for b.Loop() {
				var err error
				st, _, err = Load(path)
				if err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if st.Len() != c.items {
				b.Fatalf("loaded %d items, want %d", st.Len(), c.items)
			}
			// What the loaded state keeps alive.
			var ms runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms)
			with := ms.HeapAlloc
			runtime.KeepAlive(st)
			st = nil
			runtime.GC()
			runtime.ReadMemStats(&ms)
			b.ReportMetric(float64(with-ms.HeapAlloc)/(1<<20), "state-MB")
			b.ReportMetric(float64(info.Size())/(1<<20), "file-MB")
			b.ReportMetric(float64(records), "records")
		})
	}
}

// BenchmarkAppend appends one record per call from 8 goroutines with real
// fsyncs, with and without group commit.
func BenchmarkAppend(b *testing.B) {
	for _, c := range []struct {
		name string
		opts Options
	}{
		{"group-commit", Options{}},
		{"no-group-commit", Options{NoGroupCommit: true}},
	} {
		b.Run(c.name, func(b *testing.B) {
			dir := os.Getenv("JOURNAL_BENCH_DIR") // default: t.TempDir() under $TMPDIR
			if dir == "" {
				dir = b.TempDir()
			}
			path := filepath.Join(dir, fmt.Sprintf("bench-%d.jsonl", time.Now().UnixNano()))
			defer os.Remove(path)
			w, _, _, err := Open(path, c.opts)
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			const appenders = 8
			var (
				mu sync.Mutex
				n  int
			)
			next := func() int { mu.Lock(); defer mu.Unlock(); n++; return n }
			b.ResetTimer()
			var wg sync.WaitGroup
			work := make(chan struct{}, b.N)
			for range b.N {
				work <- struct{}{}
			}
			close(work)
			for range appenders {
				wg.Go(func() {
					for range work {
						i := next()
						if err := w.Append(intent("bench", "item-"+strconv.Itoa(i), 1)); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			s := w.Stats()
			b.ReportMetric(float64(s.Records)/float64(s.Fsyncs), "records/fsync")
		})
	}
}
