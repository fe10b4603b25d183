package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/refundkit/refundkit/refund"
)

// encode renders items as plan lines, the form tests compare, and checks
// that refund reads each line back as the same item: plan's output is
// refund's input.
func encode(t testing.TB, items []refund.Item) string {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for i := range items {
		start := b.Len()
		if err := enc.Encode(&items[i]); err != nil {
			t.Fatal(err)
		}
		line := b.Bytes()[start:]
		back, err := refund.ParseItem(line)
		if err != nil {
			t.Fatalf("refund does not read %s: %v", line, err)
		}
		if !reflect.DeepEqual(back, items[i]) {
			t.Fatalf("refund reads %s as %+v", line, back)
		}
	}
	return b.String()
}

// lines joins plan lines, each ending in a newline.
func lines(ls ...string) string {
	if len(ls) == 0 {
		return ""
	}
	return strings.Join(ls, "\n") + "\n"
}

func TestReadValid(t *testing.T) {
	tests := []struct {
		name   string
		format Format
		keep   bool
		in     string
		want   string
	}{
		{
			name: "csv",
			in: "charge,amount,currency,reason,item\n" +
				"ch_1,1000,usd,requested_by_customer,\n" +
				"ch_2,,,,\n" +
				"py_3,250,eur,duplicate,order-3\n",
			want: lines(
				`{"batch":"b1","item":"ch_1","charge":"ch_1","amount":1000,"currency":"usd","reason":"requested_by_customer"}`,
				`{"batch":"b1","item":"ch_2","charge":"ch_2"}`,
				`{"batch":"b1","item":"order-3","charge":"py_3","amount":250,"currency":"eur","reason":"duplicate"}`,
			),
		},
		{
			name: "csv from excel: bom, crlf, quotes, blank rows",
			in: "\ufeffcharge,amount,currency,metadata.note\r\n" +
				"\"ch_1\",\"1000\",USD,\"refund, as agreed\"\r\n" +
				"ch_2,2000,usd,\"she said \"\"late\"\"\"\r\n" +
				"ch_3,300,usd,\"two\r\nlines\"\r\n" +
				",,,\r\n\r\n\r\n",
			want: lines(
				`{"batch":"b1","item":"ch_1","charge":"ch_1","amount":1000,"currency":"usd","metadata":{"note":"refund, as agreed"}}`,
				`{"batch":"b1","item":"ch_2","charge":"ch_2","amount":2000,"currency":"usd","metadata":{"note":"she said \"late\""}}`,
				`{"batch":"b1","item":"ch_3","charge":"ch_3","amount":300,"currency":"usd","metadata":{"note":"two\nlines"}}`,
			),
		},
		{
			name: "csv header case and spaces, cells trimmed, empty metadata left out",
			in: " Charge , AMOUNT ,Metadata.Order_ID, ,batch\n" +
				"  ch_1 , 5 , A-1 ,,b1\n" +
				"ch_2,6,,,\n",
			want: lines(
				`{"batch":"b1","item":"ch_1","charge":"ch_1","amount":5,"metadata":{"Order_ID":"A-1"}}`,
				`{"batch":"b1","item":"ch_2","charge":"ch_2","amount":6}`,
			),
		},
		{
			name: "csv payment intents and trailing empty fields",
			in: "payment_intent,charge,amount\n" +
				"pi_1,,100,,\n" +
				",ch_2,200\n",
			want: lines(
				`{"batch":"b1","item":"pi_1","payment_intent":"pi_1","amount":100}`,
				`{"batch":"b1","item":"ch_2","charge":"ch_2","amount":200}`,
			),
		},
		{
			name: "csv partial refunds: one charge, distinct item ids, each with an amount",
			in: "charge,item,amount\n" +
				"ch_1,ch_1-a,100\n" +
				"ch_1,ch_1-b,200\n" +
				"ch_2,,\n",
			want: lines(
				`{"batch":"b1","item":"ch_1-a","charge":"ch_1","amount":100}`,
				`{"batch":"b1","item":"ch_1-b","charge":"ch_1","amount":200}`,
				`{"batch":"b1","item":"ch_2","charge":"ch_2"}`,
			),
		},
		{
			name: "csv partial refunds whose item ids include the charge's own",
			in: "charge,item,amount\n" +
				"ch_1,ch_1,40\n" +
				"ch_1,p2,50\n" +
				"ch_2,p3,10\n" +
				"ch_3,ch_2,\n" + // no other row has item id ch_2
				"ch_4,p5,1\n" +
				"ch_4,ch_4,2\n",
			want: lines(
				`{"batch":"b1","item":"ch_1","charge":"ch_1","amount":40}`,
				`{"batch":"b1","item":"p2","charge":"ch_1","amount":50}`,
				`{"batch":"b1","item":"p3","charge":"ch_2","amount":10}`,
				`{"batch":"b1","item":"ch_2","charge":"ch_3"}`,
				`{"batch":"b1","item":"p5","charge":"ch_4","amount":1}`,
				`{"batch":"b1","item":"ch_4","charge":"ch_4","amount":2}`,
			),
		},
		{
			name: "csv keep columns",
			keep: true,
			in:   "charge,Customer Email,metadata.x\nch_1,a@example.com,1\nch_2,,\n",
			want: lines(
				`{"batch":"b1","item":"ch_1","charge":"ch_1","metadata":{"Customer Email":"a@example.com","x":"1"}}`,
				`{"batch":"b1","item":"ch_2","charge":"ch_2"}`,
			),
		},
		{
			name: "csv largest amount",
			in:   "charge,amount\nch_1,9223372036854775807\nch_2,0042\n",
			want: lines(
				`{"batch":"b1","item":"ch_1","charge":"ch_1","amount":9223372036854775807}`,
				`{"batch":"b1","item":"ch_2","charge":"ch_2","amount":42}`,
			),
		},
		{
			name: "jsonl",
			in: "\ufeff\r\n" +
				`{"charge":"ch_1","amount":1000,"currency":"USD","reason":"fraudulent","metadata":{"k":"v"}}` + "\r\n" +
				"\r\n" +
				`  {"batch":"b1","item":"i-2","payment_intent":"pi_2","amount":null,"reason":null}  ` + "\n" +
				`{"batch":"b1","item":"ch_3","charge":"ch_3"}`, // a plan line reads back as itself
			want: lines(
				`{"batch":"b1","item":"ch_1","charge":"ch_1","amount":1000,"currency":"usd","reason":"fraudulent","metadata":{"k":"v"}}`,
				`{"batch":"b1","item":"i-2","payment_intent":"pi_2"}`,
				`{"batch":"b1","item":"ch_3","charge":"ch_3"}`,
			),
		},
		{
			name: "jsonl escapes and spacing",
			in: `{ "ch\u0061rge" : "ch_1" , "amount" : 7 , "metadata" : { "note" : "say \"hi\" {not] a brace}" , "k2":"\u00e9" } }` + "\n" +
				`{"payment_intent":"pi_2","metadata":{},"item":"x\u002dy"}` + "\n",
			want: lines(
				`{"batch":"b1","item":"ch_1","charge":"ch_1","amount":7,"metadata":{"k2":"é","note":"say \"hi\" {not] a brace}"}}`,
				`{"batch":"b1","item":"x-y","payment_intent":"pi_2"}`,
			),
		},
		{
			name: "jsonl keep fields",
			keep: true,
			in:   `{"charge":"ch_1","order":"A-1","n":12,"vip":true,"gone":null,"metadata":{"k":"v"}}` + "\n",
			want: lines(
				`{"batch":"b1","item":"ch_1","charge":"ch_1","metadata":{"k":"v","n":"12","order":"A-1","vip":"true"}}`,
			),
		},
		{
			name: "ids",
			in:   "\n  ch_1  \r\npy_2\r\n\r\npi_3\n\n",
			want: lines(
				`{"batch":"b1","item":"ch_1","charge":"ch_1"}`,
				`{"batch":"b1","item":"py_2","charge":"py_2"}`,
				`{"batch":"b1","item":"pi_3","payment_intent":"pi_3"}`,
			),
		},
		{
			name:   "ids named",
			format: FormatIDs,
			in:     "ch_1",
			want:   lines(`{"batch":"b1","item":"ch_1","charge":"ch_1"}`),
		},
		{
			name: "csv detected, single column",
			in:   "\n\ncharge\nch_1\n",
			want: lines(`{"batch":"b1","item":"ch_1","charge":"ch_1"}`),
		},
		{
			name: "jsonl detected after blank lines",
			in:   "\r\n \r\n{\"charge\":\"ch_1\"}\r\n",
			want: lines(`{"batch":"b1","item":"ch_1","charge":"ch_1"}`),
		},
		{
			name:   "csv named, single column",
			format: FormatCSV,
			in:     "charge\nch_1\n",
			want:   lines(`{"batch":"b1","item":"ch_1","charge":"ch_1"}`),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkValid(t, tt.in, Options{Batch: "b1", Format: tt.format, KeepColumns: tt.keep}, tt.want)
		})
	}
}

