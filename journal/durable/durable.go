// Package durable makes a file's bytes and a directory's entries survive a
// crash, for the journal and Adyen's notification file.
package durable

import (
	"fmt"
	"os"
	"path/filepath"
)

// WriteNew writes data to a new file (0600) and fsyncs it; SyncDir makes
// the entry durable.
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

// SyncDir makes a new or renamed entry durable; errors name the file as what.
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
