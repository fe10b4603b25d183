package refund_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/audit"
	"github.com/refundkit/refundkit/refund/plan"
)

// The three readers of plan item lines: refund's plan reader, audit
// --plan, and plan's JSON-lines input (with --batch planBatch). They
// share one decoder and one line loop; these tests and FuzzPlanItem hold
// each against the others through their public doors.
const planBatch = "b"

// verdict is what one reader made of an input: the items it read, or its
// first error.
type verdict struct {
	items []refund.Item
	err   error
}

func (v verdict) String() string {
	if v.err != nil {
		return "error " + v.err.Error()
	}
	return fmt.Sprintf("%+v", v.items)
}

func readRefund(in string) verdict {
	items, err := refund.ReadPlan(strings.NewReader(in), "plan.jsonl")
	if err != nil {
		return verdict{err: err}
	}
	for i := range items {
		items[i] = normal(items[i])
	}
	return verdict{items: items}
}

// readAudit audits the plan alone, offline: every planned item is then a
// missing finding, which names what audit keeps of it (no reason, no
// metadata).
func readAudit(in string) verdict {
	a := audit.New()
	if err := a.AddPlan(strings.NewReader(in), "plan.jsonl"); err != nil {
		return verdict{err: err}
	}
	var items []refund.Item
	_, err := a.Run(context.Background(), audit.Options{}, func(f *audit.Finding) {
		if f.Finding == audit.KindMissing {
			items = append(items, refund.Item{Batch: f.Batch, Item: f.Item, Charge: f.Charge,
				PaymentIntent: f.PaymentIntent, Amount: f.Amount, Currency: f.Currency})
		}
	})
	if err != nil {
		return verdict{err: err}
	}
	return verdict{items: items}
}

func readPlanInput(in string) verdict {
	p, err := plan.Read(strings.NewReader(in), "plan.jsonl", plan.Options{Batch: planBatch, Format: plan.FormatJSONL})
	if err != nil {
		return verdict{err: err}
	}
	items := p.Items()
	for i := range items {
		items[i] = normal(items[i])
	}
	return verdict{items: items}
}

// normal drops an empty metadata map, which encodes as no metadata.
func normal(it refund.Item) refund.Item {
	if len(it.Metadata) == 0 {
		it.Metadata = nil
	}
	return it
}

// auditView is what audit keeps of an item.
func auditView(items []refund.Item) []refund.Item {
	out := make([]refund.Item, len(items))
	for i, it := range items {
		out[i] = refund.Item{Batch: it.Batch, Item: it.Item, Charge: it.Charge, PaymentIntent: it.PaymentIntent,
			Amount: it.Amount, Currency: it.Currency}
	}
	return out
}

// inputError is the first *refund.InputError in err, or nil.
func inputError(err error) *refund.InputError {
	var ie *refund.InputError
	if errors.As(err, &ie) {
		return ie
	}
	return nil
}

const (
	batchRule  = "want 1-64 characters of A-Z a-z 0-9 _ . - starting with a letter or digit"
	itemRule   = "want 1-128 characters of A-Z a-z 0-9 _ . : - starting with a letter or digit"
	amountRule = "want a positive whole number of minor units"
	countRule  = "want a whole number of items above 0"
	known      = "unknown field: known are batch, item, charge, payment_intent, capture, psp_reference, amount, currency, reason, metadata, plan_items"
)

// grammarCases: every grammar question, one line each. want is refund's
// and audit's answer, an item or an error as printed; plan gives the same
// item, or an error that starts with the same text (plan may add a hint),
// unless planWant says otherwise: plan's input may leave out what plan
// fills in (batch, item) and write a currency in capitals.
const head = `{"batch":"b","item":"i","charge":"ch_1"`

var ok = refund.Item{Batch: "b", Item: "i", Charge: "ch_1"}

func with(f func(*refund.Item)) refund.Item { it := ok; f(&it); return it }

