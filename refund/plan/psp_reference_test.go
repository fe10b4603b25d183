package plan

import (
	"strings"
	"testing"
)

// Adyen payments, named by their pspReference, are planned as captures
// are: CSV, JSON lines, and bare ids when IDsPSPReference says so.

func TestReadPSPReferences(t *testing.T) {
	tests := []struct {
		name   string
		format Format
		ids    IDs
		in     string
		want   string
	}{
		{
			name: "csv, every column beside psp_reference",
			in: "PSP_Reference,amount,currency,reason,item,batch,metadata.order\r\n" +
				"8815658961765250,1000,EUR,requested_by_customer,,b1,A-1\r\n" +
				" QFQTPCQ8HXSKGK82 ,,,,refund-2,,\r\n",
			want: lines(
				`{"batch":"b1","item":"8815658961765250","psp_reference":"8815658961765250","amount":1000,"currency":"eur","reason":"requested_by_customer","metadata":{"order":"A-1"}}`,
				`{"batch":"b1","item":"refund-2","psp_reference":"QFQTPCQ8HXSKGK82"}`,
			),
		},
		{
			name: "csv, a payment refunded in parts",
			in: "psp_reference,item,amount\n" +
				"8815658961765250,8815658961765250,100\n" +
				"8815658961765250,part-2,200\n",
			want: lines(
				`{"batch":"b1","item":"8815658961765250","psp_reference":"8815658961765250","amount":100}`,
				`{"batch":"b1","item":"part-2","psp_reference":"8815658961765250","amount":200}`,
			),
		},
		{
			name: "csv, one target a row among four columns",
			in: "charge,payment_intent,capture,psp_reference\n" +
				"ch_1,,,\n" +
				",pi_2,,\n" +
				",,CAP3,\n" +
				",,,8815658961765250\n",
			want: lines(
				`{"batch":"b1","item":"ch_1","charge":"ch_1"}`,
				`{"batch":"b1","item":"pi_2","payment_intent":"pi_2"}`,
				`{"batch":"b1","item":"CAP3","capture":"CAP3"}`,
				`{"batch":"b1","item":"8815658961765250","psp_reference":"8815658961765250"}`,
			),
		},
		{
			name: "jsonl",
			in: `{"psp_reference":"8815658961765250","amount":1000,"currency":"EUR"}` + "\n" +
				`{"item":"refund-2","psp_reference":"QFQTPCQ8HXSKGK82","charge":null}` + "\n" +
				`{"batch":"b1","item":"x","psp_reference":"ABCDEFGHIJKLMNOP"}` + "\n", // a plan line reads back as itself
			want: lines(
				`{"batch":"b1","item":"8815658961765250","psp_reference":"8815658961765250","amount":1000,"currency":"eur"}`,
				`{"batch":"b1","item":"refund-2","psp_reference":"QFQTPCQ8HXSKGK82"}`,
				`{"batch":"b1","item":"x","psp_reference":"ABCDEFGHIJKLMNOP"}`,
			),
		},
		{
			name: "ids as psp_references, detected",
			ids:  IDsPSPReference,
			in:   "\n 8815658961765250 \r\nQFQTPCQ8HXSKGK82\r\n",
			want: lines(
				`{"batch":"b1","item":"8815658961765250","psp_reference":"8815658961765250"}`,
				`{"batch":"b1","item":"QFQTPCQ8HXSKGK82","psp_reference":"QFQTPCQ8HXSKGK82"}`,
			),
		},
		{
			name:   "ids as psp_references, named",
			format: FormatIDs,
			ids:    IDsPSPReference,
			in:     "8815658961765250\n",
			want:   lines(`{"batch":"b1","item":"8815658961765250","psp_reference":"8815658961765250"}`),
		},
		{
			name: "ids as psp_references: a csv header is still csv",
			ids:  IDsPSPReference,
			in:   "\npsp_reference\n8815658961765250\n",
			want: lines(`{"batch":"b1","item":"8815658961765250","psp_reference":"8815658961765250"}`),
		},
		{
			name: "ids as psp_references: json lines are json lines",
			ids:  IDsPSPReference,
			in:   `{"charge":"ch_1"}` + "\n",
			want: lines(`{"batch":"b1","item":"ch_1","charge":"ch_1"}`),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkValid(t, tt.in, Options{Batch: "b1", Format: tt.format, IDs: tt.ids}, tt.want)
		})
	}
}

