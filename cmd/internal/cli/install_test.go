package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMakeInstall runs make install into a DESTDIR, building into a
// directory of its own (not the tree's bin/), and checks what it installs:
// every binary, stamped with make's VERSION as make build stamps it, its
// man page, and a bash completion file that completes it with itself.
func TestMakeInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every binary: not with -short")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	tmp := t.TempDir()
	dest, build := filepath.Join(tmp, "root"), filepath.Join(tmp, "build")
	cmd := exec.Command("make", "-C", "../../..", "install", "DESTDIR="+dest, "BUILDDIR="+build, "PREFIX=/opt/rk", "VERSION=v-install-test", "SOURCE_DATE_EPOCH=1767312000")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	for _, name := range Commands() {
		bin := filepath.Join(dest, "opt/rk/bin", name)
		out, err := exec.Command(bin, "--version").Output()
		if err != nil {
			t.Errorf("%s --version: %v", bin, err)
		} else if got, want := strings.TrimSpace(string(out)), name+" "+Release+" (v-install-test)"; got != want {
			t.Errorf("%s --version = %q, want %q", name, got, want)
		}
		page, err := os.ReadFile(filepath.Join(dest, "opt/rk/share/man/man1", name+".1"))
		if err != nil {
			t.Error(err)
		} else if want := ".TH " + strings.ToUpper(name) + ` 1 "2026-01-02"`; !strings.HasPrefix(string(page), want) {
			t.Errorf("%s.1 starts %.60q, want %q", name, page, want)
		}
		comp, err := os.ReadFile(filepath.Join(dest, "opt/rk/share/bash-completion/completions", name))
		if err != nil {
			t.Error(err)
		} else if got, want := string(comp), "complete -C /opt/rk/bin/"+name+" "+name+"\n"; got != want {
			t.Errorf("completion for %s = %q, want %q", name, got, want)
		}
	}
}