var grammarCases = []struct {
	name     string
	line     string
	want     any // refund.Item or an error message
	planWant any // plan's, when it differs
}{
	// null: absent for an optional field, an error for a required one.
	{name: "reason null", line: head + `,"reason":null}`, want: ok},
	{name: "optional nulls", line: head + `,"amount":null,"currency":null,"payment_intent":null,"metadata":null,"reason":null}`, want: ok},
	{name: "charge null beside a payment intent", line: `{"batch":"b","item":"i","charge":null,"payment_intent":"pi_1"}`,
		want: refund.Item{Batch: "b", Item: "i", PaymentIntent: "pi_1"}},
	{name: "charge null alone", line: `{"batch":"b","item":"i","charge":null}`,
		want: "plan.jsonl:1: charge: null: want a charge (ch_/py_), a payment_intent (pi_), a capture or a psp_reference"},
	{name: "payment intent null alone", line: `{"batch":"b","item":"i","payment_intent":null}`,
		want: "plan.jsonl:1: payment_intent: null: want a charge (ch_/py_), a payment_intent (pi_), a capture or a psp_reference"},
	{name: "batch null", line: `{"batch":null,"item":"i","charge":"ch_1"}`,
		want: "plan.jsonl:1: batch: null: " + batchRule, planWant: ok},
	{name: "item null", line: `{"batch":"b","item":null,"charge":"ch_1"}`,
		want: "plan.jsonl:1: item: null: " + itemRule, planWant: with(func(it *refund.Item) { it.Item = "ch_1" })},
	{name: "batch missing", line: `{"item":"i","charge":"ch_1"}`,
		want: "plan.jsonl:1: batch: missing: " + batchRule, planWant: ok},
	{name: "item missing", line: `{"batch":"b","charge":"ch_1"}`,
		want: "plan.jsonl:1: item: missing: " + itemRule, planWant: with(func(it *refund.Item) { it.Item = "ch_1" })},
	{name: "item empty", line: `{"batch":"b","item":"","charge":"ch_1"}`,
		want: `plan.jsonl:1: item: "": ` + itemRule, planWant: with(func(it *refund.Item) { it.Item = "ch_1" })},
	{name: "empty optional strings", line: head + `,"currency":"","reason":"","payment_intent":""}`, want: ok},
	{name: "neither target", line: `{"batch":"b","item":"i"}`, want: "plan.jsonl:1: needs a charge (ch_/py_), a payment_intent (pi_), a capture or a psp_reference"},
	{name: "both targets", line: head + `,"payment_intent":"pi_1"}`, want: "plan.jsonl:1: names more than one of charge, payment_intent, capture and psp_reference: give one"},

	// amount: a JSON integer of minor units, above 0.
	{name: "amount", line: head + `,"amount":500}`, want: with(func(it *refund.Item) { it.Amount = 500 })},
	{name: "amount largest", line: head + `,"amount":9223372036854775807}`, want: with(func(it *refund.Item) { it.Amount = 1<<63 - 1 })},
	{name: "amount exponent", line: head + `,"amount":1e3}`, want: "plan.jsonl:1: amount: 1e3: " + amountRule},
	{name: "amount decimal", line: head + `,"amount":100.0}`, want: "plan.jsonl:1: amount: 100.0: " + amountRule},
	{name: "amount minus zero", line: head + `,"amount":-0}`, want: "plan.jsonl:1: amount: -0: " + amountRule},
	{name: "amount zero", line: head + `,"amount":0}`, want: "plan.jsonl:1: amount: 0: " + amountRule},
	{name: "amount negative", line: head + `,"amount":-5}`, want: "plan.jsonl:1: amount: -5: " + amountRule},
	{name: "amount leading zero", line: head + `,"amount":05}`, want: "plan.jsonl:1: amount: 05: " + amountRule},
	{name: "amount plus", line: head + `,"amount":+5}`, want: "plan.jsonl:1: amount: +5: " + amountRule},
	{name: "amount too large", line: head + `,"amount":9223372036854775808}`, want: "plan.jsonl:1: amount: 9223372036854775808: too large"},
	{name: "amount string", line: head + `,"amount":"5"}`, want: `plan.jsonl:1: amount: "5": want a JSON number of minor units, not a string`},
	{name: "amount true", line: head + `,"amount":true}`, want: "plan.jsonl:1: amount: true: " + amountRule},
	{name: "amount object", line: head + `,"amount":{"v":5}}`, want: "plan.jsonl:1: amount: an object: " + amountRule},

	// plan_items: plan's count of the plan's items, on every line; not
	// part of the item (it is in no Item field), a whole number above 0.
	{name: "plan_items", line: head + `,"amount":500,"plan_items":3}`, want: with(func(it *refund.Item) { it.Amount = 500 })},
	{name: "plan_items first", line: `{"plan_items":1,"batch":"b","item":"i","charge":"ch_1"}`, want: ok},
	{name: "plan_items null", line: head + `,"plan_items":null}`, want: ok},
	{name: "plan_items zero", line: head + `,"plan_items":0}`, want: "plan.jsonl:1: plan_items: 0: " + countRule},
	{name: "plan_items negative", line: head + `,"plan_items":-3}`, want: "plan.jsonl:1: plan_items: -3: " + countRule},
	{name: "plan_items decimal", line: head + `,"plan_items":3.0}`, want: "plan.jsonl:1: plan_items: 3.0: " + countRule},
	{name: "plan_items leading zero", line: head + `,"plan_items":03}`, want: "plan.jsonl:1: plan_items: 03: " + countRule},
	{name: "plan_items too large", line: head + `,"plan_items":1000000000000000000}`, want: "plan.jsonl:1: plan_items: 1000000000000000000: " + countRule},
	{name: "plan_items string", line: head + `,"plan_items":"3"}`, want: `plan.jsonl:1: plan_items: "3": want a JSON number, not a string`},
	{name: "plan_items object", line: head + `,"plan_items":{}}`, want: "plan.jsonl:1: plan_items: an object: " + countRule},
	{name: "plan_items twice", line: head + `,"plan_items":3,"plan_items":3}`, want: "plan.jsonl:1: plan_items: given twice"},
	{name: "plan_items in capitals", line: head + `,"Plan_Items":3}`, want: "plan.jsonl:1: Plan_Items: unknown field: did you mean plan_items?"},

	// Field names: exact, once, known.
	{name: "field twice", line: head + `,"amount":5,"amount":500}`, want: "plan.jsonl:1: amount: given twice"},
	{name: "field twice, once null", line: head + `,"reason":null,"reason":"duplicate"}`, want: "plan.jsonl:1: reason: given twice"},
	{name: "field twice, escaped", line: head + `,"ch\u0061rge":"ch_2"}`, want: "plan.jsonl:1: charge: given twice"},
	{name: "escaped name", line: `{"b\u0061tch":"b","item":"i","charge":"ch_1"}`, want: ok},
	{name: "unknown field", line: head + `,"amonut":5}`, want: "plan.jsonl:1: amonut: " + known},
	{name: "field in capitals", line: head + `,"Amount":5}`, want: "plan.jsonl:1: Amount: unknown field: did you mean amount?"},

	// Values of the wrong kind.
	{name: "reason number", line: head + `,"reason":5}`, want: "plan.jsonl:1: reason: 5: want a string"},
	{name: "charge object", line: `{"batch":"b","item":"i","charge":{"id":"ch_1"}}`, want: "plan.jsonl:1: charge: an object: want a string"},
	{name: "reason not allowed", line: head + `,"reason":"DUPLICATE"}`, want: `plan.jsonl:1: reason: "DUPLICATE": want one of duplicate, fraudulent, requested_by_customer`},
	{name: "currency in capitals", line: head + `,"currency":"USD"}`,
		want: `plan.jsonl:1: currency: "USD": want a three-letter lower-case ISO code`, planWant: with(func(it *refund.Item) { it.Currency = "usd" })},
	{name: "long value cut", line: head + `,"reason":"` + strings.Repeat("x", 5000) + `"}`,
		want: `plan.jsonl:1: reason: "` + strings.Repeat("x", 64) + `...": want one of duplicate, fraudulent, requested_by_customer`},

	// metadata: an object of string values.
	{name: "metadata", line: head + `,"metadata":{"note":"caf\u00e9 \"x\"","t":"T-1"}}`,
		want: with(func(it *refund.Item) { it.Metadata = map[string]string{"note": "café \"x\"", "t": "T-1"} })},
	{name: "metadata empty", line: head + `,"metadata":{}}`, want: ok},
	{name: "metadata key twice", line: head + `,"metadata":{"a":"1","a":"2"}}`, want: "plan.jsonl:1: metadata.a: given twice"},
	{name: "metadata value null", line: head + `,"metadata":{"a":null}}`, want: "plan.jsonl:1: metadata.a: null: want a string"},
	{name: "metadata value number", line: head + `,"metadata":{"a":1}}`, want: "plan.jsonl:1: metadata.a: 1: want a string"},
	{name: "metadata array", line: head + `,"metadata":["a"]}`, want: "plan.jsonl:1: metadata: an array: want an object of string values"},
	{name: "metadata reserved", line: head + `,"metadata":{"refundkit_item":"x"}}`, want: "plan.jsonl:1: metadata.refundkit_item: the refundkit_ prefix is reserved"},

	// Text: UTF-8, escapes decoded, nothing replaced.
	{name: "invalid utf-8", line: head + `,"metadata":{"a":"` + "\xff" + `"}}`, want: "plan.jsonl:1: metadata.a: not valid UTF-8"},
	{name: "invalid utf-8 beside an escape", line: head + `,"metadata":{"a":"\u0041` + "\xff" + `"}}`, want: "plan.jsonl:1: metadata.a: not valid UTF-8"},
	{name: "lone surrogate", line: head + `,"metadata":{"a":"\ud800"}}`, want: `plan.jsonl:1: metadata.a: \ud800 is half of a UTF-16 surrogate pair`},
	{name: "surrogate pair", line: head + `,"metadata":{"a":"\ud83d\ude00"}}`, want: with(func(it *refund.Item) { it.Metadata = map[string]string{"a": "😀"} })},
	{name: "control character", line: head + ",\"reason\":\"dup\tlicate\"}", want: "plan.jsonl:1: reason: not valid JSON: column 54: control character in a string"},
	{name: "bad escape", line: head + `,"reason":"\x41"}`, want: `plan.jsonl:1: reason: not valid JSON: column 51: unknown escape \x`},

	// Lines: JSON white space around and between, one object, nothing after.
	{name: "white space", line: " \t{ \"batch\" : \"b\" ,\t\"item\":\"i\", \"charge\":\"ch_1\" } \r", want: ok},
	{name: "two objects", line: head + `} {}`, want: "plan.jsonl:1: more than one JSON value on the line"},
	{name: "trailing comma", line: head + `,}`, want: "plan.jsonl:1: not valid JSON: column 41: unexpected '}', want a field name"},
	{name: "cut short", line: head, want: "plan.jsonl:1: not valid JSON: the line ends inside the object"},
	{name: "not an object", line: `["b","i","ch_1"]`, want: "plan.jsonl:1: want a JSON object"},
	{name: "null line", line: `null`, want: "plan.jsonl:1: want a JSON object"},
	{name: "value then junk", line: head + `,"amount":5x}`, want: "plan.jsonl:1: amount: 5x: " + amountRule},
	{name: "null then junk", line: head + `,"reason":nullx}`, want: "plan.jsonl:1: reason: nullx: want a string"},
}