// checkValid reads in with opts and checks that the plan is want, valid,
// and the same when read again.
func checkValid(t *testing.T, in string, opts Options, want string) {
	t.Helper()
	p, err := Read(strings.NewReader(in), "in", opts)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	items := p.Items()
	if got := encode(t, items); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	for i := range items {
		if err := items[i].Validate(); err != nil {
			t.Errorf("item %d: %v", i, err)
		}
	}
	// Reading again gives the same plan, ids included: that is what
	// keeps idempotency keys stable across runs.
	again, err := Read(strings.NewReader(in), "in", opts)
	if err != nil || encode(t, again.Items()) != want {
		t.Errorf("second read differs: %v", err)
	}
}

func TestReadProblems(t *testing.T) {
	tests := []struct {
		name   string
		format Format
		keep   bool
		in     string
		want   []string // problems, as printed
	}{
		// The whole input.
		{name: "empty", in: "", want: []string{"in: no charges or captures found"}},
		{name: "blank", in: "\r\n  \n\n", want: []string{"in: no charges or captures found"}},
		{name: "bom only", in: "\ufeff", want: []string{"in: no charges or captures found"}},
		{name: "csv header only", in: "charge,amount\r\n", want: []string{"in: no charges or captures found"}},
		{name: "old mac line ends", in: "charge,amount\rch_1,100\r", want: []string{"in: lines end in CR alone (old Mac text): save the file with LF or CRLF line ends (in Excel: CSV UTF-8)"}},
		{name: "utf-16", in: "\xff\xfec\x00h\x00", want: []string{"in: UTF-16 text: save the file as UTF-8 (in Excel: CSV UTF-8)"}},

		// CSV headers.
		{
			name: "csv unknown columns",
			in:   "charge,Amount,email,refund amount\nch_1,1,x,2\n",
			want: []string{`in:1: unknown columns email, "refund amount" (known: charge, payment_intent, capture, psp_reference, amount, currency, reason, item, batch, metadata.<key>; --keep-columns keeps others as metadata)`},
		},
		{
			name: "csv no target column",
			in:   "\n\namount\n1\n",
			want: []string{"in:3: no charge, payment_intent, capture or psp_reference column (known: charge, payment_intent, capture, psp_reference, amount, currency, reason, item, batch, metadata.<key>)"},
		},
		{
			name: "csv repeated column",
			in:   "charge,amount,Amount\nch_1,1,2\n",
			want: []string{"in:1: column Amount repeats column 2"},
		},
		{
			name: "csv metadata key from two columns",
			keep: true,
			in:   "charge,metadata.note,note\nch_1,a,b\n",
			want: []string{"in:1: column note: metadata key note already comes from column 2"},
		},
		{
			name: "csv reserved metadata key",
			in:   "charge,metadata.refundkit_item\nch_1,x\n",
			want: []string{`in:1: column metadata.refundkit_item: the refundkit_ prefix is reserved`},
		},
		{
			name: "csv without a header",
			in:   "ch_1,100\nch_2,200\n",
			want: []string{"in:1: no header row: ch_1 is an id; want a first row naming the columns, such as charge,amount"},
		},
		{
			name:   "ids read as csv",
			format: FormatCSV,
			in:     "ch_1\n",
			want:   []string{"in:1: no header row: ch_1 is an id; want a first row naming the columns, such as charge,amount"},
		},

		// CSV rows: every check, with its line.
		{
			name: "csv amounts",
			in: "charge,amount\n" +
				"ch_1,10.00\n" +
				"ch_2,-5\n" +
				"ch_3,0\n" +
				"ch_4,1e3\n" +
				"ch_5,\"1,000\"\n" +
				"ch_6,+5\n" +
				"ch_7,9223372036854775808\n" +
				"ch_8,ten dollars\n",
			want: []string{
				"in:2: amount: 10.00: want a positive whole number of minor units, with no decimal or thousands separator (12.50 EUR is 1250)",
				"in:3: amount: -5: want a positive whole number of minor units",
				"in:4: amount: 0: want a positive whole number of minor units",
				"in:5: amount: 1e3: want a positive whole number of minor units",
				"in:6: amount: 1,000: want a positive whole number of minor units, with no decimal or thousands separator (12.50 EUR is 1250)",
				"in:7: amount: +5: want a positive whole number of minor units",
				"in:8: amount: 9223372036854775808: too large",
				`in:9: amount: "ten dollars": want a positive whole number of minor units`,
			},
		},
		{
			name: "csv fields",
			in: "charge,payment_intent,currency,reason,item,batch,metadata.k\n" +
				"ch_1,,us,,,,\n" +
				"ch_2,,US1,,,,\n" +
				"ch_3,,,changed_mind,,,\n" +
				"xx_4,,,,,,\n" +
				",ch_5,,,,,\n" +
				"ch_6,pi_6,,,,,\n" +
				",,usd,,,,\n" +
				"ch_8,,,,a b,,\n" +
				"ch_9,,,,,b2,\n" +
				"ch_10,,,,,,caf\xe9\n" +
				"ch_" + strings.Repeat("x", 130) + ",,,,,,\n",
			want: []string{
				`in:2: currency: "us": want a three-letter lower-case ISO code`,
				`in:3: currency: "us1": want a three-letter lower-case ISO code`,
				`in:4: reason: "changed_mind": want one of duplicate, fraudulent, requested_by_customer`,
				`in:5: charge: "xx_4": want an id starting ch_ or py_`,
				`in:6: payment_intent: "ch_5": want an id starting pi_`,
				`in:7: names more than one of charge, payment_intent, capture and psp_reference: give one`,
				`in:8: needs a charge (ch_/py_), a payment_intent (pi_), a capture or a psp_reference`,
				`in:9: item: "a b": want 1-128 characters of A-Z a-z 0-9 _ . : - starting with a letter or digit`,
				`in:10: batch: b2: the plan is for batch b1`,
				`in:11: metadata.k: not UTF-8 text (in Excel, save as CSV UTF-8)`,
				"in:12: charge: ch_" + strings.Repeat("x", 61) + "...: longer than 128 characters: give the row an item id",
			},
		},
		{
			name: "csv row shapes",
			in: "charge,amount,\n" +
				"ch_1\n" +
				"ch_2,1,2,3\n" +
				"ch_3,1,oops\n",
			want: []string{
				"in:2: 1 fields, the header has 3",
				"in:3: 4 fields, the header has 3",
				"in:4: value oops in column 3, which has no name in the header",
			},
		},
		{
			name: "csv syntax, line numbers after a multi-line field",
			in: "charge,metadata.note\n" +
				"ch_1,\"line\nbreak\"\n" +
				"ch_2,bad\"quote\n" +
				"ch_3,\"ab\"c\n" +
				"ch_4,ok\n" +
				"ch_5,\"never closed\nch_6,x\n",
			want: []string{
				`in:4: bare " in non-quoted-field, column 9`,
				`in:5: extraneous or missing " in quoted-field`,
				`in:8: extraneous or missing " in quoted-field (in the row starting at line 7)`,
			},
		},

		// Duplicates.
		{
			name: "charge listed twice",
			in:   "charge,amount\nch_1,100\nch_2,\nch_1,100\nch_2,5\n",
			want: []string{
				"in:4: charge ch_1 already listed at line 2",
				"in:5: charge ch_2 already listed at line 3",
			},
		},
		{
			name: "payment intent listed twice",
			in:   "pi_1\r\n\r\npi_1\r\n",
			want: []string{"in:3: payment_intent pi_1 already listed at line 1"},
		},
		{
			name: "partial refund beside a full one",
			in: "charge,item,amount\n" +
				"ch_1,,\n" + // full, item id ch_1
				"ch_1,p1,100\n" +
				"ch_2,p2,100\n" +
				"ch_2,p3,\n" +
				"ch_3,p4,\n" +
				"ch_3,p5,100\n",
			want: []string{
				"in:3: charge ch_1 already listed at line 2",
				"in:5: charge ch_2 already listed at line 4: refunding a charge in parts needs an amount on every row",
				"in:7: charge ch_3 already listed at line 6: refunding a charge in parts needs an amount on every row",
			},
		},
		{
			name: "item id listed twice",
			in: "charge,item,amount\n" +
				"ch_1,a,\n" +
				"ch_2,a,\n" +
				"ch_3,b,5\n" +
				"ch_3,b,6\n" +
				"ch_4,,\n" +
				"ch_5,ch_4,\n" +
				"ch_6,ch_7,\n" +
				"ch_7,,\n" +
				"ch_8,ch_8,40\n" +
				"ch_8,p8,50\n" +
				"ch_8,ch_8,10\n" +
				"ch_9,p9,1\n" +
				"ch_9,ch_9,2\n" +
				"ch_10,ch_9,\n" +
				"ch_11,p11,1\n" +
				"ch_12,ch_11,\n" +
				"ch_11,ch_11,2\n",
			want: []string{
				"in:3: item a already listed at line 2",
				"in:5: item b already listed at line 4",
				"in:7: item ch_4 already listed at line 6",
				"in:9: item ch_7 already listed at line 8",
				"in:12: item ch_8 already listed at line 10",
				"in:15: item ch_9 already listed at line 14",
				"in:18: item ch_11 already listed at line 17",
			},
		},

		// JSON lines: refund's grammar and messages (refund/readers_test.go
		// holds the three readers to it), where plan may fill in the batch
		// and item id and lower the currency.
		{
			name: "jsonl",
			in: `{"charge":"ch_1","amount":"100"}` + "\n" +
				`{"charge":"ch_2","amount":10.5}` + "\n" +
				`{"charge":"ch_3","amount":-5}` + "\n" +
				`{"charge":"ch_4","amount":1e3}` + "\n" +
				`{"charge":"ch_5","amount":0}` + "\n" +
				`{"charge":5}` + "\n" +
				`{"charge":"ch_7","batch":"b2"}` + "\n" +
				`{"charge":"ch_8","email":"x","tag":1}` + "\n" +
				`{"charge":"ch_9","amount":1,"amount":2}` + "\n" +
				`{"charge":"ch_10","metadata":{"k":1}}` + "\n" +
				`{"charge":"ch_11","metadata":{"k":null}}` + "\n" +
				`{"charge":"ch_12"}{"charge":"ch_13"}` + "\n" +
				`{"charge":"ch_14",}` + "\n" +
				`["ch_15"]` + "\n" +
				`{"charge":"ch_16"` + "\n" +
				`{"charge":"ch_17"}` + "\n" +
				`{"charge":"ch_17"}` + "\n" +
				`{"charge":"ch_18","metadata":{"k":"1","k":"2"}}` + "\n" +
				`{"charge":"ch_19","Amount":5}` + "\n",
			want: []string{
				`in:1: amount: "100": want a JSON number of minor units, not a string`,
				"in:2: amount: 10.5: want a positive whole number of minor units",
				"in:3: amount: -5: want a positive whole number of minor units",
				"in:4: amount: 1e3: want a positive whole number of minor units",
				"in:5: amount: 0: want a positive whole number of minor units",
				"in:6: charge: 5: want a string",
				"in:7: batch: b2: the plan is for batch b1",
				"in:8: email: unknown field: known are batch, item, charge, payment_intent, capture, psp_reference, amount, currency, reason, metadata, plan_items (--keep-columns keeps others as metadata)",
				"in:9: amount: given twice",
				"in:10: metadata.k: 1: want a string",
				"in:11: metadata.k: null: want a string",
				"in:12: more than one JSON value on the line",
				"in:13: not valid JSON: column 19: unexpected '}', want a field name",
				"in:14: want a JSON object",
				"in:15: not valid JSON: the line ends inside the object",
				"in:17: charge ch_17 already listed at line 16",
				"in:18: metadata.k: given twice",
				"in:19: Amount: unknown field: did you mean amount?",
			},
		},
		{
			name: "jsonl shapes",
			in: "{}\n" +
				`{"charge":"ch_2","x":[1,{"a":"]}\""}],"y":{"z":[]}}` + "\n" +
				`{"charge":"ch_3","ch\u0061rge":"ch_3"}` + "\n" +
				`"ch_4"` + "\n" +
				`{"charge":"ch_5"} x` + "\n" +
				`{"charge":"ch_6","amount":"1e3"}` + "\n" +
				`{"charge":"ch_7","amount":true}` + "\n" +
				"\f\n" +
				`{"charge":null}` + "\n",
			want: []string{
				"in:1: needs a charge (ch_/py_), a payment_intent (pi_), a capture or a psp_reference",
				"in:2: x: unknown field: known are batch, item, charge, payment_intent, capture, psp_reference, amount, currency, reason, metadata, plan_items (--keep-columns keeps others as metadata)",
				"in:3: charge: given twice",
				"in:4: want a JSON object",
				"in:5: more than one JSON value on the line",
				`in:6: amount: "1e3": want a JSON number of minor units, not a string`,
				"in:7: amount: true: want a positive whole number of minor units",
				"in:8: want a JSON object",
				"in:9: charge: null: want a charge (ch_/py_), a payment_intent (pi_), a capture or a psp_reference",
			},
		},
		{
			name: "jsonl keep refuses objects",
			keep: true,
			in: `{"charge":"ch_1","x":{"a":1}}` + "\n" +
				`{"charge":"ch_2","refundkit_item":"x"}` + "\n" +
				`{"charge":"ch_3","note":"a","metadata":{"note":"b"}}` + "\n" +
				`{"charge":"ch_4","Reason":"duplicate"}` + "\n",
			want: []string{
				"in:1: x: an object: want a string, number or boolean to keep as metadata",
				`in:2: refundkit_item: cannot be kept as metadata: the refundkit_ prefix is reserved`,
				"in:3: metadata.note: given twice",
				"in:4: Reason: unknown field: did you mean reason?",
			},
		},

		// Ids.
		{
			name: "ids",
			in:   "ch_1\nch_2,100\nrefund ch_3\nch_\nch_1\n",
			want: []string{
				`in:2: ch_2,100: want one charge (ch_, py_) or payment intent (pi_) id a line`,
				`in:3: "refund ch_3": want one charge (ch_, py_) or payment intent (pi_) id a line`,
				`in:4: ch_: want one charge (ch_, py_) or payment intent (pi_) id a line`,
				"in:5: charge ch_1 already listed at line 1",
			},
		},
		{
			name: "ids line too long",
			in:   "ch_1\nch_" + strings.Repeat("x", refund.MaxLineBytes) + "\nch_2\nch_2\n",
			want: []string{
				"in:2: line longer than 1048576 bytes",
				"in:4: charge ch_2 already listed at line 3",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkProblems(t, tt.in, Options{Batch: "b1", Format: tt.format, KeepColumns: tt.keep}, tt.want)
		})
	}
}

