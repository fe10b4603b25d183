package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/refundkit/refundkit/journal"
)

// records writes s and reads it back, each record line checked as one
// no correct writer would refuse, and the whole loaded by journal.Load:
// its commit lines verify, nothing is torn.
func records(t *testing.T, s runShape) []journal.Record {
	t.Helper()
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	if err := writeRun(w, s); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	path := filepath.Join(t.TempDir(), "j.jsonl")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	state, torn, err := journal.Load(path)
	if err != nil || torn != nil {
		t.Fatalf("journal.Load: %v, torn %v", err, torn)
	}
	if state.Len() != min(s.n, s.done+inFlight) {
		t.Errorf("journal.Load found %d items, want %d", state.Len(), min(s.n, s.done+inFlight))
	}
	var out []journal.Record
	commits := 0
	for i, line := range strings.SplitAfter(buf.String(), "\n") {
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, `{"v":1,"type":"commit"`) {
			commits++
			continue
		}
		var rec journal.Record
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("line %d: %v: %s", i+1, err, line)
		}
		if err := rec.Validate(); err != nil {
			t.Fatalf("line %d: %v: %s", i+1, err, line)
		}
		again, err := journal.MarshalLine(nil, &rec)
		if err != nil || string(again) != line {
			t.Fatalf("line %d is not what journal.MarshalLine writes:\n%s%s", i+1, line, again)
		}
		out = append(out, rec)
	}
	if want := 1 + (len(out)+commitRecords-1)/commitRecords; s.framed && commits != want {
		t.Errorf("%d commit lines, want %d", commits, want)
	}
	if !s.framed && commits != 0 {
		t.Errorf("%d commit lines in an unframed journal", commits)
	}
	return out
}

// TestRunShape checks the order a run writes: each item's intent before
// its outcome, inFlight intents ahead, and a stopped run's tail.
func TestRunShape(t *testing.T) {
	for _, c := range []struct {
		n, done, dups int
		intents       int
		refunded      int
	}{
		{n: 20, done: 20, intents: 20, refunded: 20},
		{n: 20, done: 15, intents: 20, refunded: 15},
		{n: 100, done: 50, intents: 58, refunded: 50},
		{n: 20, done: 20, dups: 3, intents: 20, refunded: 23},
		{n: 3, done: 3, intents: 3, refunded: 3},
	} {
		t.Run(fmt.Sprintf("n=%d,done=%d,dups=%d", c.n, c.done, c.dups), func(t *testing.T) {
			recs := records(t, runShape{batch: "B", n: c.n, done: c.done, dups: c.dups, framed: c.n != 3})
			count := map[journal.Type]int{}
			intentAt := map[string]int{}
			for i, r := range recs {
				count[r.Type]++
				switch r.Type {
				case journal.TypeIntent:
					if _, dup := intentAt[r.Item]; dup {
						t.Errorf("record %d: a second intent for %s", i, r.Item)
					}
					intentAt[r.Item] = i
					if r.Amount == 0 || r.Reason == "" {
						t.Errorf("record %d: an intent without the plan's amount and reason: %+v", i, r)
					}
				case journal.TypeRefunded:
					at, ok := intentAt[r.Item]
					if !ok {
						t.Errorf("record %d: %s refunded before its intent", i, r.Item)
					}
					if r.Source == journal.SourceAPI && i-at > 2*inFlight+1 {
						t.Errorf("record %d: %s's outcome %d records after its intent, want at most %d", i, r.Item, i-at, 2*inFlight+1)
					}
				}
				if i > 0 && !r.Time.After(recs[i-1].Time) {
					t.Errorf("record %d: time %v not after the one before", i, r.Time)
				}
			}
			if count[journal.TypeIntent] != c.intents || count[journal.TypeRefunded] != c.refunded {
				t.Errorf("%d intents, %d refunded: want %d, %d", count[journal.TypeIntent], count[journal.TypeRefunded], c.intents, c.refunded)
			}
		})
	}
}

// TestRunItemIsThePlans checks that the journal's items are the plan's as
// plan writes it from `gen csv`: the charge id is the item.
func TestRunItemIsThePlans(t *testing.T) {
	it := runItem("B", 7)
	if it.Item != "ch_sim0000007" || it.Charge != it.Item || it.Amount != amount(7) {
		t.Errorf("item %+v", it)
	}
	if err := it.Validate(); err != nil {
		t.Error(err)
	}
}
