package notes

import (
	"errors"

	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
	"github.com/refundkit/refundkit/refund/provider/events"
)

// File is a Store in a file of JSON lines, one wire.Notification a line,
// as received: refund/provider/events' File under Adyen's codec.
type File = events.File[wire.Notification]

// The file's errors are the events package's.
type (
	LockedError  = events.LockedError
	WriteError   = events.WriteError
	CorruptError = events.CorruptError
	InvalidError = events.InvalidError
)

// ErrClosed is a Store used after Close.
var ErrClosed = events.ErrClosed

// ErrReadOnly is Add on a File opened for reading.
var ErrReadOnly = errors.New("notification file opened for reading: Add needs write")

// codec is Adyen's: every line verifies under one of keys, two are one by
// keyOf, looked up by pspReference and originalReference.
func codec(keys [][]byte) *events.Codec[wire.Notification] {
	return &events.Codec[wire.Notification]{
		File:     "notifications file",
		Noun:     "notification",
		Check:    func(n *wire.Notification) string { return check(n, keys) },
		Key:      func(n *wire.Notification) string { return keyOf(&n.Item) },
		Refs:     func(n *wire.Notification) (string, string) { return n.Item.PSPReference, n.Item.OriginalReference },
		Clone:    clone,
		ReadOnly: ErrReadOnly,
	}
}

// OpenFile opens the notifications file at path, whose lines must verify
// under one of keys. With write it locks it (journal.FileKind) and cuts off a torn
// final line, saved aside (Torn); without, it reads every complete line.
// A line that does not decode or verify is a *CorruptError.
func OpenFile(path string, keys [][]byte, write bool) (*File, error) {
	if wire.NoKey(keys) {
		return nil, errors.New("notifications file " + path + ": no HMAC key")
	}
	return events.Open(path, codec(keys), write)
}
