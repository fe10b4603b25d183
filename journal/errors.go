package journal

import "fmt"

// LockedError is returned by Open when another writer, in this process or
// another, holds the journal.
type LockedError struct{ Path string }

func (e *LockedError) Error() string {
	return fmt.Sprintf("journal %s is locked by another run", e.Path)
}

// CorruptError is a line that is not a valid record and is not the last line
// of the file, so no crash can explain it: it is never skipped or repaired.
type CorruptError struct {
	Path   string
	Line   int   // 1-based
	Offset int64 // byte offset of the line's start
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("%s:%d: corrupt record: %s", e.Path, e.Line, e.Reason)
}

// WriteError is a failed write or fsync. The writer that returned it is
// failed for good: every later Append returns it too and writes nothing.
type WriteError struct {
	Path string
	Err  error
}

func (e *WriteError) Error() string {
	return fmt.Sprintf("journal %s: write failed: %v", e.Path, e.Err)
}

// Unwrap returns the underlying I/O error (ENOSPC, EIO, ...).
func (e *WriteError) Unwrap() error { return e.Err }

// Torn is an incomplete final line, as a crash during a write leaves it: a
// line without '\n', or a last line that is not JSON (NUL bytes included).
// Load and Scanner only report it; Open saves the bytes aside and cuts them.
type Torn struct {
	Path    string
	Line    int    // 1-based line number of the torn line
	Offset  int64  // where the torn bytes start; the file is cut here
	Bytes   int    // how many bytes were torn
	SavedTo string // where Open copied the torn bytes; empty for Load and Scanner
}

// String is a one-line warning for people.
func (t *Torn) String() string {
	if t.SavedTo == "" {
		return fmt.Sprintf("%s:%d: torn final record (%d bytes at offset %d) ignored", t.Path, t.Line, t.Bytes, t.Offset)
	}
	return fmt.Sprintf("%s:%d: torn final record (%d bytes at offset %d) cut off and saved to %s", t.Path, t.Line, t.Bytes, t.Offset, t.SavedTo)
}

// lineError puts file:line in front of an error that must stay findable
// with errors.As, such as *VersionError.
type lineError struct {
	path string
	line int
	err  error
}

func (e *lineError) Error() string { return fmt.Sprintf("%s:%d: %v", e.path, e.line, e.err) }
func (e *lineError) Unwrap() error { return e.err }
