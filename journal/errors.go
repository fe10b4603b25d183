package journal

import (
	"errors"
	"fmt"
)

// LockedError is returned by Open and TakeLock when another writer or tool,
// in this process or another, holds the journal.
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

// WriteError is a failed write or fsync, or a journal replaced behind the
// writer's back (ErrReplaced). The writer that returned it is
// failed for good: every later Append returns it too and writes nothing.
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

// Unwrap returns the underlying I/O error (ENOSPC, EIO, ...).
func (e *WriteError) Unwrap() error { return e.Err }

// Torn is a tail that was never acknowledged, as a crash during a write
// leaves it: everything from the end of the last valid commit line when
// something after it is wrong, or (in a journal without commit lines) an
// incomplete final line. Load and Scanner only report it; Open saves the
// bytes aside and cuts them.
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

// NotFileError is a journal path that names something other than a regular
// file (a directory, a named pipe, a device, a socket) or a symbolic link
// to nothing. It is refused at once: never waited on, written through, or
// created at the link's target.
type NotFileError struct {
	Path string
	What string // "a directory, not a file", "a symbolic link to x, which does not exist"
}

func (e *NotFileError) Error() string { return fmt.Sprintf("journal %s is %s", e.Path, e.What) }

// ErrReplaced is the cause of the *WriteError of a Writer whose path stopped
// naming the file it holds: a program that ignores the lock removed,
// renamed or replaced the journal. The records written after that went to a
// file nobody will read as the journal.
var ErrReplaced = errors.New("the journal file was replaced or removed while this run held it")

// replacedError says how the path changed; it is ErrReplaced to errors.Is.
type replacedError struct{ how string }

func (e *replacedError) Error() string {
	return fmt.Sprintf("the journal file was %s while this run held it (a program that ignores the journal's lock?): records written after that are not in the journal", e.how)
}

func (e *replacedError) Is(target error) bool { return target == ErrReplaced }