func TestReadPSPReferenceProblems(t *testing.T) {
	const rule = "want 16 characters of A-Z 0-9"
	tests := []struct {
		name   string
		format Format
		ids    IDs
		in     string
		want   []string
	}{
		{
			name: "csv, two targets on a row",
			in: "charge,capture,psp_reference,amount\n" +
				"ch_1,,8815658961765250,5\n" +
				",CAP2,8815658961765251,\n" +
				",,8815658961765252,\n",
			want: []string{
				"in:2: names more than one of charge, payment_intent, capture and psp_reference: give one",
				"in:3: names more than one of charge, payment_intent, capture and psp_reference: give one",
			},
		},
		{
			name: "csv, bad psp_references name the psp_reference, not the item id made of them",
			in: "psp_reference,amount\n" +
				"881565896176525,1\n" +
				"88156589617652500,1\n" +
				"qfqtpcq8hxskgk82,1\n" +
				"8815-58961765250,1\n" +
				"P" + strings.Repeat("X", 128) + ",1\n" +
				",5\n",
			want: []string{
				`in:2: psp_reference: "881565896176525": ` + rule,
				`in:3: psp_reference: "88156589617652500": ` + rule,
				`in:4: psp_reference: "qfqtpcq8hxskgk82": ` + rule,
				`in:5: psp_reference: "8815-58961765250": ` + rule,
				`in:6: psp_reference: "P` + strings.Repeat("X", 63) + `...": ` + rule,
				"in:7: needs a charge (ch_/py_), a payment_intent (pi_), a capture or a psp_reference",
			},
		},
		{
			name: "csv, psp_references listed twice",
			in: "psp_reference,item,amount\n" +
				"8815658961765250,,100\n" +
				"8815658961765250,,100\n" +
				"QFQTPCQ8HXSKGK82,a,\n" +
				"QFQTPCQ8HXSKGK82,b,5\n",
			want: []string{
				"in:3: psp_reference 8815658961765250 already listed at line 2",
				"in:5: psp_reference QFQTPCQ8HXSKGK82 already listed at line 4: refunding a psp_reference in parts needs an amount on every row",
			},
		},
		{
			name: "one id named as two kinds of payment",
			in: "capture,psp_reference,item,amount\n" +
				"8815658961765250,,a,5\n" +
				",8815658961765250,b,5\n",
			want: []string{"in:3: psp_reference 8815658961765250 already listed at line 2, as a capture"},
		},
		{
			name: "jsonl",
			in: `{"psp_reference":"8815658961765250","capture":"CAP1"}` + "\n" +
				`{"psp_reference":null}` + "\n" +
				`{"psp_reference":5}` + "\n" +
				`{"psp_reference":"a b"}` + "\n" +
				`{"psp_reference":"QFQTPCQ8HXSKGK82"}` + "\n" +
				`{"psp_reference":"QFQTPCQ8HXSKGK82"}` + "\n" +
				`{"pspReference":"QFQTPCQ8HXSKGK82"}` + "\n",
			want: []string{
				"in:1: names more than one of charge, payment_intent, capture and psp_reference: give one",
				"in:2: psp_reference: null: want a charge (ch_/py_), a payment_intent (pi_), a capture or a psp_reference",
				"in:3: psp_reference: 5: want a string",
				`in:4: psp_reference: "a b": ` + rule,
				"in:6: psp_reference QFQTPCQ8HXSKGK82 already listed at line 5",
				"in:7: pspReference: unknown field: known are batch, item, charge, payment_intent, capture, psp_reference, amount, currency, reason, metadata, plan_items (--keep-columns keeps others as metadata)",
			},
		},
		{
			name: "bare pspReferences without --ids psp_reference: no guess",
			in:   "8815658961765250\nQFQTPCQ8HXSKGK82\n",
			want: []string{"in:1: no header row: 8815658961765250 looks like an Adyen pspReference; want a first row naming the columns, such as psp_reference,amount, or --ids psp_reference for psp_reference ids one a line"},
		},
		{
			name: "with --ids capture, a pspReference heading a csv is named",
			ids:  IDsCapture,
			in:   "8815658961765250,1\n",
			want: []string{"in:1: no header row: 8815658961765250 looks like an Adyen pspReference; want a first row naming the columns, such as psp_reference,amount, or --ids psp_reference for psp_reference ids one a line"},
		},
		{
			name: "a pspReference among stripe ids",
			in:   "ch_1\n8815658961765250\n",
			want: []string{"in:2: 8815658961765250: want one charge (ch_, py_) or payment intent (pi_) id a line; for psp_reference ids, give --ids psp_reference"},
		},
		{
			name:   "ids as psp_references",
			format: FormatIDs,
			ids:    IDsPSPReference,
			in:     "8815658961765250\n8815658961765250\n2GG279541U471931P\npsp_reference\nch_1\n",
			want: []string{
				"in:2: psp_reference 8815658961765250 already listed at line 1",
				"in:3: 2GG279541U471931P: want one psp_reference a line (16 of A-Z 0-9)",
				"in:4: psp_reference: want one psp_reference a line (16 of A-Z 0-9)",
				"in:5: ch_1: want one psp_reference a line (16 of A-Z 0-9)",
			},
		},
		{
			name: "ids as psp_references, detected: what is not one id is a csv header",
			ids:  IDsPSPReference,
			in:   "8815658961765250,100\n",
			want: []string{"in:1: no header row: 8815658961765250 looks like an Adyen pspReference; want a first row naming the columns, such as psp_reference,amount"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkProblems(t, tt.in, Options{Batch: "b1", Format: tt.format, IDs: tt.ids}, tt.want)
		})
	}
}

