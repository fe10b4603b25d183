package plan

import (
	"bytes"
	"errors"
	"testing"
)

var fuzzFormats = []Format{FormatAuto, FormatCSV, FormatJSONL, FormatIDs}

// FuzzRead: Read never panics; it returns either valid items of the batch
// with distinct ids, or a *Rejection with at least one problem; and a
// plan it writes reads back as the same plan. The seed corpus is in
// testdata/fuzz/FuzzRead. format picks the format (its low two bits) and
// whether bare ids are captures (bit 3).
func FuzzRead(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte, format uint8, keep bool) {
		opts := Options{Batch: "b1", Format: fuzzFormats[int(format)%len(fuzzFormats)], KeepColumns: keep}
		if format&8 != 0 {
			opts.IDs = IDsCapture
		}
		p, err := Read(bytes.NewReader(data), "fuzz", opts)
		if err != nil {
			var ie *Rejection
			if !errors.As(err, &ie) {
				t.Fatalf("not a *Rejection: %v", err)
			}
			if p != nil || len(ie.Problems) == 0 || ie.Total < len(ie.Problems) {
				t.Fatalf("a plan of %v, %d of %d problems", p, len(ie.Problems), ie.Total)
			}
			return
		}
		items := p.Items()
		if len(items) == 0 {
			t.Fatal("no items and no error")
		}
		seen := make(map[string]bool)
		rows := make(map[string]int) // per charge, payment intent or capture
		for i := range items {
			rows[items[i].Target()]++
		}
		for i := range items {
			if rows[items[i].Target()] > 1 && items[i].Amount == 0 {
				t.Fatalf("%s is refunded in parts, one of them in full", items[i].Target())
			}
			it := &items[i]
			if err := it.Validate(); err != nil {
				t.Fatalf("item %d: %v", i, err)
			}
			if it.Batch != opts.Batch {
				t.Fatalf("item %d: batch %q", i, it.Batch)
			}
			if seen[it.Item] {
				t.Fatalf("item id %q twice", it.Item)
			}
			seen[it.Item] = true
		}
		plan := encode(t, items)
		again, err := Read(bytes.NewReader([]byte(plan)), "plan", Options{Batch: "b1", Format: FormatJSONL})
		if err != nil {
			t.Fatalf("the plan does not read back: %v\n%s", err, plan)
		}
		if back := encode(t, again.Items()); back != plan {
			t.Fatalf("the plan reads back as\n%s\nnot\n%s", back, plan)
		}
		// Shards of the plan partition it.
		n := 1 + int(format)%4
		count := 0
		for k := 1; k <= n; k++ {
			for it := range p.Shard(k, n).All() {
				if !InShard(it.Batch, it.Target(), k, n) {
					t.Fatalf("%s in shard %d/%d", it.Item, k, n)
				}
				count++
			}
		}
		if count != p.Len() {
			t.Fatalf("%d shards hold %d items, the plan %d", n, count, p.Len())
		}
	})
}
