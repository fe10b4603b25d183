package cli

import (
	_ "embed"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kong"
	"github.com/muesli/roff"
)

// Man pages, --help and completion come from the kong grammars; the rest is
// in man.txt, which the tests hold to the grammar and the code.

// Commands are refundkit's binaries, in the order their man pages list them.
func Commands() []string {
	return []string{"plan", "refund", "audit", "journal-merge", "webhook", "adyen-webhook", "stripe-sim"}
}

// commandRun is a function, not a variable: no initialization cycle.
func commandRun(name string) func(Env) int {
	return map[string]func(Env) int{"plan": Plan, "refund": Refund, "audit": Audit,
		"journal-merge": JournalMerge, "webhook": Webhook, "adyen-webhook": AdyenWebhook, "stripe-sim": StripeSim}[name]
}

// commandDoc is what man and --help tell beyond the grammar.
type commandDoc struct {
	summary  string   // the man page's NAME line
	exit     []string // "CODE meaning", for a command whose description lists no exit codes
	env      []envDoc
	examples []example
}

type envDoc struct{ name, text string }

// example is a comment and a command line (the tests parse it).
type example struct{ comment, line string }

// commandDocs and the titles of the group:"KEY" tags are man.txt's.
var commandDocs, flagGroups = parseDocs(manText)

//go:embed man.txt
var manText string

// grammarSink is the Stdout of a command run only for its grammar.
type grammarSink struct {
	io.Writer
	parser *kong.Kong
}

// grammar is the kong parser of the command name, as it builds it.
func grammar(name string) (*kong.Kong, error) {
	run := commandRun(name)
	if run == nil {
		return nil, fmt.Errorf("no command %q", name)
	}
	sink := &grammarSink{Writer: io.Discard}
	run(Env{Stdin: strings.NewReader(""), Stdout: sink, Stderr: io.Discard, Getenv: func(string) string { return "" }})
	if sink.parser == nil {
		return nil, fmt.Errorf("%s: the command did not parse its flags first", name)
	}
	return sink.parser, nil
}

// helpWithExamples is kong's help, then the command's examples.
func helpWithExamples(name string) kong.HelpPrinter {
	return func(options kong.HelpOptions, ctx *kong.Context) error {
		if err := kong.DefaultHelpPrinter(options, ctx); err != nil {
			return err
		}
		examples := commandDocs[name].examples
		if len(examples) == 0 {
			return nil
		}
		var b strings.Builder
		b.WriteString("\nExamples:\n")
		for i, e := range examples {
			if i > 0 {
				b.WriteString("\n")
			}
			fmt.Fprintf(&b, "  # %s\n  $ %s\n", e.comment, e.line)
		}
		_, err := io.WriteString(ctx.Stdout, b.String())
		return err
	}
}

// manFlag is every command's hidden --help-man (make man).
type manFlag struct {
	HelpMan manPageFlag `name:"help-man" hidden:"" help:"Print this command's man page (roff, section 1) and exit."`
}

type manPageFlag bool

// manGetenv is the command's environment, bound for --help-man's hook.
type manGetenv func(string) string

// BeforeReset prints the man page before required flags are asked for.
func (manPageFlag) BeforeReset(app *kong.Kong, getenv manGetenv) error {
	date := time.Now().UTC()
	if s := getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("SOURCE_DATE_EPOCH: %v", err)
		}
		date = time.Unix(sec, 0).UTC()
	}
	if _, err := io.WriteString(app.Stdout, manPage(app, date)); err != nil {
		return err
	}
	app.Exit(0)
	return nil
}