// checkProblems reads in with opts and checks that it is refused with the
// problems want, as printed, and no plan.
func checkProblems(t *testing.T, in string, opts Options, want []string) {
	t.Helper()
	p, err := Read(strings.NewReader(in), "in", opts)
	var ie *Rejection
	if !errors.As(err, &ie) {
		t.Fatalf("Read = %v, %v; want a *Rejection", p, err)
	}
	if p != nil {
		t.Errorf("Read returned a plan of %d items beside its problems", p.Len())
	}
	var got []string
	for _, p := range ie.Problems {
		got = append(got, p.Error())
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if ie.Total != len(want) {
		t.Errorf("Total = %d, want %d", ie.Total, len(want))
	}
}

// TestReadProblemLimit: a file with the same mistake on every row reports
// the first few in order and counts the rest.
func TestReadProblemLimit(t *testing.T) {
	var in strings.Builder
	in.WriteString("charge,amount\n")
	for i := 0; i < 25; i++ {
		in.WriteString("ch_1,1.00\n")
	}
	tests := []struct {
		max, wantKept int
	}{
		{0, DefaultMaxProblems},
		{3, 3},
		{100, 25},
	}
	for _, tt := range tests {
		_, err := Read(strings.NewReader(in.String()), "charges.csv", Options{Batch: "b1", MaxProblems: tt.max})
		var ie *Rejection
		if !errors.As(err, &ie) {
			t.Fatalf("max %d: err = %v", tt.max, err)
		}
		if len(ie.Problems) != tt.wantKept || ie.Total != 25 {
			t.Errorf("max %d: kept %d of %d; want %d of 25", tt.max, len(ie.Problems), ie.Total, tt.wantKept)
		}
		for i, p := range ie.Problems {
			if p.Line != i+2 {
				t.Errorf("max %d: problem %d at line %d, want %d", tt.max, i, p.Line, i+2)
			}
		}
		wantTail := ""
		if tt.wantKept < 25 {
			wantTail = "\n" + strconv.Itoa(25-tt.wantKept) + " more problems not shown"
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "charges.csv:2: amount: 1.00: want") || !strings.HasSuffix(msg, "(12.50 EUR is 1250)"+wantTail) {
			t.Errorf("max %d: Error() = %q", tt.max, msg)
		}
	}
}

func TestReadOptions(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"bad batch", Options{Batch: "b 1"}, `batch "b 1": want 1-64 characters of A-Z a-z 0-9 _ . - starting with a letter or digit`},
		{"no batch", Options{}, `batch "": want 1-64 characters of A-Z a-z 0-9 _ . - starting with a letter or digit`},
		{"bad format", Options{Batch: "b1", Format: "xlsx"}, "format xlsx: want csv, jsonl, ids or auto"},
		{"bad ids", Options{Batch: "b1", IDs: "paypal"}, "ids paypal: want stripe, capture or psp_reference"},
	}
	for _, tt := range tests {
		_, err := Read(strings.NewReader("ch_1\n"), "in", tt.opts)
		if err == nil || err.Error() != tt.want {
			t.Errorf("%s: err = %v, want %s", tt.name, err, tt.want)
		}
		var ie *refund.InputError
		if errors.As(err, &ie) {
			t.Errorf("%s: an *InputError for bad options", tt.name)
		}
	}
}

