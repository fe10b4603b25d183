// Package cli holds every refundkit command as a function of its Env, so
// binaries, unit tests and testscripts run the same code.
package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"reflect"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"

	"github.com/alecthomas/kong"
	"github.com/posener/complete"
	"github.com/willabides/kongplete"
)

// Release is refundkit's version, CHANGELOG.md's first heading (tested).
const Release = "0.9.0"

// Version is set by make build (-ldflags -X: git describe).
var Version = ""

// versionString is --version's: the release, then the build's version.
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

// buildInfoVersion is go install's module version, else the commit.
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
		switch {
		case s.Key == "vcs.revision":
			rev = s.Value
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "-dirty"
		}
	}
	if rev == "" {
		return ""
	}
	return rev[:min(len(rev), 12)] + dirty
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

// liveHelp is --live's help in each command that has it.
var liveHelp = map[string]string{
	"refund": "Allow live credentials (Stripe's sk_live_/rk_live_ key, PayPal's or Adyen's live API): real money moves.",
	"audit":  "Allow live credentials (Stripe's sk_live_/rk_live_ key, PayPal's or Adyen's live API): audit reads the live account's refunds and moves no money; with --cancel-extras it cancels the extra refunds it names.",
}

// versionFlag is every command's --version, the last of its ungrouped flags.
type versionFlag struct {
	Version kong.VersionFlag `help:"Print the version and exit."`
}

// exitRequest carries kong's exit out of the parser, not out of the process.
type exitRequest int

// parse fills grammar from env.Args; done: return code at once.
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
		kong.Embed(&versionFlag{}),
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
	// Run by a shell to complete a word (complete -C).
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

// predictors complete the values tagged predictor:"NAME".
var predictors = map[string]complete.Predictor{
	"file": complete.PredictFiles("*"),
	"plan": complete.PredictFiles("*.jsonl"),
	// audit's --provider, whose enum's empty value (none) is no word to offer
	"providers": complete.PredictSet(providerStripe, providerPayPal, providerAdyen, providerExec),
}

// joinNegativeValues writes "--rate -1" as "--rate=-1" for the command's
// own check: kong would take "-1" for a short flag (none of ours is a digit).
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

// fractionMapper reads a float flag as a number or a fraction (0.8/2).
type fractionMapper struct{}

func (fractionMapper) Decode(ctx *kong.DecodeContext, target reflect.Value) error {
	var s string
	if err := ctx.Scan.PopValueInto("value", &s); err != nil {
		return err
	}
	v, err := parseFraction(s)
	if err != nil {
		return err
	}
	target.SetFloat(v)
	return nil
}

// parseFraction is "0.4", or "0.8/2" (over a positive number).
func parseFraction(s string) (float64, error) {
	num, den, split := strings.Cut(s, "/")
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil {
		return 0, fmt.Errorf("%q: want a number or a fraction such as 0.8/2", s)
	}
	if !split {
		return n, nil
	}
	d, err := strconv.ParseFloat(strings.TrimSpace(den), 64)
	if err != nil || !(d > 0) {
		return 0, fmt.Errorf("%q: want a number or a fraction such as 0.8/2, over a number above 0", s)
	}
	return n / d, nil
}

// givenFlags are the flags given, so a command refuses one that does not
// apply instead of ignoring it. Embedded (kong:"-"), parse fills it.
type givenFlags struct {
	names map[string]bool
}

func (g *givenFlags) recordGiven(ctx *kong.Context) {
	g.names = map[string]bool{}
	for _, p := range ctx.Path {
		if p.Flag != nil && !p.Resolved {
			g.names[p.Flag.Name] = true
		}
	}
}

// applies says when flags mean something: what, in words after "is for".
type applies struct {
	flags []string
	when  bool
	what  string
}

// refuseInapplicable names the first flag given whose rule does not hold.
func (g *givenFlags) refuseInapplicable(rules ...applies) error {
	for _, r := range rules {
		for _, f := range r.flags {
			if !r.when && g.names[f] {
				return &usageError{"--" + f + " is for " + r.what}
			}
		}
	}
	return nil
}

// usageError is bad flags or arguments found after parsing.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }
func (e *usageError) ExitCode() int { return ExitUsage }

// warnf prints a message for people on stderr, prefixed with the program name.
func warnf(w io.Writer, name, format string, args ...any) {
	fmt.Fprintf(w, name+": "+format+"\n", args...)
}

// openInput opens path, or stdin for "-"; closeIn closes what it opened.
func openInput(env Env, path string) (in io.Reader, inName string, closeIn func(), err error) {
	if path == "-" {
		return env.Stdin, "<stdin>", func() {}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, "", nil, err
	}
	return f, path, func() { f.Close() }, nil
}

// startCPUProfile writes a CPU profile to path (none when "") until stop.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// newLogger logs `name: message key=value` lines, or JSON lines ("json").
func newLogger(w io.Writer, name string, verbose bool, format string) *slog.Logger {
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level})).With("program", name)
	}
	return slog.New(&lineHandler{w: w, name: name, level: level, mu: new(sync.Mutex)})
}

type lineHandler struct {
	w     io.Writer
	name  string
	level slog.Level
	mu    *sync.Mutex
	attrs []slog.Attr
}

func (h *lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(h.name + ": " + r.Message)
	write := func(a slog.Attr) bool {
		s := a.Value.String()
		if s == "" || strings.ContainsAny(s, " \t\"=") {
			s = strconv.Quote(s)
		}
		fmt.Fprintf(&b, " %s=%s", a.Key, s)
		return true
	}
	for _, a := range h.attrs {
		write(a)
	}
	r.Attrs(write)
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

func (h *lineHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr{}, h.attrs...), attrs...)
	return &c
}

func (h *lineHandler) WithGroup(string) slog.Handler { return h }

// logFormatFlag is --log-format, the same in every command that logs.
type logFormatFlag struct {
	LogFormat string `enum:"text,json" default:"text" group:"output" help:"Messages on stderr as text lines for people, or JSON lines (log/slog) for agents and log pipelines."`
}

// messages is stderr, or with --log-format json a writer of JSON records.
func (f logFormatFlag) messages(stderr io.Writer, name string) io.Writer {
	if f.LogFormat != "json" {
		return stderr
	}
	return logWriter{log: newLogger(stderr, name, false, "json"), prefix: name + ": "}
}

// logWriter turns the lines warnf writes (`name: message`) into records.
type logWriter struct {
	log    *slog.Logger
	prefix string
}

func (w logWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		if line = strings.TrimPrefix(line, w.prefix); line != "" {
			w.log.Info(line)
		}
	}
	return len(p), nil
}
