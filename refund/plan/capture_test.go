package plan

import (
	"strings"
	"testing"
)

// Captures (PayPal's, or another API's payment ids) are planned wherever
// charges are: CSV, JSON lines, and bare ids when IDsCapture says so.

func TestReadCaptures(t *testing.T) {
	tests := []struct {
		name   string
		format Format
		ids    IDs
		in     string
		want   string
	}{
		{
			name: "csv, every column beside capture",
			in: "Capture,amount,currency,reason,item,batch,metadata.order\r\n" +
				"2GG279541U471931P,1000,JPY,requested_by_customer,,b1,A-1\r\n" +
				" 8MC585209K746392H ,,,,refund-2,,\r\n" +
				"order:2024-17.x,5,kwd,,,,\r\n", // an exec API's payment id
			want: lines(
				`{"batch":"b1","item":"2GG279541U471931P","capture":"2GG279541U471931P","amount":1000,"currency":"jpy","reason":"requested_by_customer","metadata":{"order":"A-1"}}`,
				`{"batch":"b1","item":"refund-2","capture":"8MC585209K746392H"}`,
				`{"batch":"b1","item":"order:2024-17.x","capture":"order:2024-17.x","amount":5,"currency":"kwd"}`,
			),
		},
		{
			name: "csv, a capture refunded in parts",
			in: "capture,item,amount\n" +
				"2GG279541U471931P,2GG279541U471931P,100\n" +
				"2GG279541U471931P,part-2,200\n" +
				"8MC585209K746392H,,\n",
			want: lines(
				`{"batch":"b1","item":"2GG279541U471931P","capture":"2GG279541U471931P","amount":100}`,
				`{"batch":"b1","item":"part-2","capture":"2GG279541U471931P","amount":200}`,
				`{"batch":"b1","item":"8MC585209K746392H","capture":"8MC585209K746392H"}`,
			),
		},
		{
			name: "csv, one target a row among three columns",
			in: "charge,payment_intent,capture\n" +
				"ch_1,,\n" +
				",pi_2,\n" +
				",,CAP3\n",
			want: lines(
				`{"batch":"b1","item":"ch_1","charge":"ch_1"}`,
				`{"batch":"b1","item":"pi_2","payment_intent":"pi_2"}`,
				`{"batch":"b1","item":"CAP3","capture":"CAP3"}`,
			),
		},
		{
			name: "jsonl",
			in: `{"capture":"2GG279541U471931P","amount":1000,"currency":"JPY"}` + "\n" +
				`{"item":"refund-2","capture":"8MC585209K746392H","charge":null}` + "\n" +
				`{"batch":"b1","item":"CAP3","capture":"CAP3"}` + "\n", // a plan line reads back as itself
			want: lines(
				`{"batch":"b1","item":"2GG279541U471931P","capture":"2GG279541U471931P","amount":1000,"currency":"jpy"}`,
				`{"batch":"b1","item":"refund-2","capture":"8MC585209K746392H"}`,
				`{"batch":"b1","item":"CAP3","capture":"CAP3"}`,
			),
		},
		{
			name: "ids as captures, detected",
			ids:  IDsCapture,
			in:   "\n 2GG279541U471931P \r\n8MC585209K746392H\r\n\r\nch_1\norder:7\n",
			want: lines(
				`{"batch":"b1","item":"2GG279541U471931P","capture":"2GG279541U471931P"}`,
				`{"batch":"b1","item":"8MC585209K746392H","capture":"8MC585209K746392H"}`,
				`{"batch":"b1","item":"ch_1","capture":"ch_1"}`, // every id, as asked
				`{"batch":"b1","item":"order:7","capture":"order:7"}`,
			),
		},
		{
			name:   "ids as captures, named: a column's name is an id too",
			format: FormatIDs,
			ids:    IDsCapture,
			in:     "capture\n",
			want:   lines(`{"batch":"b1","item":"capture","capture":"capture"}`),
		},
		{
			name: "ids as captures: a csv header is still csv",
			ids:  IDsCapture,
			in:   "\nCapture\n2GG279541U471931P\n",
			want: lines(`{"batch":"b1","item":"2GG279541U471931P","capture":"2GG279541U471931P"}`),
		},
		{
			name: "ids as captures: a header with a metadata column is csv",
			ids:  IDsCapture,
			in:   "capture,metadata.k\nCAP1,v\n",
			want: lines(`{"batch":"b1","item":"CAP1","capture":"CAP1","metadata":{"k":"v"}}`),
		},
		{
			name: "ids as captures: json lines are json lines",
			ids:  IDsCapture,
			in:   `{"charge":"ch_1"}` + "\n",
			want: lines(`{"batch":"b1","item":"ch_1","charge":"ch_1"}`),
		},
		{
			name: "stripe ids by default",
			ids:  IDsStripe,
			in:   "ch_1\npi_2\n",
			want: lines(
				`{"batch":"b1","item":"ch_1","charge":"ch_1"}`,
				`{"batch":"b1","item":"pi_2","payment_intent":"pi_2"}`,
			),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkValid(t, tt.in, Options{Batch: "b1", Format: tt.format, IDs: tt.ids}, tt.want)
		})
	}
}

