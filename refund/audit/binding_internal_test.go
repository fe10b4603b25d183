package audit

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/refundkit/refundkit/journal"
)

// sharedFindings audits journal text offline, its refund ids hashed by hash
// when it is set, and returns the shared_refund findings as "item:id".
func sharedFindings(t *testing.T, text string, hash func(string) uint64) []string {
	t.Helper()
	a := New()
	a.st.refundHash = hash
	if _, err := a.AddJournal(strings.NewReader(text), "j.jsonl"); err != nil {
		t.Fatal(err)
	}
	var got []string
	if _, err := a.Run(context.Background(), Options{}, func(f *Finding) {
		if f.Finding == KindSharedRefund {
			got = append(got, f.Item+":"+f.Refunds[0].ID+"@"+f.Refunds[1].Item)
		}
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// Refund ids are compared whenever their hashes meet: with every id hashed
// alike, ids are still told apart (and the table grows past its first
// size), and the one id two items share is still found, extras included.
func TestSharedRefundIDsCollide(t *testing.T) {
	var recs []byte
	add := func(item, id string, k int) {
		r := &journal.Record{V: journal.Version, Type: journal.TypeRefunded, Time: time.Unix(int64(k), 0).UTC(), Batch: "b1", Item: item,
			Charge: "ch_" + item, Attempt: 1, Refund: id, Amount: 100, Currency: "usd", Status: "succeeded", Source: journal.SourceAPI}
		var err error
		if recs, err = journal.MarshalLine(recs, r); err != nil {
			t.Fatal(err)
		}
	}
	const n = 3000
	for k := range n {
		add(fmt.Sprint("i", k), fmt.Sprint("re_", k), k)
	}
	add("i7", "re_extra", n)      // a second refund of i7: a duplicate
	add("late", "re_1234", n+1)   // i1234's
	add("later", "re_extra", n+2) // i7's extra
	add("i1234", "re_1234", n+3)  // its own, again
	collide := func(string) uint64 { return 42 }
	for _, hash := range []func(string) uint64{nil, collide} {
		got := sharedFindings(t, string(recs), hash)
		if want := "[late:re_1234@i1234 later:re_extra@i7]"; fmt.Sprint(got) != want {
			t.Errorf("collide %v: shared %v, want %s", hash != nil, got, want)
		}
	}
}

// The refund index costs a few bytes a refund, never a copy of its id: on
// a journal of 200,000 items, indexing every refund allocates less than 24
// bytes an item.
func TestSharedPassMemory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	writeBigJournal(t, path, 400_000)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	a := New()
	if _, err := a.AddJournal(f, path); err != nil {
		t.Fatal(err)
	}
	r := &run{Auditor: a, rep: newReport()}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if found := r.sharedPass(); len(found) != 0 {
		t.Errorf("findings %+v", found)
	}
	runtime.ReadMemStats(&after)
	items := int(a.st.n)
	perItem := float64(after.TotalAlloc-before.TotalAlloc) / float64(items)
	if items < 190_000 || perItem > 24 {
		t.Errorf("%d items: the refund index allocated %.1f bytes an item", items, perItem)
	}
	t.Logf("%d items: the refund index allocated %.1f bytes an item", items, perItem)
}

// BenchmarkSharedPass is the refund index alone over the journal of
// BenchmarkAuditOffline (500k items), to set beside its whole audit.
func BenchmarkSharedPass(b *testing.B) {
	path := filepath.Join(b.TempDir(), "j.jsonl")
	writeBigJournal(b, path, 1_000_000)
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	a := New()
	if _, err := a.AddJournal(f, path); err != nil {
		b.Fatal(err)
	}
	f.Close()
	b.ReportAllocs()
	for b.Loop() {
		r := &run{Auditor: a, rep: newReport()}
		if found := r.sharedPass(); len(found) != 0 {
			b.Fatalf("findings %+v", found)
		}
	}
}
