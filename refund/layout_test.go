package refund_test

// The map of docs/design.md ("The map"), held true: each folder's
// production code imports only what its layer may. A new upward or
// sideways import fails here, naming the file.

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/refundkit/refundkit/"

// mayImport reports whether production code in folder dir (from the
// module's root) may import folder dep. It is docs/design.md's map.
func mayImport(dir, dep string) bool {
	under := func(p, root string) bool { return p == root || strings.HasPrefix(p, root+"/") }
	own := func(role string) string { // refund/provider/stripe/... -> refund/provider/stripe
		rest := strings.TrimPrefix(dir, role+"/")
		name, _, _ := strings.Cut(rest, "/")
		return role + "/" + name
	}
	domain := under(dep, "journal") || dep == "refund" || dep == "refund/money"
	switch {
	case under(dir, "cmd"), under(dir, "scripts"):
		return true // the binaries and the tools wire everything together
	case dir == "journal/arena", dir == "journal/durable", dir == "refund/money", dir == "refund/sim":
		return false
	case dir == "journal":
		return dep == "journal/arena" || dep == "journal/durable"
	case dir == "refund":
		return under(dep, "journal") || dep == "refund/money"
	case dir == "refund/plan", dir == "refund/audit":
		return domain
	case under(dir, "refund/provider"):
		// Every provider may use the shared HTTP client (httpx) and the
		// store of kept webhook deliveries (events), which keeps them in a
		// file or in the PostgreSQL checkpoint's database, through its
		// connection.
		return domain || under(dep, own("refund/provider")) || dep == "refund/provider/httpx" || dep == "refund/provider/events" || dep == "refund/provider/events/pgstore" || dep == "refund/provider/events/natsstore" ||
			dir == "refund/provider/events/pgstore" && dep == "refund/checkpoint/postgres"
	case dir == "refund/checkpoint":
		return domain
	case under(dir, "refund/checkpoint"):
		// Each backend runs on the claims, fence and lease they share.
		return domain || dep == "refund/checkpoint" || under(dep, own("refund/checkpoint"))
	case under(dir, "refund/sim"):
		// A simulator reads the wire format its provider's client reads,
		// and the one server serves every provider's simulator.
		return dep == "refund/sim" || under(dep, "refund/sim") || dep == "refund/money" ||
			strings.HasPrefix(dep, "refund/provider/") && strings.HasSuffix(dep, "/wire")
	}
	return false
}

func TestLayout(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			dep, ok := strings.CutPrefix(p, module)
			if !ok {
				continue
			}
			checked++
			if !mayImport(rel, dep) {
				file, _ := filepath.Rel(root, path)
				t.Errorf("%s imports %s: the map (docs/design.md) does not let %s import it", file, dep, rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("only %d imports of the module's own packages read: the walk missed the tree", checked)
	}
	if _, err := os.Stat(filepath.Join(root, "refund", "provider")); err != nil {
		t.Fatal("refund/provider is not where the map says")
	}
}

// TestLayoutRefusesAnUpwardImport: the rule can fail.
func TestLayoutRefusesAnUpwardImport(t *testing.T) {
	for _, c := range [][2]string{
		{"refund", "refund/provider/stripe"}, {"journal", "refund"}, {"refund/provider/stripe", "refund/provider/paypal"},
		{"refund/checkpoint/postgres", "refund/provider/stripe"}, {"refund/audit", "refund/checkpoint/postgres"},
		{"refund/provider/stripe", "refund/sim/stripesim"}, {"refund/provider/httpx", "refund/provider/paypal"}, {"refund/money", "refund"}, {"refund/sim/stripesim", "refund/checkpoint/natsjs"},
		{"refund/checkpoint", "refund/checkpoint/postgres"}, {"refund/checkpoint/natsjs", "refund/checkpoint/postgres"},
	} {
		if mayImport(c[0], c[1]) {
			t.Errorf("the map lets %s import %s", c[0], c[1])
		}
	}
}
