// Package durable holds what makes a file's bytes and a directory's
// entries survive a crash, for the journal and for the notification file
// that refundkit writes as it writes the journal (refund/provider/adyen/notes).
package durable

import (
	"fmt"
	"os"
	"path/filepath"
)

// WriteNew writes data to a new file at path (0600; an existing file is
// an error) and fsyncs it. The entry is durable once SyncDir says so.
func WriteNew(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// SyncDir makes a new or renamed entry in path's directory durable; its
// errors name the file as what (say "journal j.jsonl").
func SyncDir(what, path string) error {
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("%s %s: fsync directory: %w", what, path, err)
	}
	return nil
}
