package paypalsim

import (
	"strings"
	"testing"

	"github.com/refundkit/refundkit/refund/sim"
)

func TestReadCaptures(t *testing.T) {
	good := "{\"id\":\"CAP1\",\"amount\":100}\n\n{\"id\":\"CAPJPY\",\"currency\":\"JPY\",\"amount\":500,\"refunds\":[{\"amount\":200,\"status\":\"PENDING\",\"custom_id\":\"refundkit,b,i,1\"}]}\n"
	cs, err := ReadCaptures(strings.NewReader(good), "c.jsonl")
	if err != nil || len(cs) != 2 || cs[1].Refunds[0].Status != StatusPending {
		t.Fatalf("%+v, %v", cs, err)
	}
	for _, tt := range []struct{ in, err string }{
		{`{"id":"CAP1","amount":0}`, "c.jsonl:1: amount 0: want a positive whole number of minor units"},
		{`{"id":"CAP-1","amount":1}`, `c.jsonl:1: capture id "CAP-1": want 1-64 letters and digits`},
		{`{"id":"CAP1","amount":1,"charge":"x"}`, `c.jsonl:1: not a capture: unknown field "charge"`},
		{`{"id":"CAP1","amount":1} {}`, "c.jsonl:1: not a capture: more than one JSON value on the line"},
		{"{\"id\":\"CAP1\",\"amount\":1}\n{\"id\":\"CAP1\",\"amount\":2}", "c.jsonl:2: capture CAP1: already given on line 1"},
		{`{"id":"CAP1","amount":100,"refunds":[{"amount":60},{"amount":50,"status":"PENDING"}]}`, "c.jsonl:1: refunds total 110: more than the capture amount 100"},
		{`{"id":"CAP1","amount":100,"refunds":[{"amount":60,"status":"DONE"}]}`, `c.jsonl:1: refunds[0]: status "DONE"`},
		{`{"id":"CAP1","amount":100,"refunds":[{"amount":60,"custom_id":"a:b"}]}`, `c.jsonl:1: refunds[0]: custom_id "a:b"`},
	} {
		if _, err := ReadCaptures(strings.NewReader(tt.in), "c.jsonl"); err == nil || !strings.HasPrefix(err.Error(), tt.err) {
			t.Errorf("%s: %v, want %q", tt.in, err, tt.err)
		}
	}
	// Seeded refunds count against the capture as their status says.
	h := start(t, sim.Faults{}, Capture{ID: "CAP2", Amount: 1000, Refunds: []SeedRefund{{Amount: 600}, {Amount: 400, Status: StatusFailed}}})
	if c, _ := h.s.Capture("CAP2"); c.Refunded != 600 || c.Status != "PARTIALLY_REFUNDED" || c.Currency != "USD" {
		t.Errorf("seeded: %+v", c)
	}
}
