package cli

import (
	"bufio"
	"os"
	"strings"
	"testing"
)

// TestReleaseIsChangelogsNewest holds Release and CHANGELOG.md together:
// the changelog's first release heading names the version --version prints.
func TestReleaseIsChangelogsNewest(t *testing.T) {
	f, err := os.Open("../../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if heading, ok := strings.CutPrefix(sc.Text(), "## "); ok {
			if v, _, _ := strings.Cut(heading, " "); v != Release {
				t.Fatalf("CHANGELOG.md's newest release is %q, cli.Release is %q: bump both together", v, Release)
			}
			return
		}
	}
	t.Fatal("CHANGELOG.md names no release (no '## VERSION' heading)")
}

// TestVersionString: --version names the release whatever the build says.
func TestVersionString(t *testing.T) {
	defer func(v string) { Version = v }(Version)
	Version = "v0.9.0-3-gabc"
	if got, want := versionString(), Release+" (v0.9.0-3-gabc)"; got != want {
		t.Errorf("with make's Version: %q, want %q", got, want)
	}
	Version = ""
	if got := versionString(); !strings.HasPrefix(got, Release) {
		t.Errorf("without it: %q, want the release first", got)
	}
}
