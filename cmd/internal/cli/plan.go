package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/plan"
)

type planArgs struct {
	Batch       string `required:"" help:"Batch id written on every item: 1-64 of A-Z a-z 0-9 _ . - starting with a letter or digit."`
	Format      string `enum:"auto,csv,jsonl,ids" default:"auto" group:"input" help:"Input format: csv (with a header row), jsonl, ids (one a line), or auto to detect it."`
	IDs         string `name:"ids" enum:"stripe,capture,psp_reference" default:"stripe" group:"input" help:"What bare ids are: stripe (ch_/py_ charges, pi_ payment intents), capture (every id a capture: PayPal's, or the payment ids of an exec provider's API) or psp_reference (every id an Adyen pspReference)."`
	Delimiter   string `placeholder:"D" default:"auto" group:"input" help:"CSV field delimiter: , ; or tab, or auto to tell it from the header row (Excel writes ; where the decimal separator is a comma, tabs for tab-delimited text)."`
	KeepColumns bool   `group:"input" help:"Keep unknown CSV columns and JSON fields as refund metadata instead of rejecting them."`
	Shard       string `placeholder:"K/N" help:"Write only shard K of N (1 <= K <= N), a fixed partition by charge (payment intent, capture, psp_reference), for N workers with a journal each."`
	logFormatFlag
	File string `arg:"" optional:"" default:"-" predictor:"file" help:"Charges or captures to read; - or none for standard input."`
}

const planDescription = `Turn a list of charges or captures into the plan items of one batch, as JSON lines on stdout.

The input is CSV with a header row (comma-, semicolon- or tab-separated: told from the header row, or --delimiter; columns charge, payment_intent, capture, psp_reference, amount, currency, reason, item, batch, metadata.<key>; each row names one of charge, payment_intent, capture, psp_reference), JSON lines with the same fields, or bare ids one a line: ch_/py_/pi_ ids, with --ids capture capture ids (PayPal's look like 2GG279541U471931P), or with --ids psp_reference Adyen pspReferences (16 of A-Z 0-9, such as 8815658961765250). Amounts are whole minor units (1000 is 10.00 USD or 1000 JPY); none means the full remaining amount. Item ids come from the item column, else from the charge, payment intent, capture or psp_reference id, so they are the same on every run.

The whole input is checked before anything is written: on any problem, each is reported as file:line and nothing is written. Every item ends in "plan_items":N, the number of items written, so that refund shows the total and an ETA of a plan on stdin too (it is no part of the item: docs/records.md).

Exit codes: 0 plan written; 2 usage or input error (a bad flag, an unreadable file, any problem in the input, no charges or captures at all), nothing written; 3 writing stdout failed, a closed pipe too (the plan may be cut short).`

// Plan is the plan command: it reads charges or captures and writes plan items.
func Plan(env Env) int {
	const name = "plan"
	var args planArgs
	if code, done := parse(env, name, planDescription, &args); done {
		return code
	}
	catchBrokenPipe()
	env.Stderr = args.messages(env.Stderr, name)
	shardK, shardN := 0, 0
	if args.Shard != "" {
		var err error
		if shardK, shardN, err = plan.ParseShard(args.Shard); err != nil {
			return usage(env.Stderr, name, fmt.Errorf("--%v", err))
		}
	}
	if !refund.ValidBatch(args.Batch) {
		return failf(env.Stderr, name, ExitUsage, "--batch %q: want 1-64 characters of A-Z a-z 0-9 _ . - starting with a letter or digit", args.Batch)
	}

	delim, err := plan.ParseDelimiter(args.Delimiter)
	if err != nil {
		return usage(env.Stderr, name, fmt.Errorf("--%v", err))
	}
	if delim != 0 && args.Format != "auto" && args.Format != "csv" {
		return failf(env.Stderr, name, ExitUsage, "--delimiter is for CSV input, not --format %s: drop it", args.Format)
	}

	in, inName, closeIn, err := openInput(env, args.File)
	if err != nil {
		return usage(env.Stderr, name, err)
	}
	defer closeIn()
	p, err := plan.Read(in, inName, plan.Options{
		Batch:       args.Batch,
		Format:      plan.Format(args.Format),
		IDs:         plan.IDs(args.IDs),
		Delimiter:   delim,
		KeepColumns: args.KeepColumns,
	})
	var inputErr *plan.Rejection
	if errors.As(err, &inputErr) {
		for _, prob := range inputErr.Problems {
			fmt.Fprintln(env.Stderr, prob)
		}
		shown := ""
		if inputErr.Total > len(inputErr.Problems) {
			shown = fmt.Sprintf(" (first %d shown)", len(inputErr.Problems))
		}
		return failf(env.Stderr, name, ExitUsage, "%d %s%s, no plan written", inputErr.Total, plural(inputErr.Total, "problem"), shown)
	}
	if err != nil {
		return usage(env.Stderr, name, err)
	}

	summary := fmt.Sprintf("%d %s, batch %s", p.Len(), plural(p.Len(), "item"), args.Batch)
	switch p.Delimiter() {
	case plan.Semicolon:
		summary += ", read as semicolon-separated CSV"
	case plan.Tab:
		summary += ", read as tab-separated CSV"
	}
	if shardN > 0 {
		if c, pi, mixed := p.MixedPayments(); mixed {
			warnf(env.Stderr, name, "--shard %s: %s:%d names a charge and %s:%d a payment intent: a charge and its payment intent are one payment, and plan cannot tell offline which are, so it cannot keep every payment in one shard; nothing written", args.Shard, inName, c, inName, pi)
			return failf(env.Stderr, name, ExitUsage, "give every worker the whole plan and split it with refund --shard K/N: each works its shard and knows every item")
		}
		p = p.Shard(shardK, shardN)
		summary += fmt.Sprintf(", shard %d/%d: %d %s", shardK, shardN, p.Len(), plural(p.Len(), "item"))
	}
	if err := writePlan(env.Stdout, p); err != nil {
		return failf(env.Stderr, name, ExitJournal, "write the plan: %v", err)
	}
	warnf(env.Stderr, name, "%s", summary)
	return ExitOK
}

// writePlan writes an item a line, each with plan_items (the total from
// the first line; not a header, so every line is an item: docs/plan.md).
func writePlan(w io.Writer, p *plan.Plan) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	var line bytes.Buffer
	enc := json.NewEncoder(&line)
	enc.SetEscapeHTML(false) // metadata is data, not HTML
	count := []byte(`,"plan_items":` + strconv.Itoa(p.Len()) + "}\n")
	for it := range p.All() {
		line.Reset()
		if err := enc.Encode(&it); err != nil {
			return err
		}
		b := line.Bytes()
		b = append(b[:len(b)-len("}\n")], count...) // an item is never {}: batch and item are always there
		if _, err := bw.Write(b); err != nil {
			return err
		}
	}
	return bw.Flush()
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
