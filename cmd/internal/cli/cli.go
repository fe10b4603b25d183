// Package cli holds the body of every refundkit command as a function over
// its streams and environment, so the binaries, the unit tests and the
// testscript suites run the same code. Each cmd/<bin>/main.go is one line.
package cli

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/alecthomas/kong"
	"github.com/willabides/kongplete"
)

// Release is refundkit's version: the first heading of CHANGELOG.md
// names it (a test holds them together).
const Release = "0.9.0"

// Version is set at build time with -ldflags "-X ...cli.Version=..." (make
// build: git describe); empty, the module's build info says it.
var Version = ""

// versionString is what --version prints after the command's name: the
// release, then the build: make's Version, else what the go command
// stamped (a module version for go install ...@v, else the commit, with
// -dirty when the tree had changes).
func versionString() string {
	build := Version
	if build == "" {
		build = buildInfoVersion()
	}
	if build == "" {
		return Release
	}
	return Release + " (" + build + ")"
}

// buildInfoVersion is the version the go command stamped into this binary,
// "" for none.
func buildInfoVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev == "" {
		return ""
	}
	return rev + dirty
}

// Env is everything a command may touch of its process.
type Env struct {
	Args   []string // without the program name
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	Getenv func(string) string
}

// OSEnv is the environment of the running process.
func OSEnv() Env {
	return Env{Args: os.Args[1:], Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}
}

// liveHelp is --live's help in each command that has it: refund moves
// money with a live key, audit only reads (and cancels what --cancel-extras
// names).
var liveHelp = map[string]string{
	"refund": "Allow live credentials (Stripe's sk_live_/rk_live_ key, PayPal's or Adyen's live API): real money moves.",
	"audit":  "Allow live credentials (Stripe's sk_live_/rk_live_ key, PayPal's or Adyen's live API): audit reads the live account's refunds and moves no money; with --cancel-extras it cancels the extra refunds it names.",
}

// versionFlag is the --version flag of every command.
type versionFlag = kong.VersionFlag

// exitRequest carries kong's request to exit (after --help or --version)
// out of the parser without ending the process, so tests can run commands.
type exitRequest int

// parse fills grammar from env.Args. done is true when the command must
// return code at once: after --help/--version (0) or a usage error (2).
func parse(env Env, name, description string, grammar any) (code int, done bool) {
	parser, err := kong.New(grammar,
		kong.Name(name),
		kong.Description(description),
		kong.Writers(env.Stdout, env.Stderr),
		kong.Exit(func(c int) { panic(exitRequest(c)) }),
		kong.Vars{"version": name + " " + versionString(), "live_help": liveHelp[name]},
		kong.NamedMapper("fraction", fractionMapper{}),
		kong.ExplicitGroups(flagGroups),
		kong.Help(helpWithExamples(name)),
		kong.Embed(&manFlag{}),
		kong.Bind(manGetenv(env.Getenv)),
	)
	if err != nil {
		panic(err) // a bad grammar is a programming error
	}
	if sink, ok := env.Stdout.(*grammarSink); ok {
		sink.parser = parser // the man page wants the grammar only
		return 0, true
	}
	defer func() {
		if r := recover(); r != nil {
			req, ok := r.(exitRequest)
			if !ok {
				panic(r)
			}
			code, done = int(req), true
			if code != 0 {
				code = ExitUsage
			}
		}
	}()
	// Run by a shell to complete a word (complete -C: COMP_LINE and
	// COMP_POINT set), print the words that fit and exit 0.
	if env.Getenv != nil && env.Getenv("COMP_LINE") != "" {
		kongplete.Complete(parser, kongplete.WithPredictors(predictors))
	}
	ctx, err := parser.Parse(joinNegativeValues(env.Args))
	if err != nil {
		fmt.Fprintf(env.Stderr, "%s: %v\n", name, err)
		fmt.Fprintf(env.Stderr, "%s: run '%s --help' for usage\n", name, name)
		return ExitUsage, true
	}
	if g, ok := grammar.(interface{ recordGiven(*kong.Context) }); ok {
		g.recordGiven(ctx)
	}
	return 0, false
}

// joinNegativeValues writes "--rate -1" as "--rate=-1": kong would take
// "-1" for a short flag and answer with a parser's hint, where the command's
// own check says what is wrong in a sentence. No flag of ours is a digit.
func joinNegativeValues(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "--") && len(a) > 2 && !strings.Contains(a, "=") && i+1 < len(args) {
			if next := args[i+1]; strings.HasPrefix(next, "-") {
				if _, err := strconv.ParseFloat(next, 64); err == nil {
					out = append(out, a+"="+next)
					i++
					continue
				}
			}
		}
		out = append(out, a)
	}
	return out
}

// usageError is bad flags or arguments found after parsing.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }
func (e *usageError) ExitCode() int { return ExitUsage }

// warnf prints a message for people on stderr, prefixed with the program name.
func warnf(w io.Writer, name, format string, args ...any) {
	fmt.Fprintf(w, name+": "+format+"\n", args...)
}