func TestReadCaptureProblems(t *testing.T) {
	const rule = "want 1-128 characters of A-Z a-z 0-9 _ . : - starting with a letter or digit"
	tests := []struct {
		name   string
		format Format
		ids    IDs
		in     string
		want   []string
	}{
		{
			name: "csv, two targets on a row",
			in: "charge,payment_intent,capture,amount\n" +
				"ch_1,,CAP1,5\n" +
				",pi_2,CAP2,\n" +
				"ch_3,pi_3,CAP3,\n" +
				",,CAP4,\n",
			want: []string{
				"in:2: names more than one of charge, payment_intent, capture and psp_reference: give one",
				"in:3: names more than one of charge, payment_intent, capture and psp_reference: give one",
				"in:4: names more than one of charge, payment_intent, capture and psp_reference: give one",
			},
		},
		{
			name: "csv, bad capture ids name the capture, not the item id made of them",
			in: "capture,amount\n" +
				"2GG 279,1\n" +
				"-ABC,1\n" +
				"C" + strings.Repeat("x", 128) + ",1\n" +
				"caf\xe9,1\n" +
				",5\n",
			want: []string{
				`in:2: capture: "2GG 279": ` + rule,
				`in:3: capture: "-ABC": ` + rule,
				`in:4: capture: "C` + strings.Repeat("x", 63) + `...": ` + rule,
				`in:5: capture: "caf\xe9": ` + rule,
				"in:6: needs a charge (ch_/py_), a payment_intent (pi_), a capture or a psp_reference",
			},
		},
		{
			name: "csv, captures listed twice",
			in: "capture,item,amount\n" +
				"CAP1,,100\n" +
				"CAP1,,100\n" +
				"CAP2,a,\n" +
				"CAP2,b,5\n" +
				"CAP3,c,1\n" +
				"CAP4,CAP3,\n" +
				"CAP5,,\n" +
				"CAP6,CAP5,\n",
			want: []string{
				"in:3: capture CAP1 already listed at line 2",
				"in:5: capture CAP2 already listed at line 4: refunding a capture in parts needs an amount on every row",
				"in:9: item CAP5 already listed at line 8",
			},
		},
		{
			name: "one id named as two kinds of payment",
			in: "charge,capture,item,amount\n" +
				"ch_1,,a,5\n" +
				",ch_1,b,5\n" +
				",pi_2,c,5\n" +
				"pi_2,,d,5\n",
			want: []string{
				"in:3: capture ch_1 already listed at line 2, as a charge",
				`in:5: charge: "pi_2": want an id starting ch_ or py_`,
			},
		},
		{
			name: "jsonl",
			in: `{"capture":"CAP1","charge":"ch_1"}` + "\n" +
				`{"capture":"CAP2","payment_intent":"pi_2"}` + "\n" +
				`{"capture":null}` + "\n" +
				`{"capture":5}` + "\n" +
				`{"capture":"a b"}` + "\n" +
				`{"capture":"CAP6"}` + "\n" +
				`{"capture":"CAP6"}` + "\n" +
				`{"Capture":"CAP8"}` + "\n",
			want: []string{
				"in:1: names more than one of charge, payment_intent, capture and psp_reference: give one",
				"in:2: names more than one of charge, payment_intent, capture and psp_reference: give one",
				"in:3: capture: null: want a charge (ch_/py_), a payment_intent (pi_), a capture or a psp_reference",
				"in:4: capture: 5: want a string",
				`in:5: capture: "a b": ` + rule,
				"in:7: capture CAP6 already listed at line 6",
				"in:8: Capture: unknown field: did you mean capture?",
			},
		},
		{
			name: "bare PayPal ids without --ids capture: no guess",
			in:   "2GG279541U471931P\n8MC585209K746392H\n",
			want: []string{"in:1: no header row: 2GG279541U471931P looks like a PayPal id; want a first row naming the columns, such as capture,amount, or --ids capture for capture ids one a line"},
		},
		{
			name: "a PayPal id among stripe ids",
			in:   "ch_1\n2GG279541U471931P\nch_\nch_2,100\n",
			want: []string{
				"in:2: 2GG279541U471931P: want one charge (ch_, py_) or payment intent (pi_) id a line; for capture ids, give --ids capture",
				"in:3: ch_: want one charge (ch_, py_) or payment intent (pi_) id a line",
				"in:4: ch_2,100: want one charge (ch_, py_) or payment intent (pi_) id a line",
			},
		},
		{
			name:   "ids as captures",
			format: FormatIDs,
			ids:    IDsCapture,
			in:     "CAP1\nCAP1\n2GG 1\ncapture,amount\n-x\n",
			want: []string{
				"in:2: capture CAP1 already listed at line 1",
				`in:3: "2GG 1": want one capture id a line (1-128 of A-Z a-z 0-9 _ . : - starting with a letter or digit)`,
				"in:4: capture,amount: want one capture id a line (1-128 of A-Z a-z 0-9 _ . : - starting with a letter or digit)",
				"in:5: -x: want one capture id a line (1-128 of A-Z a-z 0-9 _ . : - starting with a letter or digit)",
			},
		},
		{
			name: "ids as captures, detected: what is not one id is a csv header",
			ids:  IDsCapture,
			in:   "2GG279541U471931P,100\n",
			want: []string{"in:1: no header row: 2GG279541U471931P looks like a PayPal id; want a first row naming the columns, such as capture,amount"},
		},
		{
			name: "ids as captures, detected: a metadata column alone is a header",
			ids:  IDsCapture,
			in:   "metadata.k\nv\n",
			want: []string{"in:1: no charge, payment_intent, capture or psp_reference column (known: charge, payment_intent, capture, psp_reference, amount, currency, reason, item, batch, metadata.<key>)"},
		},
		{
			name: "ids as captures, detected: a spreadsheet's own header",
			ids:  IDsCapture,
			in:   "Transaction ID,Gross\n2GG279541U471931P,1.00\n",
			want: []string{
				`in:1: unknown columns "Transaction ID", Gross (known: charge, payment_intent, capture, psp_reference, amount, currency, reason, item, batch, metadata.<key>; --keep-columns keeps others as metadata)`,
				"in:1: no charge, payment_intent, capture or psp_reference column (known: charge, payment_intent, capture, psp_reference, amount, currency, reason, item, batch, metadata.<key>)",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkProblems(t, tt.in, Options{Batch: "b1", Format: tt.format, IDs: tt.ids}, tt.want)
		})
	}
}

