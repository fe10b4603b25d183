package audit

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/refundkit/refundkit/journal"
)

// collect is a sink that keeps what it is given.
type collect struct {
	lines []int
	items []string
}

func (c *collect) hashItem(item string) uint64 { return uint64(len(item)) }

func (c *collect) applyRun(recs []*journal.Record, hashes []uint64, name string, first int) {
	for k, r := range recs {
		if hashes[k] != uint64(len(r.Item)) {
			panic("hash not of the record's item")
		}
		c.lines = append(c.lines, first+k)
		// Copied, as the sink contract asks: the bytes are reused.
		c.items = append(c.items, strings.Clone(r.Item))
	}
}

// scanOutcome is what reading a journal gave, comparable between readers.
type scanOutcome struct {
	lines []int
	items []string
	torn  string
	err   string
}

func (o scanOutcome) String() string {
	return fmt.Sprintf("%d records (lines %v), torn %q, err %q", len(o.items), o.lines, o.torn, o.err)
}

func equal(a, b scanOutcome) bool {
	return a.String() == b.String() && strings.Join(a.items, ",") == strings.Join(b.items, ",")
}

// sequential reads data with one journal.Scanner: the reference.
func sequential(data []byte) scanOutcome {
	var o scanOutcome
	sc := journal.NewScanner(bytes.NewReader(data), "j.jsonl")
	for sc.Scan() {
		o.lines = append(o.lines, sc.Line())
		o.items = append(o.items, sc.Record().Item)
	}
	if t := sc.Torn(); t != nil {
		o.torn = t.String()
	}
	o.err = describe(sc.Err())
	return o
}

// describe is an error's text and, for corruption, where the line starts.
func describe(err error) string {
	var corrupt *journal.CorruptError
	if errors.As(err, &corrupt) {
		return fmt.Sprintf("%v (offset %d)", err, corrupt.Offset)
	}
	if err != nil {
		return err.Error()
	}
	return ""
}

func parallel(data []byte) scanOutcome {
	var o scanOutcome
	c := &collect{}
	n, torn, err := scanJournal(bytes.NewReader(data), "j.jsonl", c)
	if n != len(c.items) {
		o.err = fmt.Sprintf("counted %d records, applied %d", n, len(c.items))
		return o
	}
	o.lines, o.items = c.lines, c.items
	if torn != nil {
		o.torn = torn.String()
	}
	o.err = describe(err)
	return o
}

func journalLines(n int) []byte {
	var b []byte
	for i := range n {
		var err error
		b, err = journal.MarshalLine(b, &journal.Record{V: journal.Version, Type: journal.TypeIntent, Time: time.Date(2024, 5, 1, 9, 0, i, 0, time.UTC),
			Batch: "b1", Item: fmt.Sprintf("item-%d%s", i, strings.Repeat("x", i%7*9)), Charge: "ch_1", Attempt: 1, Key: "k"})
		if err != nil {
			panic(err)
		}
	}
	return b
}

// scanCases are journals whose bad lines land anywhere relative to block
// boundaries once blocks are small.
func scanCases() map[string][]byte {
	good := journalLines(40)
	lines := bytes.SplitAfter(good, []byte("\n"))
	at := func(k int, insert string) []byte {
		return []byte(string(bytes.Join(lines[:k], nil)) + insert + string(bytes.Join(lines[k:], nil)))
	}
	cases := map[string][]byte{
		"empty":                      nil,
		"clean":                      good,
		"torn without newline":       append(bytes.Clone(good), `{"v":1,"type":"inte`...),
		"torn with newline":          append(bytes.Clone(good), "{\"v\":1,\"type\x00\x00\n"...),
		"nul bytes at the end":       append(bytes.Clone(good), "\x00\x00\x00\x00"...),
		"appended after a torn line": append(bytes.Clone(good[:len(good)-20]), lines[3]...),
		"empty line at the end":      append(bytes.Clone(good), '\n'),
		"long last line":             append(bytes.Clone(good), bytes.Repeat([]byte("y"), 3000)...),
		"long line in the middle":    at(20, strings.Repeat("y", 3000)+"\n"),
		"version 2 in the middle":    at(17, `{"v":2,"type":"intent"}`+"\n"),
		"no newline at all":          []byte(strings.Repeat("z", 5000)),
	}
	// Framed as journal.Writer writes it: commits of 5 records each.
	var framed []byte
	for k := 0; k+5 <= 40; k += 5 {
		group := bytes.Join(lines[k:k+5], nil)
		framed = journal.AppendCommit(append(framed, group...), group, 5)
	}
	cases["framed"] = framed
	garbled := func(from int) []byte {
		b := bytes.Clone(framed)
		clear(b[from : from+30])
		return b
	}
	cases["framed, final commit garbled"] = garbled(len(framed) - 400)
	cases["framed, earlier commit garbled"] = garbled(len(framed) / 2)
	cases["framed, torn last line"] = framed[:len(framed)-10]
	for k := 1; k < len(lines); k += 3 {
		cases[fmt.Sprintf("garbage after line %d", k)] = at(k, "garbage\n")
		cases[fmt.Sprintf("torn line then more after line %d", k)] = at(k, `{"v":1,"ty`+"\n")
	}
	return cases
}

// TestAuditScanMatchesTheJournalScanner: cutting a journal into blocks read in
// parallel changes nothing the journal's own Scanner says about it.
func TestAuditScanMatchesTheJournalScanner(t *testing.T) {
	defer func(n int) { blockSize = n }(blockSize)
	for name, data := range scanCases() {
		want := sequential(data)
		for _, size := range []int{64, 257, 1000, 4096, 1 << 20} {
			blockSize = size
			if got := parallel(data); !equal(got, want) {
				t.Errorf("%s, blocks of %d: %v\nwant %v", name, size, got, want)
			}
		}
	}
}

// TestAuditScanSkipsCommitLines: the commit lines of a framed journal are
// framing: the sink gets the 40 records, at their own line numbers.
func TestAuditScanSkipsCommitLines(t *testing.T) {
	o := parallel(scanCases()["framed"])
	if len(o.items) != 40 || o.err != "" || o.torn != "" {
		t.Fatalf("%v", o)
	}
	for k, item := range o.items {
		if !strings.HasPrefix(item, "item-") || o.lines[k] != k+1+k/5 {
			t.Fatalf("record %d: item %q at line %d", k, item, o.lines[k])
		}
	}
	if o := parallel(scanCases()["framed, final commit garbled"]); len(o.items) != 35 || o.torn == "" || o.err != "" {
		t.Errorf("garbled final commit: %v, want its records cut as a torn tail", o)
	}
	if o := parallel(scanCases()["framed, earlier commit garbled"]); !strings.Contains(o.err, "corrupt record") {
		t.Errorf("garbled earlier commit: %v, want corruption", o)
	}
}

func FuzzAuditScan(f *testing.F) {
	for _, data := range scanCases() {
		f.Add(data, uint16(100))
	}
	f.Fuzz(func(t *testing.T, data []byte, size uint16) {
		defer func(n int) { blockSize = n }(blockSize)
		blockSize = int(size%4096) + 1
		if got, want := parallel(data), sequential(data); !equal(got, want) {
			t.Fatalf("blocks of %d: %v\nwant %v", blockSize, got, want)
		}
	})
}