// errReader fails after its data, like a disk or pipe that breaks.
type errReader struct {
	data []byte
	err  error
}

func (r *errReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func TestReadIOError(t *testing.T) {
	broken := errors.New("broken pipe")
	inputs := map[Format]string{
		FormatAuto:  "ch_1\nch_2\n",
		FormatCSV:   "charge\nch_1\n",
		FormatJSONL: `{"charge":"ch_1"}` + "\n",
		FormatIDs:   "ch_1\n",
	}
	for f, in := range inputs {
		p, err := Read(&errReader{data: []byte(in), err: broken}, "in", Options{Batch: "b1", Format: f})
		if !errors.Is(err, broken) || p != nil || err.Error() != "read in: broken pipe" {
			t.Errorf("%s: Read = %v, %v; want no plan and the read error", f, p, err)
		}
	}
	// An error that names the file already is not named twice.
	dir, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	_, err = Read(dir, dir.Name(), Options{Batch: "b1"})
	if want := "read " + dir.Name() + ": is a directory"; err == nil || err.Error() != want {
		t.Errorf("Read(a directory) = %v, want %s", err, want)
	}
}

// TestSampleCharges keeps the demo's sample export valid: every simulator
// charge ch_sim0000001..ch_sim0000200 once, a few refunded in two parts,
// and no charge asked for more than 100 (1.00), the least the simulator's
// generator charges.
func TestSampleCharges(t *testing.T) {
	f, err := os.Open("../../testdata/charges/charges.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := Read(f, "charges.csv", Options{Batch: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	requested := make(map[string]int64)
	rows := make(map[string]int)
	for it := range p.All() {
		requested[it.Charge] += it.Amount
		rows[it.Charge]++
	}
	for i := 1; i <= 200; i++ {
		ch := fmt.Sprintf("ch_sim%07d", i)
		if rows[ch] == 0 {
			t.Errorf("%s missing", ch)
		}
		if requested[ch] > 100 {
			t.Errorf("%s: %d requested, more than the smallest simulated charge", ch, requested[ch])
		}
		delete(rows, ch)
	}
	if len(rows) > 0 {
		t.Errorf("charges the simulator does not make: %v", rows)
	}
	if parts := p.Len() - 200; parts < 3 {
		t.Errorf("%d partial refunds, want a few", parts)
	}
}