// TestShardPSPReferences: the items of one payment share a shard, and a
// plan read back shards as the plan itself did.
func TestShardPSPReferences(t *testing.T) {
	var in strings.Builder
	in.WriteString("psp_reference,item,amount\n")
	for i := range 200 {
		id := "88156589617" + string(rune('A'+i%26)) + string(rune('A'+i/26)) + "250"
		in.WriteString(id + "," + id + "-a,1\n" + id + "," + id + "-b,2\n")
	}
	p, err := Read(strings.NewReader(in.String()), "in", Options{Batch: "b1"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	shardOf := make(map[string]int)
	total := 0
	for k := 1; k <= n; k++ {
		s := p.Shard(k, n)
		items := s.Items()
		for i := range items {
			it := &items[i]
			if it.PSPReference == "" || it.Charge != "" || it.Capture != "" {
				t.Fatalf("shard %d/%d: %+v is no longer a psp_reference", k, n, it)
			}
			if prev, ok := shardOf[it.PSPReference]; ok && prev != k {
				t.Errorf("psp_reference %s in shards %d and %d", it.PSPReference, prev, k)
			}
			shardOf[it.PSPReference] = k
			if !InShard(it.Batch, it.PSPReference, k, n) {
				t.Errorf("%s in shard %d, InShard says no", it.Item, k)
			}
		}
		if got := Shard(p.Items(), k, n); encode(t, got) != encode(t, items) {
			t.Errorf("shard %d/%d: Shard of the items differs from Plan.Shard", k, n)
		}
		total += s.Len()
	}
	if total != p.Len() || len(shardOf) != 200 {
		t.Errorf("%d shards hold %d items of %d payments; the plan has %d of 200", n, total, len(shardOf), p.Len())
	}
}

// A psp_reference is no charge: beside payment intents it makes no plan
// that names one payment two ways.
func TestPSPReferencesAreNoMixedPayments(t *testing.T) {
	p, err := Read(strings.NewReader("payment_intent,psp_reference\npi_1,\n,8815658961765250\n"), "in", Options{Batch: "b1"})
	if err != nil {
		t.Fatal(err)
	}
	if c, i, mixed := p.MixedPayments(); mixed {
		t.Errorf("MixedPayments = %d, %d, true: want no charge line", c, i)
	}
}
