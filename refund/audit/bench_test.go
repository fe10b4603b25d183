package audit

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/refundkit/refundkit/journal"
)

// bigJournal describes a journal as a large batch leaves it.
type bigJournal struct {
	records    int
	duplicates []string // charges refunded twice (two refund ids for one item)
	size       int64
}

// writeBigJournal writes about records records: per item an intent and a
// refunded record, and for every 1000th item a second refund under a new
// attempt (a duplicate). Charge and refund ids look like Stripe's.
func writeBigJournal(tb testing.TB, path string, records int) bigJournal {
	tb.Helper()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	var line []byte
	ts := time.Date(2024, 5, 1, 9, 0, 0, 0, time.UTC)
	out := bigJournal{}
	write := func(r *journal.Record) {
		line, err = journal.MarshalLine(line[:0], r)
		if err != nil {
			tb.Fatal(err)
		}
		bw.Write(line)
		out.records++
	}
	for i := 0; out.records < records; i++ {
		item := fmt.Sprintf("ord_%010d", i)
		suffix := strconv.FormatInt(int64(i)*7919+1000000000000000, 36)
		charge := "ch_3PabcdefGHIJ" + suffix
		ts = ts.Add(1733 * time.Microsecond)
		amount := int64(100 + i%5000)
		write(&journal.Record{V: journal.Version, Type: journal.TypeIntent, Time: ts, Batch: "2024-05-refunds", Item: item,
			Charge: charge, Attempt: 1, Key: "refundkit:2024-05-refunds:" + item + ":1", Amount: amount, Reason: "requested_by_customer"})
		write(&journal.Record{V: journal.Version, Type: journal.TypeRefunded, Time: ts.Add(211 * time.Millisecond), Batch: "2024-05-refunds", Item: item,
			Charge: charge, Attempt: 1, Key: "refundkit:2024-05-refunds:" + item + ":1", Refund: "re_3PabcdefGHIJ" + suffix,
			Amount: amount, Currency: "eur", Status: "succeeded", Source: journal.SourceAPI})
		if i%1000 == 999 && out.records < records {
			write(&journal.Record{V: journal.Version, Type: journal.TypeRefunded, Time: ts.Add(time.Hour), Batch: "2024-05-refunds", Item: item,
				Charge: charge, Attempt: 2, Key: "refundkit:2024-05-refunds:" + item + ":2", Refund: "re_3PabcdefGHIX" + suffix,
				Amount: amount, Currency: "eur", Status: "succeeded", Source: journal.SourceReconciled})
			out.duplicates = append(out.duplicates, charge)
		}
	}
	if err := bw.Flush(); err != nil {
		tb.Fatal(err)
	}
	info, err := f.Stat()
	if err != nil {
		tb.Fatal(err)
	}
	out.size = info.Size()
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// BenchmarkAuditOffline audits a 1M-record journal (333k items, one in a
// thousand refunded twice) from its file, as `audit j.jsonl` does.
func BenchmarkAuditOffline(b *testing.B) {
	path := filepath.Join(b.TempDir(), "j.jsonl")
	big := writeBigJournal(b, path, 1_000_000)
	b.SetBytes(big.size)
	b.ReportAllocs()
	for b.Loop() {
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		a := New()
		if _, err := a.AddJournal(f, path); err != nil {
			b.Fatal(err)
		}
		f.Close()
		dups := 0
		rep, err := a.Run(context.Background(), Options{}, func(f *Finding) {
			if f.Finding == KindDuplicate {
				dups++
			}
		})
		if err != nil {
			b.Fatal(err)
		}
		if dups != len(big.duplicates) || rep.FindingCount() != dups {
			b.Fatalf("%d duplicates of %d findings, want %d", dups, rep.FindingCount(), len(big.duplicates))
		}
	}
	b.ReportMetric(float64(big.records), "records")
}
