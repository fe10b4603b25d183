package paypalsim

import (
	"strings"
	"testing"
	"time"

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
		// PayPal holds HUF and TWD in whole units only.
		{`{"id":"CAP1","currency":"HUF","amount":150050}`, "c.jsonl:1: amount: 150050 minor units of HUF: currency does not support decimals"},
		{`{"id":"CAP1","currency":"TWD","amount":1000,"refunds":[{"amount":150}]}`, "c.jsonl:1: refunds[0]: amount: 150 minor units of TWD"},
		{`{"id":"CAP1","amount":1,"order_id":"o1"}`, `c.jsonl:1: order_id "o1": want 1-20 upper-case letters and digits`},
		{"{\"id\":\"CAP1\",\"amount\":1,\"order_id\":\"O1\"}\n{\"id\":\"CAP2\",\"currency\":\"EUR\",\"amount\":1,\"order_id\":\"O1\"}", "c.jsonl:2: CAP2 in EUR, its order O1 is in USD"},
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

// FuzzReadCaptures: whatever a captures file parses to, a simulator takes
// as it is and can show, amounts written as PayPal writes them.
func FuzzReadCaptures(f *testing.F) {
	for _, seed := range []string{
		`{"id":"CAP1","currency":"USD","amount":500}`,
		`{"id":"CAPJPY","currency":"JPY","amount":300,"refunds":[{"amount":100,"status":"PENDING","custom_id":"refundkit,b,i,1"}]}`,
		`{"id":"CAPHUF","currency":"huf","amount":150000,"refunds":[{"amount":100}]}`,
		`{"id":"CAPHUF","currency":"HUF","amount":150050}`,
		"{\"id\":\"CAP1\",\"amount\":5}\n{\"id\":\"CAP1\",\"amount\":5}",
		`{"id":"CAP1","amount":-1}`,
		"{\"id\":\"CAP1\",\"amount\":5,\"order_id\":\"O1\"}\n{\"id\":\"CAP2\",\"currency\":\"usd\",\"amount\":5,\"order_id\":\"O1\"}\n{\"id\":\"CAP3\",\"amount\":5,\"no_order\":true}",
		"",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, input string) {
		cs, err := ReadCaptures(strings.NewReader(input), "fuzz")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz:") {
				t.Errorf("error without the input's name: %v", err)
			}
			return
		}
		now := time.Unix(1e9, 0)
		s, err := New(sim.NewCore(1, sim.Faults{}), Config{Captures: cs}, func() time.Time { return now })
		if err != nil {
			t.Fatalf("read captures the simulator refuses: %v", err)
		}
		for _, c := range cs {
			cp := s.captures.Get(c.ID)
			cp.mu.Lock()
			cp.object("http://sim", now)
			for _, r := range cp.refunds {
				r.object("http://sim", now)
			}
			cp.mu.Unlock()
		}
	})
}
