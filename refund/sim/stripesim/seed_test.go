package stripesim

import (
	"reflect"
	"strings"
	"testing"
)

func TestGenerateCharges(t *testing.T) {
	a := GenerateCharges(50, 3)
	if !reflect.DeepEqual(a, GenerateCharges(50, 3)) {
		t.Error("the same seed gave other charges")
	}
	if reflect.DeepEqual(a, GenerateCharges(50, 4)) {
		t.Error("another seed gave the same charges")
	}
	if a[0].ID != "ch_sim0000001" || a[0].PaymentIntent != "pi_sim0000001" || a[49].ID != "ch_sim0000050" {
		t.Errorf("ids %s %s %s", a[0].ID, a[0].PaymentIntent, a[49].ID)
	}
	for _, c := range a {
		if err := c.Validate(); err != nil || c.Amount < 100 || c.Amount > 100000 {
			t.Errorf("%+v: %v", c, err)
		}
	}
	if err := New(Config{}).AddCharges(a...); err != nil {
		t.Error(err)
	}
}

func TestReadCharges(t *testing.T) {
	good := `{"id":"ch_1","payment_intent":"pi_1","currency":"eur","amount":500}

{"id":"py_2","amount":300,"refunds":[{"amount":100,"status":"requires_action","metadata":{"refundkit_item":"i2"}},{"amount":200,"status":"canceled"}]}
`
	charges, err := ReadCharges(strings.NewReader(good), "c.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	want := []Charge{
		{ID: "ch_1", PaymentIntent: "pi_1", Currency: "eur", Amount: 500},
		{ID: "py_2", Amount: 300, Refunds: []SeedRefund{
			{Amount: 100, Status: "requires_action", Metadata: map[string]string{"refundkit_item": "i2"}},
			{Amount: 200, Status: "canceled"},
		}},
	}
	if !reflect.DeepEqual(charges, want) {
		t.Errorf("got %+v", charges)
	}

	tests := []struct {
		name, input, err string
	}{
		{"not json", "{\"id\":\"ch_1\",\"amount\":5}\nnope\n", "c.jsonl:2: not a charge: invalid character"},
		{"unknown field", `{"id":"ch_1","amount":5,"amt":5}`, `c.jsonl:1: not a charge: unknown field "amt"`},
		{"two values", `{"id":"ch_1","amount":5} {}`, "c.jsonl:1: not a charge: more than one JSON value"},
		{"trailing bracket", `{"id":"ch_1","amount":5}]`, "c.jsonl:1: not a charge: more than one JSON value"},
		{"bad id", `{"id":"re_1","amount":5}`, `c.jsonl:1: charge id "re_1"`},
		{"bad intent", `{"id":"ch_1","payment_intent":"ch_2","amount":5}`, `c.jsonl:1: payment_intent "ch_2"`},
		{"bad currency", `{"id":"ch_1","currency":"USD","amount":5}`, `c.jsonl:1: currency "USD"`},
		{"zero amount", `{"id":"ch_1","amount":0}`, "c.jsonl:1: amount 0"},
		{"fractional amount", `{"id":"ch_1","amount":1.5}`, "c.jsonl:1: not a charge: cannot unmarshal number 1.5"},
		{"bad refund status", `{"id":"ch_1","amount":5,"refunds":[{"amount":1,"status":"done"}]}`, `c.jsonl:1: refunds[0]: status "done"`},
		{"refunds above amount", `{"id":"ch_1","amount":5,"refunds":[{"amount":3},{"amount":3}]}`, "c.jsonl:1: refunds total 6"},
		{"bad refund reason", `{"id":"ch_1","amount":5,"refunds":[{"amount":1,"reason":"oops"}]}`, `c.jsonl:1: refunds[0]: reason "oops"`},
		{"bad metadata key", `{"id":"ch_1","amount":5,"refunds":[{"amount":1,"metadata":{"a[b]":"x"}}]}`, `c.jsonl:1: refunds[0]: metadata key "a[b]"`},
		{"duplicate id", "{\"id\":\"ch_1\",\"amount\":5}\n{\"id\":\"ch_1\",\"amount\":6}", "c.jsonl:2: charge ch_1: already given on line 1"},
		{"duplicate intent", "{\"id\":\"ch_1\",\"payment_intent\":\"pi_1\",\"amount\":5}\n\n{\"id\":\"ch_2\",\"payment_intent\":\"pi_1\",\"amount\":6}", "c.jsonl:3: payment_intent pi_1: already given on line 1"},
		{"line too long", `{"id":"ch_1","amount":5,"x":"` + strings.Repeat("a", maxLine) + `"}`, "c.jsonl:1: line longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadCharges(strings.NewReader(tt.input), "c.jsonl")
			if err == nil || !strings.HasPrefix(err.Error(), tt.err) {
				t.Errorf("got %v, want %q...", err, tt.err)
			}
		})
	}
}

func FuzzReadCharges(f *testing.F) {
	for _, seed := range []string{
		`{"id":"ch_1","payment_intent":"pi_1","currency":"usd","amount":500}`,
		`{"id":"py_2","amount":300,"refunds":[{"amount":100,"status":"pending","metadata":{"k":"v"}}]}`,
		"{\"id\":\"ch_1\",\"amount\":5}\n{\"id\":\"ch_1\",\"amount\":5}",
		`{"id":"ch_1","amount":-1}`,
		"",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, input string) {
		charges, err := ReadCharges(strings.NewReader(input), "fuzz")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz:") {
				t.Errorf("error without the input's name: %v", err)
			}
			return
		}
		// Whatever parses must be accepted by a simulator as it is.
		if err := New(Config{}).AddCharges(charges...); err != nil {
			t.Errorf("read charges the simulator refuses: %v", err)
		}
	})
}
