package journal

import (
	"bufio"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// writeRealRun writes the journal a refund run of items leaves, as the
// engine writes it: per item an intent before its call and a refunded
// record after it, with -j 8 calls in flight (an outcome follows its intent
// by 8 other intents), framed (unless old) in group commits of 8 records.
// old leaves the commit lines out: the previous version's journal. The
// commit lines are built here from hash/crc32 alone, so that this file
// measures the previous version too.
func writeRealRun(tb testing.TB, path string, items int, old bool) {
	tb.Helper()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	const batch, inFlight, group = "2026-11-refunds", 8, 8
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	var commit, line []byte
	n, k := 0, 0
	add := func(r *Record) {
		k++
		r.V, r.Batch, r.Attempt = Version, batch, 1
		r.Time = t0.Add(time.Duration(k)*time.Millisecond + time.Duration(k*7919%1_000_000))
		line, _ = MarshalLine(line[:0], r)
		commit = append(commit, line...)
		if n++; n == group {
			flushGroup(bw, &commit, &n, old)
		}
	}
	for i := 1; i <= items+inFlight; i++ {
		if i <= items {
			ch := fmt.Sprintf("ch_sim%07d", i)
			add(&Record{Type: TypeIntent, Item: ch, Charge: ch, Key: "refundkit:" + batch + ":" + ch + ":1",
				Amount: int64(100 + i%9900), Currency: "usd", Reason: "requested_by_customer"})
		}
		if j := i - inFlight; j >= 1 {
			ch := fmt.Sprintf("ch_sim%07d", j)
			add(&Record{Type: TypeRefunded, Item: ch, Charge: ch, Key: "refundkit:" + batch + ":" + ch + ":1",
				Refund: fmt.Sprintf("re_sim%010d", j), Amount: int64(100 + j%9900), Currency: "usd", Status: "succeeded", Source: SourceAPI})
		}
	}
	flushGroup(bw, &commit, &n, old)
	if err := bw.Flush(); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
}

func flushGroup(w *bufio.Writer, commit *[]byte, n *int, old bool) {
	if *n == 0 {
		return
	}
	w.Write(*commit)
	if !old {
		fmt.Fprintf(w, `{"v":1,"type":"commit","records":%d,"crc32c":"%08x"}`+"\n", *n, crc32.Checksum(*commit, crc32.MakeTable(crc32.Castagnoli)))
	}
	*commit, *n = (*commit)[:0], 0
}

// BenchmarkRestart loads the journal of a run of 1M items (2M records,
// about 500 MB): what a restart reads before it does anything. cpu-s is
// the process's user+system time per load. JOURNAL_RESTART_DIR keeps the
// journals there (made once), JOURNAL_RESTART_ITEMS changes the size.
func BenchmarkRestart(b *testing.B) {
	items := 1_000_000
	if s := os.Getenv("JOURNAL_RESTART_ITEMS"); s != "" {
		items, _ = strconv.Atoi(s)
	}
	dir := os.Getenv("JOURNAL_RESTART_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	for _, shape := range []struct {
		name string
		old  bool
	}{{"framed", false}, {"unframed", true}} {
		b.Run(shape.name, func(b *testing.B) {
			path := filepath.Join(dir, fmt.Sprintf("run-%d-%s.jsonl", items, shape.name))
			if _, err := os.Stat(path); err != nil {
				writeRealRun(b, path, items, shape.old)
			}
			info, _ := os.Stat(path)
			b.SetBytes(info.Size())
			var cpu time.Duration
			b.ResetTimer()
			for b.Loop() {
				before := cpuTime()
				st, torn, err := Load(path)
				cpu += cpuTime() - before
				if err != nil || torn != nil {
					b.Fatalf("load: %v, %v", err, torn)
				}
				if st.Len() != items {
					b.Fatalf("loaded %d items, want %d", st.Len(), items)
				}
			}
			b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
		})
	}
}

// cpuTime is the user and system time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
