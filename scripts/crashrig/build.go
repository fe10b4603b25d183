package crashrig

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Build compiles every command of this module (go build ./cmd/...) into
// dir and returns their paths by name. It finds the module from the
// current directory, so any test of the module can call it.
func Build(dir string) (map[string]string, error) {
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return nil, fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/...")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build ./cmd/...: %w\n%s", err, out)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	bins := make(map[string]string, len(entries))
	for _, e := range entries {
		bins[e.Name()] = filepath.Join(dir, e.Name())
	}
	return bins, nil
}
