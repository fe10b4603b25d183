package journal

import (
	"errors"
	"fmt"
)

// LockedError: another writer or tool, in any process, holds the journal.
type LockedError struct{ Path string }

func (e *LockedError) Error() string {
	return fmt.Sprintf("journal %s is locked by another run", e.Path)
}

// CorruptError is a bad line that no crash explains: never skipped or repaired.
type CorruptError struct {
	Path   string
	Line   int   // 1-based
	Offset int64 // byte offset of the line's start
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("%s:%d: corrupt record: %s", e.Path, e.Line, e.Reason)
}

// WriteError is a failed write or fsync, or ErrReplaced: the writer is
// failed for good and every later Append returns it.
type WriteError struct {
	Path string
	Err  error
}

func (e *WriteError) Error() string {
	if errors.Is(e.Err, ErrReplaced) {
		return fmt.Sprintf("journal %s: %v", e.Path, e.Err)
	}
	return fmt.Sprintf("journal %s: write failed: %v", e.Path, e.Err)
}

func (e *WriteError) Unwrap() error { return e.Err }

// Torn is a tail never acknowledged, as a crash leaves it (see decide).
// Load and Scanner report it; Open saves it aside and cuts it.
type Torn struct {
	Path    string
	Line    int    // 1-based line number of the torn line
	Offset  int64  // where the torn bytes start; the file is cut here
	Bytes   int    // how many bytes were torn
	SavedTo string // where Open copied the torn bytes; empty for Load and Scanner
}

func (t *Torn) String() string {
	if t.SavedTo == "" {
		return fmt.Sprintf("%s:%d: torn final record (%d bytes at offset %d) ignored", t.Path, t.Line, t.Bytes, t.Offset)
	}
	return fmt.Sprintf("%s:%d: torn final record (%d bytes at offset %d) cut off and saved to %s", t.Path, t.Line, t.Bytes, t.Offset, t.SavedTo)
}

// lineError puts file:line before an error errors.As must still find.
type lineError struct {
	path string
	line int
	err  error
}

func (e *lineError) Error() string { return fmt.Sprintf("%s:%d: %v", e.path, e.line, e.err) }
func (e *lineError) Unwrap() error { return e.err }

// NotFileError is a journal path naming no regular file, or a link to
// nothing: refused at once, never waited on or written through.
type NotFileError struct {
	Path string
	What string // "a directory, not a file", "a symbolic link to x, which does not exist"
}

func (e *NotFileError) Error() string { return fmt.Sprintf("journal %s is %s", e.Path, e.What) }

// ErrReplaced is the cause of a Writer's *WriteError when a program that
// ignores the lock removed or replaced the journal.
var ErrReplaced = errors.New("the journal file was replaced or removed while this run held it")

type replacedError struct{ how string }

func (e *replacedError) Error() string {
	return fmt.Sprintf("the journal file was %s while this run held it (a program that ignores the journal's lock?): records written after that are not in the journal", e.how)
}

func (e *replacedError) Is(target error) bool { return target == ErrReplaced }
