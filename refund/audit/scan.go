package audit

import (
	"io"
	"runtime"

	"github.com/refundkit/refundkit/journal"
)

// blockSize is how much of a journal one worker decodes at a time; tests
// shrink it.
var blockSize = 1 << 20

// recordSink takes the records of a journal, a run of consecutive lines at
// a time.
type recordSink interface {
	// hashItem hashes an item name; workers call it concurrently.
	hashItem(item string) uint64
	// applyRun takes records of consecutive lines from line first, with
	// their items' hashes, valid only during the call: it copies what it
	// keeps.
	applyRun(recs []*journal.Record, hashes []uint64, name string, first int)
}

// scanJournal hands every record to the sink, in order, the Reader's
// workers hashing the items. It returns the number of records and the
// torn tail; a corrupt line or an unknown version is an error.
func scanJournal(r io.Reader, name string, sink recordSink) (int, *journal.Torn, error) {
	rd := journal.NewReader(r, name, journal.ReadOptions{
		Workers:   max(1, runtime.GOMAXPROCS(0)),
		BlockSize: blockSize,
		ItemHash:  sink.hashItem,
	})
	defer rd.Close()
	n := 0
	var run []*journal.Record
	for rd.Next() {
		recs, hashes := rd.Records(), rd.Hashes()
		for k := 0; k < len(recs); {
			end := rd.RunEnd(k) // commit lines end a run of consecutive lines
			run = run[:0]
			for i := k; i < end; i++ {
				run = append(run, &recs[i])
			}
			sink.applyRun(run, hashes[k:end], name, rd.Line(k))
			k = end
		}
		n += len(recs)
	}
	clear(run) // let the last block go
	return n, rd.Torn(), rd.Err()
}
