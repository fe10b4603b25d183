package refund_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/refundkit/refundkit/refund"
)

// FuzzPlanItem feeds one line to every reader of plan items (refund's plan
// reader, audit --plan, plan's JSON-lines input) and fails if they
// disagree on accepting it, on the item read, or on the message for it:
//   - refund and audit share one loop and one decoder: the same answer to
//     the letter (audit keeps no reason or metadata);
//   - plan gives refund's answer too (its message may add a hint), except
//     where plan's input leaves to plan what refund requires (a batch, an
//     item id, a lower-case currency): then it refuses a batch that is not
//     its own, and an item it accepts is one refund reads back as itself.
//
// The seed corpus is the grammar cases and testdata/fuzz/FuzzPlanItem.
func FuzzPlanItem(f *testing.F) {
	for _, tt := range grammarCases {
		f.Add([]byte(tt.line))
	}
	f.Add([]byte(head + `,"amount":250,"currency":"usd","reason":"fraudulent","metadata":{"k":"v","n":""}}`))
	f.Add([]byte(`{"batch":"b","payment_intent":"pi_1","currency":"EUR"}`))
	f.Add([]byte(`{"batch":"b","item":"i","psp_reference":"8815658961765250","capture":null}`))
	f.Add([]byte(`{"batch":"b2","item":"i","charge":"ch_1"}`))
	f.Add([]byte(" \t "))
	f.Fuzz(func(t *testing.T, line []byte) {
		if i := bytes.IndexByte(line, '\n'); i >= 0 {
			line = line[:i]
		}
		// plan judges a whole input's encoding before any line: a UTF-8 byte
		// order mark is dropped, UTF-16 refused. That is not the line grammar.
		for _, mark := range []string{"\xef\xbb\xbf", "\xff\xfe", "\xfe\xff"} {
			if bytes.HasPrefix(line, []byte(mark)) {
				return
			}
		}
		in := string(line) + "\n"
		r, a, p := readRefund(in), readAudit(in), readPlanInput(in)

		if (r.err == nil) != (a.err == nil) || r.err != nil && r.err.Error() != a.err.Error() ||
			r.err == nil && len(r.items)+len(a.items) > 0 && !reflect.DeepEqual(auditView(r.items), a.items) {
			t.Fatalf("%q\nrefund: %v\naudit:  %v", line, r, a)
		}
		if r.err != nil && inputError(r.err) == nil {
			t.Fatalf("%q: refund: not an *InputError: %v", line, r.err)
		}
		if p.err == nil {
			backIsSame(t, line, p.items)
		}
		if r.err == nil && len(r.items) == 0 { // a blank line
			if ie := inputError(p.err); ie == nil || ie.Line != 0 {
				t.Fatalf("%q: a blank input: plan %v, want no charges found", line, p)
			}
			return
		}

		var dec refund.ItemDecoder
		dec.Input = true
		raw, rawErr := dec.Decode(line)
		switch {
		case rawErr != nil || raw.Batch == planBatch && raw.Item != "" && !strings.ContainsAny(raw.Currency, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"):
			// Nothing for plan to fill in: refund's answer.
			switch {
			case r.err == nil && (p.err != nil || !reflect.DeepEqual(r.items, p.items)),
				r.err != nil && (inputError(p.err) == nil || !strings.HasPrefix(inputError(p.err).Error(), inputError(r.err).Error())):
				t.Fatalf("%q\nrefund: %v\nplan:   %v", line, r, p)
			}
		case raw.Batch != "" && raw.Batch != planBatch:
			if ie := inputError(p.err); ie == nil || ie.Field != "batch" {
				t.Fatalf("%q: batch %q: plan %v, want it refused for its batch", line, raw.Batch, p)
			}
		case r.err == nil:
			t.Fatalf("%q: refund read %v, though the line leaves out what plan fills in", line, r)
		}
	})
}

// backIsSame: the item plan accepted, written as plan writes it, reads
// back through refund as the same item.
func backIsSame(t *testing.T, line []byte, items []refund.Item) {
	t.Helper()
	if len(items) != 1 {
		t.Fatalf("%q: plan read %d items from one line", line, len(items))
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&items[0]); err != nil {
		t.Fatal(err)
	}
	back := readRefund(out.String())
	if back.err != nil || !reflect.DeepEqual(back.items, items) {
		t.Fatalf("%q: plan wrote %s, which refund reads as %v", line, out.Bytes(), back)
	}
}
