package cli

import (
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
// in commandDocs, which the tests hold to the grammar and the code.

// Commands are refundkit's binaries, in the order their man pages list them.
func Commands() []string {
	return []string{"plan", "refund", "audit", "journal-merge", "adyen-webhook", "stripe-sim"}
}

// commandRun is a function, not a variable: no initialization cycle.
func commandRun(name string) func(Env) int {
	return map[string]func(Env) int{"plan": Plan, "refund": Refund, "audit": Audit,
		"journal-merge": JournalMerge, "adyen-webhook": AdyenWebhook, "stripe-sim": StripeSim}[name]
}

// flagGroups are the titles of the group:"KEY" tags.
var flagGroups = []kong.Group{
	{Key: "input", Title: "Input flags:"},
	{Key: "checkpoint", Title: "Checkpoint flags:"},
	{Key: "provider", Title: "Provider flags:"},
	{Key: "exec", Title: "Exec provider flags (--provider exec):"},
	{Key: "safety", Title: "Safety flags (what may be refunded):"},
	{Key: "repair", Title: "Repair flags (with --provider):"},
	{Key: "pacing", Title: "Pacing flags:"},
	{Key: "output", Title: "Output flags:"},
	{Key: "server", Title: "Server flags:"},
	{Key: "data", Title: "Data flags:"},
	{Key: "faults", Title: "Fault flags:"},
	{Key: "paypal", Title: "PayPal simulation flags:"},
	{Key: "adyen", Title: "Adyen simulation flags:"},
	{Key: "limits", Title: "Rate limit and key flags:"},
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

var (
	envStripe = []envDoc{
		{"STRIPE_API_KEY", "Stripe's secret or restricted key (--provider stripe). Never printed."},
		{"STRIPE_API_BASE", "Stripe's API base URL when --api-base gives none (a simulator's, say)."},
	}
	envPayPal = []envDoc{
		{"PAYPAL_CLIENT_ID", "PayPal's REST client id (--provider paypal)."},
		{"PAYPAL_CLIENT_SECRET", "PayPal's REST client secret (--provider paypal). Never printed."},
		{"PAYPAL_API_BASE", "PayPal's API base URL when --paypal-api-base gives none."},
	}
	envAdyen = []envDoc{
		{"ADYEN_API_KEY", "Adyen's API key (--provider adyen). Never printed."},
		{"ADYEN_MERCHANT_ACCOUNT", "The Adyen merchant account refunds are made for."},
		{"ADYEN_HMAC_KEY", "The HMAC key (hex) that signs Adyen's notifications. Never printed."},
		{"ADYEN_API_BASE", "Adyen's API base URL (a simulator's, say)."},
	}
	envPG   = envDoc{"PG*", "With a postgres:// checkpoint, the PG* variables of libpq (PGHOST, PGUSER, PGPASSWORD, PGSSLMODE and the rest) fill in what the URL leaves out. Passwords are never printed."}
	envNATS = []envDoc{
		{"NATS_CREDS", "With a nats:// checkpoint: a NATS credentials file (docs/nats.md)."},
		{"NATS_NKEY", "With a nats:// checkpoint: an nkey seed file."},
		{"NATS_USER", "With a nats:// checkpoint whose URL names no user: the user name."},
		{"NATS_PASSWORD", "Its password. Never printed."},
		{"NATS_TOKEN", "With a nats:// checkpoint: a token. Never printed."},
	}
)

// commandDocs holds each command's summary, environment and examples.
var commandDocs = map[string]commandDoc{
	"plan": {
		summary: "turn a list of charges or captures into the plan items of one batch",
		examples: []example{
			{"A plan from a CSV export of charges (a header row: charge, amount, currency, ...)", "plan --batch 2026-11-refunds charges.csv > plan.jsonl"},
			{"PayPal captures, one id a line", "plan --batch pp-1 --ids capture captures.txt > plan.jsonl"},
			{"Shard 2 of 3, for three workers with a journal each", "plan --batch 2026-11-refunds --shard 2/3 charges.csv > plan-2.jsonl"},
		},
	},
	"refund": {
		summary: "refund a plan's items exactly once, journaling every step",
		env:     slices.Concat(envStripe, envPayPal, envAdyen, []envDoc{envPG}, envNATS),
		examples: []example{
			{"Plan a batch and refund it through Stripe, journaled (run the same command again to resume)", "plan --batch 2026-11-refunds charges.csv | tee plan.jsonl | refund --journal refunds.jsonl"},
			{"Refund through PayPal at half the account's rate limits", "refund --provider paypal --share 0.5 --journal pp.jsonl plan.jsonl"},
			{"Many workers on many hosts share one PostgreSQL checkpoint, each fed the same plan", "refund --journal postgres://refunds@db/refundkit plan.jsonl"},
			{"Or a NATS JetStream queue (docs/nats.md)", "refund --journal nats://nats1:4222/refunds plan.jsonl"},
			{"Any refund API, through two commands of your own", "refund --provider exec --exec-create ./create.sh --exec-find ./find.sh --journal x.jsonl plan.jsonl"},
		},
	},
	"audit": {
		summary: "tell whether a batch was refunded exactly once",
		env:     slices.Concat(envStripe, envPayPal, []envDoc{{"ADYEN_HMAC_KEY", "The HMAC key (hex) that verifies the notifications --notifications holds (--provider adyen). Never printed."}, envPG}, envNATS),
		examples: []example{
			{"Offline: duplicates, items in doubt, failures, items never refunded", "audit --plan plan.jsonl refunds.jsonl"},
			{"And ask Stripe itself for every charge's refunds", "audit --provider stripe --plan plan.jsonl refunds.jsonl"},
			{"Journal what Stripe has and the journal lacks, so a rerun skips those items", "audit --provider stripe --backfill refunds.jsonl refunds.jsonl"},
			{"A PostgreSQL checkpoint: every worker's items, and who holds what", "audit --plan plan.jsonl postgres://refunds@db/refundkit"},
			{"An Adyen batch, against the notifications adyen-webhook kept (ADYEN_HMAC_KEY set)", "audit --provider adyen --notifications notes.jsonl --plan plan.jsonl ad.jsonl"},
		},
	},
	"journal-merge": {
		summary: "merge refund journals into one",
		env:     slices.Concat([]envDoc{envPG}, envNATS),
		examples: []example{
			{"Merge the shards' journals, then audit the whole batch against its plan", "journal-merge -o all.jsonl refunds-1.jsonl refunds-2.jsonl refunds-3.jsonl"},
			{"Compact a finished journal in place: one final record per item", "journal-merge --compact -o refunds.jsonl refunds.jsonl"},
			{"Import journals into a PostgreSQL checkpoint", "journal-merge -o postgres://refunds@db/refundkit refunds-1.jsonl refunds-2.jsonl"},
			{"Or into a NATS JetStream checkpoint", "journal-merge -o nats://nats1:4222/refunds refunds-1.jsonl refunds-2.jsonl"},
		},
	},
	"adyen-webhook": {
		summary: "receive Adyen's notifications and keep them durably",
		exit: []string{
			"0 stopped by SIGINT or SIGTERM (the requests under way answered first)",
			"1 the address cannot be listened on, --addr-file cannot be written, or serving failed",
			"2 bad flags or environment (ADYEN_HMAC_KEY missing or not hex, a --listen address off loopback without --public), or a store's file holds a line that does not verify (forged, or ADYEN_HMAC_KEY is not the key it was signed under; named by file and line), as refund and audit say of it",
			"3 a store cannot be opened or closed",
			"4 the --out or --others file is held by another receiver",
		},
		env: []envDoc{
			{"ADYEN_HMAC_KEY", "Required: the HMAC key (hex, as Adyen's Customer Area shows it) each notification's signature is checked against. Never printed."},
			{"ADYEN_MERCHANT_ACCOUNT", "When set, notifications of any other merchant account are refused (422)."},
			{"ADYEN_WEBHOOK_USERNAME", "Basic auth user name, as configured in Adyen's Customer Area."},
			{"ADYEN_WEBHOOK_PASSWORD", "Basic auth password. Never printed."},
			envPG,
		},
		examples: []example{
			{"Keep Adyen's refund notifications in a file, then settle the batch with them", "adyen-webhook --out notes.jsonl"},
			{"Behind a TLS proxy, several receivers sharing the PostgreSQL checkpoint's database", "adyen-webhook --public --listen 0.0.0.0:8089 --out postgres://refunds@db/refundkit"},
		},
	},
	"stripe-sim": {
		summary: "a simulated Stripe, PayPal and Adyen refund API on loopback, with fault knobs",
		exit: []string{
			"0 stopped by SIGINT or SIGTERM; its counters are printed on stdout as one JSON line",
			"1 the address cannot be listened on, --addr-file cannot be written, or the counters cannot be written",
			"2 bad flags or environment, or an address that is not loopback",
		},
		env: []envDoc{
			{"ADYEN_API_KEY", "The API key the simulated Adyen API accepts (any key when unset)."},
			{"ADYEN_HMAC_KEY", "The HMAC key (hex) that signs the notifications --adyen-notify-url posts; required with it."},
		},
		examples: []example{
			{"200 charges to refund, at Stripe's test-mode rate limits", "stripe-sim --charges 200 --rate-limits test"},
			{"Faults: 10% 429s and 5% refunds created behind a 500", "stripe-sim --charges 1000 --rate-limit-share 0.1 --error-after-commit-share 0.05 --addr-file sim.url"},
		},
	},
}

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

	if len(node.Positional) > 0 {
		d.Section("Arguments")
		for _, p := range node.Positional {
			d.TaggedParagraph(-1)
			d.TextItalic(positionalName(p))
			d.EndSection()
			d.Text(p.Help + defaultNote(p))
		}
		d.EndSection()
	}

	for _, g := range groupedFlags(node) {
		d.Section(strings.TrimSuffix(g.title, ":"))
		for _, f := range g.flags {
			d.TaggedParagraph(-1)
			if f.Short != 0 {
				d.TextBold("-" + string(f.Short))
				d.Text(", ")
			}
			d.TextBold("--" + f.Name)
			if !f.IsBool() {
				d.Text("=")
				d.TextItalic(placeholder(f))
			}
			d.EndSection()
			d.Text(f.Help + enumNote(f) + defaultNote(f.Value))
		}
		d.EndSection()
	}

	var codes []envDoc
	for _, e := range exits {
		code, text, _ := strings.Cut(e, " ")
		codes = append(codes, envDoc{code, text})
	}
	taggedSection(d, "Exit status", codes)
	taggedSection(d, "Environment", doc.env)

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

// taggedSection is a section of bold names, each with its text.
func taggedSection(d *roff.Document, title string, items []envDoc) {
	if len(items) == 0 {
		return
	}
	d.Section(title)
	for _, e := range items {
		d.TaggedParagraph(-1)
		d.TextBold(e.name)
		d.EndSection()
		d.Text(e.text)
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
func visibleFlags(node *kong.Node) []*kong.Flag {
	var out []*kong.Flag
	for _, f := range node.Flags {
		if !f.Hidden {
			out = append(out, f)
		}
	}
	return out
}

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

func enumValues(v *kong.Value) []string {
	var out []string
	for _, e := range strings.Split(v.Enum, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
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
