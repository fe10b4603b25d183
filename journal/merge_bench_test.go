package journal

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkMerge merges 8 shards of a batch, 1M records in all. Set
// JOURNAL_MERGE_BENCH_DIR to a directory to keep the shards there (made
// once) and compare with sort -m on the same files.
func BenchmarkMerge(b *testing.B) {
	dir := os.Getenv("JOURNAL_MERGE_BENCH_DIR")
	paths, _ := filepath.Glob(filepath.Join(dir, "shard*.jsonl"))
	if dir == "" || len(paths) == 0 {
		if dir == "" {
			dir = b.TempDir()
		}
		paths = writeShards(b, dir, 8, 62_500)
	}
	var size int64
	for _, p := range paths {
		info, _ := os.Stat(p)
		size += info.Size()
	}
	for _, compact := range []bool{false, true} {
		name := "plain"
		if compact {
			name = "compact"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(size)
			b.ReportAllocs()
			for b.Loop() {
				rep, err := MergeWith(paths, io.Discard, MergeOptions{Compact: compact})
				if err != nil {
					b.Fatal(err)
				}
				if len(rep.Conflicts) != 0 || rep.Duplicates != 0 || rep.Records+rep.Compacted != 1_000_000 {
					b.Fatalf("%d records, %d compacted, %d duplicates, %d conflicts", rep.Records, rep.Compacted, rep.Duplicates, len(rep.Conflicts))
				}
			}
		})
	}
}

// writeShards writes n shards of items each, intent and refunded per item,
// their timestamps interleaved as concurrent shards write them.
func writeShards(tb testing.TB, dir string, n, items int) []string {
	var paths []string
	for s := range n {
		p := filepath.Join(dir, fmt.Sprintf("shard%03d.jsonl", s))
		writeBigJournal(tb, p, items, true, s)
		paths = append(paths, p)
	}
	return paths
}
