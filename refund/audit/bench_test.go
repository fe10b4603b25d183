package audit

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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

// writeBigJournal writes at least records records as a run with 8 workers
// leaves them: the intents of 8 items, then their outcomes in another
// order, and for one item in a thousand a second refund under a new attempt
// (a duplicate). Charge and refund ids look like Stripe's.
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
	const workers = 8
	type item struct {
		id, charge, suffix string
		amount             int64
		dup                bool
	}
	for n := 0; out.records < records; n += workers {
		var group []item
		for i := n; i < n+workers; i++ {
			suffix := strconv.FormatInt(int64(i)*7919+1000000000000000, 36)
			group = append(group, item{id: fmt.Sprintf("ord_%010d", i), charge: "ch_3PabcdefGHIJ" + suffix, suffix: suffix,
				amount: int64(100 + i%5000), dup: i%1000 == 999})
		}
		for _, it := range group {
			ts = ts.Add(1733 * time.Microsecond)
			write(&journal.Record{V: journal.Version, Type: journal.TypeIntent, Time: ts, Batch: "2024-05-refunds", Item: it.id,
				Charge: it.charge, Attempt: 1, Key: "refundkit:2024-05-refunds:" + it.id + ":1", Amount: it.amount, Reason: "requested_by_customer"})
		}
		for k := range group {
			it := group[(k*3+n/workers)%workers] // outcomes come back in another order
			ts = ts.Add(211 * time.Microsecond)
			write(&journal.Record{V: journal.Version, Type: journal.TypeRefunded, Time: ts, Batch: "2024-05-refunds", Item: it.id,
				Charge: it.charge, Attempt: 1, Key: "refundkit:2024-05-refunds:" + it.id + ":1", Refund: "re_3PabcdefGHIJ" + it.suffix,
				Amount: it.amount, Currency: "eur", Status: "succeeded", Source: journal.SourceAPI})
		}
		for _, it := range group {
			if it.dup {
				write(&journal.Record{V: journal.Version, Type: journal.TypeRefunded, Time: ts.Add(time.Hour), Batch: "2024-05-refunds", Item: it.id,
					Charge: it.charge, Attempt: 2, Key: "refundkit:2024-05-refunds:" + it.id + ":2", Refund: "re_3PabcdefGHIX" + it.suffix,
					Amount: it.amount, Currency: "eur", Status: "succeeded", Source: journal.SourceReconciled})
				out.duplicates = append(out.duplicates, it.charge)
			}
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

// BenchmarkAuditOffline audits a 1M-record journal (500k items, one in a
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

// TestAuditDuplicatesMatchJQ checks the benchmark's claim on a smaller journal:
// audit finds the duplicates that
// `jq -c 'select(.type=="refunded")|.charge' j.jsonl | sort | uniq -d` finds.
func TestAuditDuplicatesMatchJQ(t *testing.T) {
	jq, err := exec.LookPath("jq")
	if err != nil {
		t.Skip("jq is not installed")
	}
	path := filepath.Join(t.TempDir(), "j.jsonl")
	big := writeBigJournal(t, path, 20_000)
	out, err := exec.Command("sh", "-c", jq+` -c 'select(.type=="refunded")|.charge' "$1" | sort | uniq -d`, "sh", path).Output()
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, l := range strings.Fields(string(out)) {
		want = append(want, strings.Trim(l, `"`))
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a := New()
	if _, err := a.AddJournal(f, path); err != nil {
		t.Fatal(err)
	}
	var got []string
	if _, err := a.Run(context.Background(), Options{}, func(f *Finding) { got = append(got, f.Finding+" "+f.Charge) }); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		want[i] = KindDuplicate + " " + want[i]
	}
	slices.Sort(got)
	slices.Sort(want)
	if len(want) != len(big.duplicates) || !slices.Equal(got, want) {
		t.Fatalf("audit found %d findings, jq %d duplicates (%d written):\n%v\n%v", len(got), len(want), len(big.duplicates), got, want)
	}
}