// manPage is k's man page (roff, section 1), dated date.
func manPage(k *kong.Kong, date time.Time) string {
	name := k.Model.Name
	doc := commandDocs[name]
	node := k.Model.Node
	description, exitText := splitExit(k.Model.Help)
	exits := doc.exit
	if exitText != "" {
		exits = exitItems(exitText)
	}

	d := roff.NewDocument()
	d.Heading(1, name, "refundkit manual", date)
	// Heading's fourth field names the source: refundkit and its release.
	d.Section("Name")
	d.Text(name + " - " + doc.summary)

	d.Section("Synopsis")
	d.TextBold(name)
	for _, f := range visibleFlags(node) {
		if f.Required {
			d.Text(" ")
			d.TextBold("--" + f.Name)
			d.Text("=")
			d.TextItalic(placeholder(f))
		}
	}
	d.Text(" [")
	d.TextItalic("flags")
	d.Text("]")
	for _, p := range node.Positional {
		arg := positionalName(p)
		if p.IsCumulative() {
			arg += " ..."
		}
		d.Text(" ")
		if !p.Required {
			d.Text("[")
		}
		d.TextItalic(arg)
		if !p.Required {
			d.Text("]")
		}
	}
	d.EndSection()

	d.Section("Description")
	d.Text(description)
	d.EndSection()

	tagged(d, "Arguments", node.Positional, func(p *kong.Positional) string {
		d.TextItalic(positionalName(p))
		return p.Help + defaultNote(p)
	})
	for _, g := range groupedFlags(node) {
		tagged(d, strings.TrimSuffix(g.title, ":"), g.flags, func(f *kong.Flag) string {
			if f.Short != 0 {
				d.TextBold("-" + string(f.Short))
				d.Text(", ")
			}
			d.TextBold("--" + f.Name)
			if !f.IsBool() {
				d.Text("=")
				d.TextItalic(placeholder(f))
			}
			return f.Help + enumNote(f) + defaultNote(f.Value)
		})
	}
	tagged(d, "Exit status", exits, func(e string) string {
		code, text, _ := strings.Cut(e, " ")
		d.TextBold(code)
		return text
	})
	tagged(d, "Environment", doc.env, func(e envDoc) string {
		d.TextBold(e.name)
		return e.text
	})

	if len(doc.examples) > 0 {
		d.Section("Examples")
		for i, e := range doc.examples {
			if i > 0 {
				d.Paragraph()
			}
			d.Text(e.comment + ":")
			d.Indent(4)
			d.TextBold(e.line)
			d.EndSection()
			d.IndentEnd()
		}
	}

	d.Section("See also")
	var others []string
	for _, c := range Commands() {
		if c != name {
			others = append(others, c+"(1)")
		}
	}
	d.Text(strings.Join(others, ", ") + "; the guides in docs/ beside the source, and README.md.")
	d.EndSection()
	page := d.String()
	// The heading's source: refundkit and its release, not the command.
	return strings.Replace(page, fmt.Sprintf(`"%s" "refundkit manual"`, name), fmt.Sprintf(`"refundkit %s" "refundkit manual"`, Release), 1)
}

// tagged is a section of items, each a paragraph tagged as tag writes it
// with the text tag returns; none, no section.
func tagged[T any](d *roff.Document, title string, items []T, tag func(T) string) {
	if len(items) == 0 {
		return
	}
	d.Section(title)
	for _, it := range items {
		d.TaggedParagraph(-1)
		text := tag(it)
		d.EndSection()
		d.Text(text)
	}
	d.EndSection()
}

// splitExit takes the exit codes' paragraph out of a description.
func splitExit(help string) (description, exit string) {
	var kept []string
	for _, p := range strings.Split(help, "\n\n") {
		for _, prefix := range []string{"Exit codes:", "Exit status:"} {
			if rest, ok := strings.CutPrefix(p, prefix); ok {
				exit = strings.TrimSpace(rest)
			}
		}
		if exit == "" || !strings.Contains(p, exit) {
			kept = append(kept, p)
		}
	}
	return strings.Join(kept, "\n\n"), exit
}

