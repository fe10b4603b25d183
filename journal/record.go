// Package journal is the durable checkpoint of a refund run: an append-only
// file of JSON-line records, fsynced before anything acts on them. An intent
// before each refund call and an outcome after it tell a restart which items
// are done, failed for good, or in doubt.
package journal

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// Version is the record format this package writes and the only one it reads.
const Version = 1

// Type names what a record says about its item.
type Type string

const (
	// TypeIntent is written and fsynced before a refund call.
	TypeIntent Type = "intent"
	// TypeRefunded records a refund that exists at Stripe for the item.
	TypeRefunded Type = "refunded"
	// TypeFailed records a failed call: Final says whether retrying is pointless.
	TypeFailed Type = "failed"
	// TypeCanceled records an extra refund canceled by audit --cancel-extras.
	TypeCanceled Type = "canceled"
)

// Sources of a refunded record: how the refund became known.
const (
	SourceAPI        = "api"        // the create call answered with it
	SourceReplay     = "replay"     // Stripe replayed a saved answer for the key
	SourceReconciled = "reconciled" // found by listing the charge's refunds
	SourceBackfill   = "backfill"   // written by audit --backfill
	SourceSettled    = "settled"    // a pending refund's end, asked for by a later run
)

// HTTPStatusSaved is the http_status of a failure the provider saved under
// the key (its own 500): it burns the key. A gateway's 502 is journaled 0.
const HTTPStatusSaved = 500

// Record is one line of a journal. Field order here is the order on disk.
type Record struct {
	V             int       `json:"v"`
	Type          Type      `json:"type"`
	Time          time.Time `json:"ts"`
	Batch         string    `json:"batch"`
	Item          string    `json:"item"`
	Charge        string    `json:"charge,omitempty"`
	PaymentIntent string    `json:"payment_intent,omitempty"`
	Capture       string    `json:"capture,omitempty"`       // a PayPal capture
	PSPReference  string    `json:"psp_reference,omitempty"` // an Adyen payment
	// Attempt numbers the idempotency keys of an item: a new key is used only
	// after the previous one is known to replay an error forever.
	Attempt int    `json:"attempt,omitempty"`
	Key     string `json:"key,omitempty"`
	// Amount is the requested amount on an intent (0: the full remaining
	// amount) and the refunded amount on a refunded or canceled record.
	Amount   int64  `json:"amount,omitempty"`
	Currency string `json:"currency,omitempty"`
	Reason   string `json:"reason,omitempty"`
	Refund   string `json:"refund,omitempty"`
	// Status is the provider's refund status on a refunded record:
	// PendingStatus while the provider has not finished the refund.
	Status string `json:"status,omitempty"`
	Source string `json:"source,omitempty"`
	// HTTPStatus is Stripe's answer on a failed record; 0 when none came back.
	HTTPStatus int    `json:"http_status,omitempty"`
	Code       string `json:"code,omitempty"`
	Message    string `json:"message,omitempty"`
	Final      bool   `json:"final,omitempty"`
}

// Validate reports a record that no correct writer produces.
func (r *Record) Validate() error {
	if r.V != Version {
		return &VersionError{Version: r.V}
	}
	if r.Batch == "" || r.Item == "" {
		return fmt.Errorf("record without batch or item")
	}
	if r.Time.IsZero() {
		return fmt.Errorf("record without ts")
	}
	switch r.Type {
	case TypeIntent:
		if r.Key == "" || r.Attempt < 1 {
			return fmt.Errorf("intent without key or attempt")
		}
		if r.payments() == [4]string{} {
			return fmt.Errorf("intent without charge, payment_intent, capture or psp_reference")
		}
	case TypeRefunded, TypeCanceled:
		if r.Refund == "" {
			return fmt.Errorf("%s record without refund id", r.Type)
		}
	case TypeFailed:
		if r.Code == "" {
			return fmt.Errorf("failed record without code")
		}
	default:
		return fmt.Errorf("unknown record type %q", r.Type)
	}
	return nil
}

func (r *Record) payments() [4]string {
	return [4]string{r.Charge, r.PaymentIntent, r.Capture, r.PSPReference}
}

// VersionError is a record of a format this build does not know.
type VersionError struct{ Version int }

func (e *VersionError) Error() string {
	return fmt.Sprintf("record version %d is not supported (this build reads version %d)", e.Version, Version)
}

// MarshalLine appends r as one line, byte for byte what encoding/json
// writes, without reflection.
func MarshalLine(dst []byte, r *Record) ([]byte, error) {
	n0 := len(dst)
	dst = append(dst, `{"v":`...)
	dst = strconv.AppendInt(dst, int64(r.V), 10)
	dst = append(dst, `,"type":`...)
	dst = appendString(dst, string(r.Type))
	dst = append(dst, `,"ts":"`...)
	withTime, err := r.Time.AppendText(dst)
	if err != nil {
		// Out of RFC 3339's range: let encoding/json say so in its words.
		_, err = json.Marshal(r)
		return dst[:n0], err
	}
	dst = withTime
	dst = append(dst, `","batch":`...)
	dst = appendString(dst, r.Batch)
	dst = append(dst, `,"item":`...)
	dst = appendString(dst, r.Item)
	dst = appendField(dst, `,"charge":`, r.Charge)
	dst = appendField(dst, `,"payment_intent":`, r.PaymentIntent)
	dst = appendField(dst, `,"capture":`, r.Capture)
	dst = appendField(dst, `,"psp_reference":`, r.PSPReference)
	dst = appendInt(dst, `,"attempt":`, int64(r.Attempt))
	dst = appendField(dst, `,"key":`, r.Key)
	dst = appendInt(dst, `,"amount":`, r.Amount)
	dst = appendField(dst, `,"currency":`, r.Currency)
	dst = appendField(dst, `,"reason":`, r.Reason)
	dst = appendField(dst, `,"refund":`, r.Refund)
	dst = appendField(dst, `,"status":`, r.Status)
	dst = appendField(dst, `,"source":`, r.Source)
	dst = appendInt(dst, `,"http_status":`, int64(r.HTTPStatus))
	dst = appendField(dst, `,"code":`, r.Code)
	dst = appendField(dst, `,"message":`, r.Message)
	if r.Final {
		dst = append(dst, `,"final":true`...)
	}
	return append(dst, '}', '\n'), nil
}

// appendInt and appendField leave out a zero, as omitempty does.
func appendInt(dst []byte, key string, n int64) []byte {
	if n == 0 {
		return dst
	}
	return strconv.AppendInt(append(dst, key...), n, 10)
}

func appendField(dst []byte, key, s string) []byte {
	if s == "" {
		return dst
	}
	return appendString(append(dst, key...), s)
}

// appendString quotes s exactly as encoding/json does, by hand when
// nothing in it needs escaping (the ids and codes of nearly every record).
func appendString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if b := s[i]; b < 0x20 || b >= utf8.RuneSelf || b == '"' || b == '\\' || b == '<' || b == '>' || b == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(dst, q...)
		}
	}
	return append(append(append(dst, '"'), s...), '"')
}

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

// replacedError is a file's path that no longer names the file being
// written; file is the file's name for it ("" for the journal's).
type replacedError struct{ how, file string }

func (e *replacedError) Error() string {
	if e.file != "" {
		return fmt.Sprintf("the %s was %s while it was held (log rotation, or a program that ignores its lock?): what was written after that is not in it", e.file, e.how)
	}
	return fmt.Sprintf("the journal file was %s while this run held it (a program that ignores the journal's lock?): records written after that are not in the journal", e.how)
}

func (e *replacedError) Is(target error) bool { return target == ErrReplaced }
