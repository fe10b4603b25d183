package journal

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// BenchmarkMerge merges 8 shards of a batch, 1M records in all. Set
// JOURNAL_MERGE_BENCH_DIR to merge existing shard*.jsonl files instead (to
// compare with sort -m on the same files).
func BenchmarkMerge(b *testing.B) {
	paths, _ := filepath.Glob(filepath.Join(os.Getenv("JOURNAL_MERGE_BENCH_DIR"), "shard*.jsonl"))
	if os.Getenv("JOURNAL_MERGE_BENCH_DIR") == "" {
		paths = writeShards(b, b.TempDir(), 8, 62_500)
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
				if len(rep.Conflicts) != 0 {
					b.Fatal(rep.Conflicts)
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
		p := filepath.Join(dir, "shard"+strings.Repeat("0", 2)+string(rune('0'+s))+".jsonl")
		writeBigJournal(tb, p, items, true)
		paths = append(paths, p)
	}
	return paths
}