// TestReadersAgree: each grammar case, the same answer from every reader.
func TestReadersAgree(t *testing.T) {
	for _, tt := range grammarCases {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.line + "\n"
			r, a, p := readRefund(in), readAudit(in), readPlanInput(in)
			check := func(who string, got verdict, want any, prefix bool) {
				t.Helper()
				switch w := want.(type) {
				case refund.Item:
					wantItems := []refund.Item{w}
					if who == "audit" {
						wantItems = auditView(wantItems)
					}
					if got.err != nil || !reflect.DeepEqual(got.items, wantItems) {
						t.Errorf("%s: %v, want %+v", who, got, wantItems)
					}
				case string:
					ie := inputError(got.err)
					switch {
					case ie == nil:
						t.Errorf("%s: %v, want a *refund.InputError %q", who, got, w)
					case prefix && !strings.HasPrefix(ie.Error(), w), !prefix && ie.Error() != w:
						t.Errorf("%s: error\n%s\nwant\n%s", who, ie, w)
					}
				}
			}
			check("refund", r, tt.want, false)
			check("audit", a, tt.want, false)
			if tt.planWant != nil {
				check("plan", p, tt.planWant, false)
			} else {
				check("plan", p, tt.want, true)
			}
		})
	}
}

// TestInputErrorNamesTheField: the message is name:line: field: what is
// wrong, or name:line: what is wrong without a field; Field and Line are
// there for programs.
func TestInputErrorNamesTheField(t *testing.T) {
	v := readRefund(`{"batch":"b","item":"i","charge":"ch_1"}` + "\n\n" + `{"batch":"b","item":"j","charge":"ch_1","amount":-5}` + "\n")
	ie := inputError(v.err)
	if ie == nil || ie.Name != "plan.jsonl" || ie.Line != 3 || ie.Field != "amount" || ie.Err == nil {
		t.Fatalf("%#v, want plan.jsonl line 3 field amount", v.err)
	}
	if got, want := ie.Error(), "plan.jsonl:3: amount: -5: "+amountRule; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	for _, tt := range []struct {
		e    refund.InputError
		want string
	}{
		{refund.InputError{Name: "p", Line: 2, Err: errors.New("x")}, "p:2: x"},
		{refund.InputError{Name: "p", Line: 2, Field: "f", Err: errors.New("x")}, "p:2: f: x"},
		{refund.InputError{Name: "p", Err: errors.New("x")}, "p: x"},
		{refund.InputError{Field: "f", Err: errors.New("x")}, "f: x"},
	} {
		if got := tt.e.Error(); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.e, got, tt.want)
		}
	}
}