// exitItems splits "0 a; 1 b (x; y); 2 c" at the codes.
func exitItems(s string) []string {
	var items []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
		case ';':
			if depth == 0 && i+2 < len(s) && s[i+1] == ' ' && s[i+2] >= '0' && s[i+2] <= '9' {
				items = append(items, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	return append(items, strings.TrimSpace(s[start:]))
}

type flagGroup struct {
	title string
	flags []*kong.Flag
}

// groupedFlags are the flags grouped as --help shows them.
func groupedFlags(node *kong.Node) []flagGroup {
	byKey := map[string][]*kong.Flag{}
	var groups []*kong.Group
	for _, f := range visibleFlags(node) {
		key := ""
		if f.Group != nil {
			key = f.Group.Key
			if byKey[key] == nil {
				groups = append(groups, f.Group)
			}
		}
		byKey[key] = append(byKey[key], f)
	}
	var out []flagGroup
	if fs := byKey[""]; len(fs) > 0 {
		out = append(out, flagGroup{"Flags:", fs})
	}
	for _, g := range groups {
		out = append(out, flagGroup{g.Title, byKey[g.Key]})
	}
	return out
}

// visibleFlags are a node's flags that --help shows, --help included.
func visibleFlags(node *kong.Node) []*kong.Flag { return node.AllFlags(true)[0] }

// placeholder names a flag's value: placeholder, values, else kind.
func placeholder(f *kong.Flag) string {
	if f.PlaceHolder != "" {
		return f.PlaceHolder
	}
	if f.Enum != "" {
		return strings.Join(enumValues(f.Value), "|")
	}
	t := f.Target.Type()
	tail := ""
	if t.Kind() == reflect.Slice {
		t, tail = t.Elem(), "..."
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == reflect.TypeOf(time.Duration(0)):
		return "DURATION" + tail
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return "N" + tail
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return "NUMBER" + tail
	}
	return "STRING" + tail
}

func positionalName(p *kong.Positional) string {
	if p.Tag != nil && p.Tag.PlaceHolder != "" {
		return p.Tag.PlaceHolder
	}
	return strings.ToUpper(p.Name)
}

// enumValues are v's values but the empty one (audit's no --provider).
func enumValues(v *kong.Value) []string {
	return slices.DeleteFunc(v.EnumSlice(), func(e string) bool { return e == "" })
}

// enumNote names an enum's values when its placeholder does not.
func enumNote(f *kong.Flag) string {
	if f.Enum == "" || f.PlaceHolder == "" || strings.Contains(f.PlaceHolder, "|") {
		return ""
	}
	return " One of: " + strings.Join(enumValues(f.Value), ", ") + "."
}

// defaultNote says a default the help does not say already.
func defaultNote(v *kong.Value) string {
	if !v.HasDefault || v.Default == "" || v.IsBool() ||
		strings.Contains(v.Help, "default "+v.Default) || strings.Contains(v.Help, "default: "+v.Default) {
		return ""
	}
	return " Default: " + v.Default + "."
}

// parseDocs reads man.txt.
func parseDocs(text string) (docs map[string]commandDoc, groups []kong.Group) {
	docs = map[string]commandDoc{}
	var name, comment string
	for _, line := range strings.Split(text, "\n") {
		word, rest, _ := strings.Cut(line, " ")
		key, text, _ := strings.Cut(rest, " ")
		d := docs[name]
		switch word {
		case "group":
			groups = append(groups, kong.Group{Key: key, Title: text})
			continue
		case "command":
			name, d = key, commandDoc{summary: text}
		case "exit":
			d.exit = append(d.exit, rest)
		case "env":
			if set, ok := docs[key]; ok && strings.HasPrefix(key, "@") {
				d.env = append(d.env, set.env...)
			} else {
				d.env = append(d.env, envDoc{key, text})
			}
		case "#":
			comment = rest
		case "$":
			d.examples = append(d.examples, example{comment, rest})
		default:
			continue
		}
		docs[name] = d
	}
	return docs, groups
}
