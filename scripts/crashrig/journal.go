package crashrig

import (
	"bytes"
	"errors"
	"io/fs"
	"os"

	"github.com/refundkit/refundkit/journal"
)

// Line is one record of a journal and where its line lies in the file.
type Line struct {
	Record     *journal.Record
	Line       int   // 1-based line number in the file
	Start, End int64 // byte offsets of the line; End is after its '\n'
}

// Journal is a journal's bytes as package journal reads them: its records
// (framing lines, such as a group commit's, are not records) and where its
// complete part ends. The rig reads journals only through this.
type Journal struct {
	Path  string
	Data  []byte
	Lines []Line
	// Complete is where the complete part ends: the start of a torn tail,
	// or len(Data). After corruption it is where the reader stopped.
	Complete int64
	// Err is the corruption that stopped the reader, nil if none.
	Err error
}

// ReadJournal reads the journal at path.
func ReadJournal(path string) (*Journal, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseJournal(path, data), nil
}

// ParseJournal reads data, the bytes of the journal at path.
func ParseJournal(path string, data []byte) *Journal {
	j := &Journal{Path: path, Data: data, Complete: int64(len(data))}
	sc := journal.NewScanner(bytes.NewReader(data), path)
	for sc.Scan() {
		start := sc.Offset()
		end := start + int64(bytes.IndexByte(data[start:], '\n')) + 1
		j.Lines = append(j.Lines, Line{Record: sc.Record(), Line: sc.Line(), Start: start, End: end})
	}
	switch {
	case sc.Err() != nil:
		j.Err = sc.Err()
		j.Complete = 0
		if n := len(j.Lines); n > 0 {
			j.Complete = j.Lines[n-1].End
		}
	case sc.Torn() != nil:
		j.Complete = sc.Torn().Offset
	}
	return j
}

// Intents are the idempotency keys the intents of the journals name.
func Intents(paths ...string) (map[string]bool, error) {
	keys := map[string]bool{}
	var errs []error
	for _, path := range paths {
		j, err := ReadJournal(path)
		if err == nil {
			err = j.Err
		}
		if err != nil {
			errs = append(errs, err)
		}
		if j == nil {
			continue
		}
		for _, l := range j.Lines {
			if l.Record.Type == journal.TypeIntent {
				keys[l.Record.Key] = true
			}
		}
	}
	return keys, errors.Join(errs...)
}

// RewriteRecords rewrites the journal at path with each record that edit
// changes (it returns true) written anew. The lines between records are the
// framing that ends each group commit: each is written anew over its
// group's new bytes (journal.AppendCommit), so the journal stays as the
// writer frames it. Framing before the first record and a torn tail are
// kept as they are.
func RewriteRecords(path string, edit func(*journal.Record) bool) error {
	j, err := ReadJournal(path)
	if err != nil {
		return err
	}
	if j.Err != nil {
		return j.Err
	}
	var out []byte
	if len(j.Lines) > 0 {
		out = append(out, j.Data[:j.Lines[0].Start]...)
	}
	group, n := len(out), 0 // where the current group commit starts in out, its records
	for i, l := range j.Lines {
		if edit(l.Record) {
			if out, err = journal.MarshalLine(out, l.Record); err != nil {
				return err
			}
		} else {
			out = append(out, j.Data[l.Start:l.End]...)
		}
		n++
		next := j.Complete
		if i+1 < len(j.Lines) {
			next = j.Lines[i+1].Start
		}
		if next > l.End { // framing follows: the group's commit
			out = journal.AppendCommit(out, out[group:], n)
			group, n = len(out), 0
		}
	}
	out = append(out, j.Data[j.Complete:]...)
	return os.WriteFile(path, out, 0o600)
}

// Snapshot is a journal's complete records at one moment, to find later
// whether a run lost any. A torn tail is not part of it; a corrupt journal
// counts whole, since it must be left exactly as it is.
type Snapshot struct {
	Path string
	data []byte
	ends []int64 // where each record's line ends
	// rest is true when data goes on past the last record the reader could
	// read (after corruption): a change there counts as one record lost.
	rest bool
}

// TakeSnapshot snapshots the journal at path; a journal that does not
// exist is an empty one.
func TakeSnapshot(path string) Snapshot {
	s := Snapshot{Path: path}
	j, err := ReadJournal(path)
	if err != nil {
		return s
	}
	s.data = j.Data[:j.Complete]
	if j.Err != nil {
		s.data = j.Data
		s.rest = j.Complete < int64(len(j.Data))
	}
	for _, l := range j.Lines {
		s.ends = append(s.ends, l.End)
	}
	return s
}

// Records is how many records the snapshot holds.
func (s Snapshot) Records() int { return len(s.ends) }

// Len is how many bytes of the journal the snapshot holds.
func (s Snapshot) Len() int64 { return int64(len(s.data)) }

// Lost counts the snapshot's records that the journal no longer holds,
// byte for byte, at the same place: those whose line ends after the
// first byte that differs.
func (s Snapshot) Lost() int {
	now, err := os.ReadFile(s.Path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		now = nil
	}
	if bytes.HasPrefix(now, s.data) {
		return 0
	}
	i := 0
	for i < len(now) && i < len(s.data) && now[i] == s.data[i] {
		i++
	}
	lost := 0
	for _, end := range s.ends {
		if end > int64(i) {
			lost++
		}
	}
	if s.rest {
		lost++
	}
	return lost
}
