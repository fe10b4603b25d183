package refund

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func normalise(it Item) Item {
	if len(it.Metadata) == 0 {
		it.Metadata = nil
	}
	return it
}

func TestParseItem(t *testing.T) {
	tests := []struct {
		line    string
		want    Item
		wantErr string
	}{
		{line: `{"batch":"b1","item":"i1","charge":"ch_1","amount":500,"reason":"duplicate"}`,
			want: Item{Batch: "b1", Item: "i1", Charge: "ch_1", Amount: 500, Reason: "duplicate"}},
		{line: `{"batch":"b1","item":"i1","payment_intent":"pi_9"}`,
			want: Item{Batch: "b1", Item: "i1", PaymentIntent: "pi_9"}},
		{line: `{"batch":"b1","item":"i1","psp_reference":"8815658961765250","amount":500,"currency":"eur"}`,
			want: Item{Batch: "b1", Item: "i1", PSPReference: "8815658961765250", Amount: 500, Currency: "eur"}},
		{line: `{"batch":"b1","item":"QFQTPCQ8HXSKGK82","psp_reference":"QFQTPCQ8HXSKGK82"}`,
			want: Item{Batch: "b1", Item: "QFQTPCQ8HXSKGK82", PSPReference: "QFQTPCQ8HXSKGK82"}},
		{line: `{"batch":"b1","item":"i1","psp_reference":"qfqtpcq8hxskgk82"}`, wantErr: `psp_reference: "qfqtpcq8hxskgk82": want 16 characters of A-Z 0-9`},
		{line: `{"batch":"b1","item":"i1","psp_reference":"881565896176525"}`, wantErr: `psp_reference: "881565896176525": want 16 characters`},
		{line: `{"batch":"b1","item":"i1","psp_reference":"88156589617652500"}`, wantErr: `psp_reference: "88156589617652500": want 16 characters`},
		{line: `{"batch":"b1","item":"i1","psp_reference":"8815-58961765250"}`, wantErr: `psp_reference: "8815-58961765250": want 16 characters`},
		{line: `{"batch":"b1","item":"i1","psp_reference":null}`, wantErr: `psp_reference: null: want a charge (ch_/py_), a payment_intent (pi_), a capture or a psp_reference`},
		{line: `{"batch":"b1","item":"i1","psp_reference":5}`, wantErr: `psp_reference: 5: want a string`},
		{line: `{"batch":"b1","item":"i1","capture":"2GG279541U471931P","psp_reference":"8815658961765250"}`, wantErr: "names more than one of charge, payment_intent, capture and psp_reference"},
		{line: `{"batch":"b1","item":"i1","charge":"py_9","amount":null}`,
			want: Item{Batch: "b1", Item: "i1", Charge: "py_9"}},
		{line: `{"batch":"b1","item":"i1","charge":"ch_1","reason":null}`,
			want: Item{Batch: "b1", Item: "i1", Charge: "ch_1"}},
		{line: `{"batch":null,"item":"i1","charge":"ch_1"}`, wantErr: "batch: null: want"},
		{line: ` { "batch" : "b1" , "item":"i\u0031", "charge":"ch_1", "metadata":{"note":"caf\u00e9 \"x\""}} `,
			want: Item{Batch: "b1", Item: "i1", Charge: "ch_1", Metadata: map[string]string{"note": "café \"x\""}}},
		{line: `{"batch":"b1","item":"i1","charge":"ch_1","metadata":{"ticket":"T-1"}}`,
			want: Item{Batch: "b1", Item: "i1", Charge: "ch_1", Metadata: map[string]string{"ticket": "T-1"}}},
		{line: `{"batch":"b1","item":"i1","charge":"ch_1","amount":0}`, wantErr: "amount: 0: want"},
		{line: `{"batch":"b1","item":"i1","charge":"ch_1","amount":-5}`, wantErr: "amount: -5: want"},
		{line: `{"batch":"b1","item":"i1","charge":"ch_1","amount":1.5}`, wantErr: "amount: 1.5: want"},
		{line: `{"batch":"b1","item":"i1","charge":"ch_1","amount":"5"}`, wantErr: `amount: "5": want a JSON number`},
		{line: `{"batch":"b1","item":"i1","charge":"ch_1","amount":1e3}`, wantErr: "amount: 1e3: want"},
		{line: `{"batch":"b1","item":"i1","charge":"ch_1","amount":99999999999999999999}`, wantErr: "amount: 99999999999999999999: too large"},
		{line: `{"batch":"b1","item":"i1","charge":"ch_1","amonut":5}`, wantErr: "amonut: unknown field"},
		{line: `{"batch":"b1","item":"i1","charge":"ch_1"} {}`, wantErr: "more than one JSON value"},
		{line: `{"batch":"b1","item":"i1","charge":"re_1"}`, wantErr: "want an id starting ch_ or py_"},
		{line: `{"batch":"b1","item":"i1","payment_intent":"ch_1"}`, wantErr: "want an id starting pi_"},
		{line: `{"batch":"b1","item":"i1","charge":"ch_1","payment_intent":"pi_1"}`, wantErr: "names more than one"},
		{line: `{"batch":"b1","item":"i1"}`, wantErr: "needs a charge"},
		{line: `{"batch":"b 1","item":"i1","charge":"ch_1"}`, wantErr: `batch: "b 1": want`},
		{line: `{"batch":"b1","item":"","charge":"ch_1"}`, wantErr: `item: "": want`},
		{line: `{"batch":"b1","item":"i1","charge":"ch_1","reason":"because"}`, wantErr: `reason: "because": want`},
		{line: `{"batch":"b1","item":"i1","charge":"ch_1","currency":"USD"}`, wantErr: `currency: "USD": want`},
		{line: `{"batch":"b1","item":"i1","charge":"ch_1","metadata":{"refundkit_item":"x"}}`, wantErr: "reserved"},
		{line: `{"batch":"b1","item":"i1","charge":"ch_1","AMOUNT":5}`, wantErr: "AMOUNT: unknown field: did you mean amount?"},
		{line: `{"batch":"b1","item":"i1","charge":"ch_1","amount":5,"amount":500}`, wantErr: "amount: given twice"},
		{line: `{"batch":"b1","item":"i1","charge":"ch_1","amount":05}`, wantErr: "amount: 05: want"},
		{line: `{"batch":"b1","item":"i1","charge":"ch_1","metadata":{"a":"1","a":"2"}}`, wantErr: "given twice"},
		{line: `{"batch":"b1","item":"i1","charge":"ch_1","metadata":{"a":1}}`, wantErr: "metadata.a: 1: want a string"},
		{line: "{\"batch\":\"b1\",\"item\":\"i1\",\"charge\":\"ch_1\",\"metadata\":{\"a\":\"\xff\"}}", wantErr: "UTF-8"},
		{line: `{"batch":"b1","item":"i1","charge":"ch_1"`, wantErr: "the line ends inside the object"},
		{line: `not json`, wantErr: "want a JSON object"},
		{line: `["batch"]`, wantErr: "want a JSON object"},
	}
	for _, tt := range tests {
		got, err := ParseItem([]byte(tt.line))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseItem(%s) error = %v, want one containing %q", tt.line, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseItem(%s): %v", tt.line, err)
			continue
		}
		if got.Batch != tt.want.Batch || got.Item != tt.want.Item || got.Charge != tt.want.Charge ||
			got.PaymentIntent != tt.want.PaymentIntent || got.Capture != tt.want.Capture || got.PSPReference != tt.want.PSPReference || got.Amount != tt.want.Amount || got.Reason != tt.want.Reason ||
			len(got.Metadata) != len(tt.want.Metadata) {
			t.Errorf("ParseItem(%s) = %+v, want %+v", tt.line, got, tt.want)
		}
		for k, v := range tt.want.Metadata {
			if got.Metadata[k] != v {
				t.Errorf("ParseItem(%s) metadata %q = %q, want %q", tt.line, k, got.Metadata[k], v)
			}
		}
	}
}

