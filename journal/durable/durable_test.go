package durable

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteNewIsPrivateAndNeverOverwrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "torn")
	if err := WriteNew(path, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("stat %v, %v: want mode 0600", info, err)
	}
	if err := WriteNew(path, []byte("y")); err == nil {
		t.Fatal("WriteNew over an existing file succeeded")
	}
	if b, _ := os.ReadFile(path); string(b) != "x" {
		t.Fatalf("file holds %q, want the first write", b)
	}
	if err := SyncDir("journal", path); err != nil {
		t.Fatal(err)
	}
	err := SyncDir("notifications file", filepath.Join(t.TempDir(), "gone", "f"))
	if err == nil || !strings.HasPrefix(err.Error(), "notifications file ") {
		t.Fatalf("SyncDir of a missing directory: %v", err)
	}
}
