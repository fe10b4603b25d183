package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"
)

// roffText is s as muesli/roff writes text into a page.
func roffText(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\e`), ".", `\&.`)
}

// TestManPages generates every command's man page from its grammar and
// checks that each flag the command's --help shows is in it with its
// placeholder, help and default, each argument, the exit status, the
// environment and the examples, and that a man page renderer renders it
// without a warning.
func TestManPages(t *testing.T) {
	date := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	for _, name := range Commands() {
		t.Run(name, func(t *testing.T) {
			k, err := grammar(name)
			if err != nil {
				t.Fatal(err)
			}
			page := manPage(k, date)
			if !strings.HasPrefix(page, `.TH `+strings.ToUpper(name)+` 1 "2026-01-02" "refundkit `+Release+`" "refundkit manual"`) {
				t.Errorf("heading: %.100q", page)
			}
			for _, sec := range []string{"NAME", "SYNOPSIS", "DESCRIPTION", "FLAGS", "EXIT STATUS", "EXAMPLES", "SEE ALSO"} {
				if !strings.Contains(page, "\n.SH "+sec+"\n") {
					t.Errorf("no section %s", sec)
				}
			}
			flags := 0
			for _, f := range k.Model.Node.Flags {
				if f.Hidden {
					if strings.Contains(page, `\fB--`+f.Name+`\fP`) {
						t.Errorf("hidden --%s is in the page", f.Name)
					}
					continue
				}
				flags++
				want := `\fB--` + f.Name + `\fP`
				if f.Short != 0 {
					want = `\fB-` + string(f.Short) + `\fP, ` + want
				}
				if !f.IsBool() {
					want += `=\fI` + roffText(placeholder(f)) + `\fP`
				}
				if !strings.Contains(page, "\n.TP\n"+want+"\n") {
					t.Errorf("--%s: no %q", f.Name, want)
				}
				if !strings.Contains(page, roffText(f.Help)) {
					t.Errorf("--%s: its help is not in the page", f.Name)
				}
				if f.HasDefault && f.Default != "" && !f.IsBool() && !strings.Contains(page, roffText(f.Help+enumNote(f)+" Default: "+f.Default+".")) &&
					!strings.Contains(f.Help, "default "+f.Default) && !strings.Contains(f.Help, "default: "+f.Default) {
					t.Errorf("--%s: its default %s is not said", f.Name, f.Default)
				}
			}
			if flags < 3 {
				t.Errorf("only %d flags", flags)
			}
			for _, p := range k.Model.Node.Positional {
				if !strings.Contains(page, `\fI`+roffText(positionalName(p))+`\fP`) || !strings.Contains(page, roffText(p.Help)) {
					t.Errorf("argument %s is not in the page", p.Name)
				}
			}
			exitStatus := page[strings.Index(page, ".SH EXIT STATUS"):]
			exitStatus = exitStatus[:strings.Index(exitStatus[1:], ".SH ")]
			for _, code := range []string{"0", "2"} {
				if !strings.Contains(exitStatus, ".TP\n\\fB"+code+"\\fP\n") {
					t.Errorf("exit status %s is not listed", code)
				}
			}
			for _, e := range commandDocs[name].examples {
				if !strings.Contains(page, roffText(e.line)) {
					t.Errorf("example %q is not in the page", e.line)
				}
			}
			renderMan(t, name, page)
		})
	}
}

// renderMan renders page with man -l, else groff, else mandoc (whichever
// is installed), and fails on a warning; with none installed it checks
// that every line is text or a macro the page builder writes.
func renderMan(t *testing.T, name, page string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), name+".1")
	if err := os.WriteFile(file, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	var cmd *exec.Cmd
	switch {
	case lookPath("man"):
		cmd = exec.Command("man", "--warnings", "-l", file)
	case lookPath("groff"):
		cmd = exec.Command("groff", "-man", "-Tutf8", "-ww", "-z", file)
	case lookPath("mandoc"):
		cmd = exec.Command("mandoc", "-Tlint", "-Wwarning", file)
	default:
		macro := regexp.MustCompile(`^\.(TH .*|SH [A-Z ]+|TP|PP|RS( \d+)?|RE)$`)
		for i, line := range strings.Split(page, "\n") {
			if strings.HasPrefix(line, ".") || strings.HasPrefix(line, "'") {
				if !macro.MatchString(line) {
					t.Errorf("line %d: %q is no macro the page builder writes", i+1, line)
				}
			}
		}
		t.Log("no man, groff or mandoc: structural checks only")
		return
	}
	cmd.Env = append(os.Environ(), "MANPAGER=cat", "PAGER=cat", "MANWIDTH=200", "LC_ALL=C.UTF-8")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, stderr.String())
	}
	if stderr.Len() > 0 {
		t.Errorf("%s warns:\n%s", cmd, stderr.String())
	}
	if cmd.Args[0] == "man" && !strings.Contains(stdout.String(), "--version") {
		t.Errorf("man -l rendered no --version:\n%s", stdout.String())
	}
}

func lookPath(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}

// TestExamplesParse holds every example to the grammars: each refundkit
// command in an example line parses.
func TestExamplesParse(t *testing.T) {
	for _, name := range Commands() {
		doc, ok := commandDocs[name]
		if !ok || doc.summary == "" || len(doc.examples) == 0 {
			t.Errorf("%s: no summary or examples in commandDocs", name)
		}
		for _, e := range doc.examples {
			if strings.ContainsAny(e.line, `"'$;&<`) {
				t.Errorf("%q: keep examples to words, pipes and >", e.line)
			}
			for _, segment := range strings.Split(e.line, "|") {
				words := strings.Fields(segment)
				if i := slices.Index(words, ">"); i >= 0 {
					words = words[:i]
				}
				if len(words) == 0 || !slices.Contains(Commands(), words[0]) {
					continue
				}
				k, err := grammar(words[0])
				if err != nil {
					t.Fatal(err)
				}
				if _, err := k.Parse(words[1:]); err != nil {
					t.Errorf("%s: %q: %v", name, segment, err)
				}
			}
		}
	}
}

