package crashrig

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
)

func TestExitCode(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"exit 0", exec.Command("sh", "-c", "exit 0").Run(), 0},
		{"exit 3", exec.Command("sh", "-c", "exit 3").Run(), 3},
		{"killed", exec.Command("sh", "-c", "kill -9 $$").Run(), -9},
		{"not started", exec.Command(filepath.Join(t.TempDir(), "none")).Run(), NotRun},
	}
	for _, tt := range tests {
		if got := ExitCode(tt.err); got != tt.want {
			t.Errorf("%s: ExitCode = %d, want %d", tt.name, got, tt.want)
		}
	}
}

// problems is a Reporter that keeps what it is told.
type problems []string

func (p *problems) Errorf(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

var ts = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

func intent(batch, item string) *journal.Record {
	return &journal.Record{V: journal.Version, Type: journal.TypeIntent, Time: ts, Batch: batch, Item: item,
		Charge: "ch_1", Attempt: 1, Key: refund.IdempotencyKey(batch, item, 1)}
}

func refunded(batch, item string) *journal.Record {
	r := intent(batch, item)
	r.Type, r.Amount, r.Refund, r.Status, r.Source = journal.TypeRefunded, 5, "re_"+item, "succeeded", journal.SourceAPI
	return r
}

// write makes a journal with package journal's own writer, one Append (one
// group commit) a group, so it is framed as refund frames it.
func write(t *testing.T, path string, groups ...[]*journal.Record) {
	t.Helper()
	w, _, _, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		if err := w.Append(g...); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func line(t *testing.T, r *journal.Record) string {
	t.Helper()
	b, err := journal.MarshalLine(nil, r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestSnapshotCountsLostRecords: Lost counts records, not lines, from the
// first byte that changed; a torn tail is not a record.
func TestSnapshotCountsLostRecords(t *testing.T) {
	rec := func(item string) string { return line(t, intent("b", item)) }
	three := rec("a") + rec("b") + rec("c")
	tests := []struct {
		name, before, after string
		lost                int
	}{
		{"records appended", three, three + rec("d"), 0},
		{"unchanged", three, three, 0},
		{"torn tail cut off", three + `{"v":1,"ty`, three + rec("d"), 0},
		{"last record gone", three, rec("a") + rec("b"), 1},
		{"middle record changed", three, rec("a") + rec("x") + rec("c"), 2},
		{"emptied", three, "", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "j.jsonl")
			if err := os.WriteFile(path, []byte(tt.before), 0o600); err != nil {
				t.Fatal(err)
			}
			s := TakeSnapshot(path)
			if err := os.WriteFile(path, []byte(tt.after), 0o600); err != nil {
				t.Fatal(err)
			}
			if got := s.Lost(); got != tt.lost {
				t.Errorf("Lost = %d, want %d", got, tt.lost)
			}
		})
	}
	t.Run("deleted", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "j.jsonl")
		if err := os.WriteFile(path, []byte(three), 0o600); err != nil {
			t.Fatal(err)
		}
		s := TakeSnapshot(path)
		os.Remove(path)
		if got := s.Lost(); got != 3 {
			t.Errorf("Lost = %d after the journal was deleted, want 3", got)
		}
	})
}

// TestSnapshotOfAFramedJournal: a journal as the writer frames it (group
// commits) counts its records, whatever lines frame them.
func TestSnapshotOfAFramedJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	write(t, path, []*journal.Record{intent("b", "a"), intent("b", "b")}, []*journal.Record{refunded("b", "a")})
	s := TakeSnapshot(path)
	if s.Records() != 3 {
		t.Errorf("a journal of 3 records in 2 group commits: Records = %d", s.Records())
	}
	write(t, path, []*journal.Record{refunded("b", "b")})
	if got := s.Lost(); got != 0 {
		t.Errorf("after a group commit appended: Lost = %d, want 0", got)
	}
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	if got := s.Lost(); got != 3 {
		t.Errorf("after the journal was emptied: Lost = %d, want 3", got)
	}
}

// TestCheckIntentsFindsAnUnjournaledCall: a key the simulator reserved
// with no journaled intent is a broken write-ahead rule.
func TestCheckIntentsFindsAnUnjournaledCall(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	write(t, path, []*journal.Record{intent("b", "i1")}, []*journal.Record{refunded("b", "i1")})
	keys := []string{
		refund.IdempotencyKey("b", "i1", 1),
		refund.IdempotencyKey("b", "i2", 1),
		refund.IdempotencyKey("other", "i9", 1), // another batch: not this journal's
	}
	var p problems
	checkIntents(&p, keys, "b", path)
	if len(p) != 1 || !strings.Contains(p[0], "refundkit:b:i2:1") {
		t.Errorf("checkIntents found %q, want one problem naming refundkit:b:i2:1", p)
	}
}

// TestRewriteRecords: only the records edit changes are rewritten, the
// rest stay byte for byte, a torn tail too, and the result loads as a
// whole journal: its group commits are framed anew.
func TestRewriteRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.jsonl")
	write(t, path, []*journal.Record{intent("b", "a")}, []*journal.Record{refunded("b", "a"), intent("b", "c")})
	torn := `{"v":1,"type":"int`
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(torn)
	f.Close()

	const d = -49 * time.Hour
	err = RewriteRecords(path, func(r *journal.Record) bool {
		if r.Type != journal.TypeIntent {
			return false
		}
		r.Time = r.Time.Add(d)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	j, err := ReadJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	if j.Err != nil {
		t.Fatalf("the rewritten journal does not load: %v", j.Err)
	}
	shifted := func(r *journal.Record) *journal.Record { r.Time = r.Time.Add(d); return r }
	want := []string{line(t, shifted(intent("b", "a"))), line(t, refunded("b", "a")), line(t, shifted(intent("b", "c")))}
	var got []string
	for _, l := range j.Lines {
		got = append(got, string(j.Data[l.Start:l.End]))
	}
	if strings.Join(got, "") != strings.Join(want, "") {
		t.Errorf("records after the rewrite:\n%s\nwant\n%s", got, want)
	}
	if tail := string(j.Data[j.Complete:]); tail != torn {
		t.Errorf("torn tail after the rewrite %q, want %q", tail, torn)
	}
}