// TestShardCaptures: the items of one capture share a shard, as those of
// one charge do, and a plan read back shards as the plan itself did.
func TestShardCaptures(t *testing.T) {
	var in strings.Builder
	in.WriteString("capture,item,amount\n")
	for i := range 200 {
		id := "CAP" + strings.Repeat("0", 3) + string(rune('A'+i%26)) + string(rune('A'+i/26))
		in.WriteString(id + "," + id + "-a,1\n" + id + "," + id + "-b,2\n")
	}
	p, err := Read(strings.NewReader(in.String()), "in", Options{Batch: "b1"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	shardOfCapture := make(map[string]int)
	total := 0
	for k := 1; k <= n; k++ {
		s := p.Shard(k, n)
		items := s.Items()
		for i := range items {
			it := &items[i]
			if it.Capture == "" || it.Charge != "" {
				t.Fatalf("shard %d/%d: %+v is no longer a capture", k, n, it)
			}
			if prev, ok := shardOfCapture[it.Capture]; ok && prev != k {
				t.Errorf("capture %s in shards %d and %d", it.Capture, prev, k)
			}
			shardOfCapture[it.Capture] = k
			if !InShard(it.Batch, it.Capture, k, n) {
				t.Errorf("%s in shard %d, InShard says no", it.Item, k)
			}
		}
		if got := Shard(p.Items(), k, n); encode(t, got) != encode(t, items) {
			t.Errorf("shard %d/%d: Shard of the items differs from Plan.Shard", k, n)
		}
		total += s.Len()
	}
	if total != p.Len() || len(shardOfCapture) != 200 {
		t.Errorf("%d shards hold %d items of %d captures; the plan has %d of 200", n, total, len(shardOfCapture), p.Len())
	}
}