// TestManEnvironment holds each ENVIRONMENT entry to the code: every
// variable a page names is one the commands read.
func TestManEnvironment(t *testing.T) {
	var src strings.Builder
	err := filepath.WalkDir("../../..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "../../.." && (d.Name() == "testdata" || d.Name() == "bin" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") && !strings.HasSuffix(path, "man.go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			src.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range Commands() {
		for _, e := range commandDocs[name].env {
			if e.name == "PG*" {
				continue // libpq's, read by pgx
			}
			if !strings.Contains(src.String(), `"`+e.name+`"`) {
				t.Errorf("%s: %s is in ENVIRONMENT but no code reads it", name, e.name)
			}
		}
	}
}

// TestHelpGroupsAndExamples: every command's --help groups its flags as
// the grammar's group tags say and ends with its examples.
func TestHelpGroupsAndExamples(t *testing.T) {
	for _, name := range Commands() {
		var stdout bytes.Buffer
		code := commandRun(name)(Env{Args: []string{"--help"}, Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &bytes.Buffer{}, Getenv: func(string) string { return "" }})
		if code != 0 {
			t.Fatalf("%s --help exited %d", name, code)
		}
		help := stdout.String()
		k, err := grammar(name)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, f := range k.Model.Node.Flags {
			if f.Group == nil || f.Hidden || seen[f.Group.Key] {
				continue
			}
			seen[f.Group.Key] = true
			if !slices.ContainsFunc(flagGroups, func(g kong.Group) bool { return g.Key == f.Group.Key }) {
				t.Errorf("%s --%s: group %q has no title in flagGroups", name, f.Name, f.Group.Key)
			}
			if !strings.Contains(help, "\n"+f.Group.Title+"\n") {
				t.Errorf("%s --help: no %q", name, f.Group.Title)
			}
		}
		if name != "journal-merge" && len(seen) == 0 {
			t.Errorf("%s: no flag groups", name)
		}
		i := strings.Index(help, "\nExamples:\n")
		if i < 0 {
			t.Fatalf("%s --help: no Examples:\n%s", name, help)
		}
		for _, e := range commandDocs[name].examples {
			if !strings.Contains(help[i:], "  $ "+e.line+"\n") {
				t.Errorf("%s --help: example %q missing after Examples:", name, e.line)
			}
		}
	}
}