func TestIdempotencyKeyIsStableAndDistinct(t *testing.T) {
	if a, b := IdempotencyKey("b", "i", 1), IdempotencyKey("b", "i", 1); a != b {
		t.Fatalf("same attempt gave two keys: %q, %q", a, b)
	}
	keys := map[string]bool{}
	for _, k := range []string{
		IdempotencyKey("b", "i", 1), IdempotencyKey("b", "i", 2),
		IdempotencyKey("b", "i2", 1), IdempotencyKey("b2", "i", 1),
		// ':' may appear in item ids but not in batch ids, so the split is unambiguous.
		IdempotencyKey("b", "x:1", 1), IdempotencyKey("b", "x", 11),
	} {
		if keys[k] {
			t.Fatalf("key %q given to two attempts", k)
		}
		keys[k] = true
		if len(k) > 255 {
			t.Fatalf("key %q longer than Stripe's 255", k)
		}
	}
	long := IdempotencyKey(strings.Repeat("b", 64), strings.Repeat("i", 128), 999)
	if len(long) > 255 {
		t.Fatalf("longest key is %d bytes, Stripe allows 255", len(long))
	}
}

// FuzzParseItem: whatever the bytes, ParseItem never panics, and what it
// accepts is a valid item.
func FuzzParseItem(f *testing.F) {
	for _, s := range []string{
		`{"batch":"b1","item":"i1","charge":"ch_1","amount":500}`,
		`{"batch":"b1","item":"i1","payment_intent":"pi_1","metadata":{"a":"b"}}`,
		`{"batch":"b1","item":"i1","charge":"ch_1","amount":-1}`,
		`{"batch":"b1"`, `null`, `{}`, "\xff\xfe",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		it, err := ParseItem(line)
		if err != nil {
			return
		}
		if verr := it.Validate(); verr != nil {
			t.Fatalf("ParseItem accepted an invalid item %+v: %v", it, verr)
		}
		if it.Amount < 0 {
			t.Fatalf("negative amount accepted: %d", it.Amount)
		}
		// Whatever the strict decoder accepts, encoding/json reads the same.
		var std Item
		if err := json.Unmarshal(line, &std); err != nil {
			t.Fatalf("ParseItem accepted %q, encoding/json refuses it: %v", line, err)
		}
		if !reflect.DeepEqual(normalise(std), normalise(it)) {
			t.Fatalf("ParseItem(%q) = %+v, encoding/json reads %+v", line, it, std)
		}
	})
}
