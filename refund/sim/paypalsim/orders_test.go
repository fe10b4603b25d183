package paypalsim

import (
	"strings"
	"testing"

	"github.com/refundkit/refundkit/refund/sim"
)

// TestOrders: a capture names its order (supplementary_data.related_ids
// and an "up" link); the order lists its captures and every refund of
// them as show-refund does (custom_id, "up" to the capture), made after
// it was seeded too; a capture seeded without an order names none.
func TestOrders(t *testing.T) {
	h := start(t, sim.Faults{},
		Capture{ID: "CAPA", Amount: 1000, OrderID: "ORD1", Refunds: []SeedRefund{{Amount: 100}}},
		Capture{ID: "CAPB", Amount: 500, OrderID: "ORD1"},
		usd("CAPOWN", 700),
		Capture{ID: "CAPNONE", Amount: 300, NoOrder: true, Refunds: []SeedRefund{{Amount: 100, CustomID: "refundkit,b,i,1"}}})
	if a := h.refund("CAPB", "rid-b", `{"custom_id":"refundkit,b,i2,1"}`); a.status != 201 {
		t.Fatalf("refund: %d %s", a.status, a.body)
	}
	for capture, order := range map[string]string{"CAPA": "ORD1", "CAPB": "ORD1", "CAPOWN": "ORDSIM00000000001", "CAPNONE": ""} {
		a := h.get("/v2/payments/captures/" + capture)
		if got := a.str("supplementary_data.related_ids.order_id"); got != order {
			t.Errorf("%s names order %q, want %q", capture, got, order)
		}
		if up := strings.Contains(a.body, `/v2/checkout/orders/`+order+`","rel":"up"`); up != (order != "") {
			t.Errorf("%s: up link to its order %v: %s", capture, up, a.body)
		}
		if st, _ := h.s.Capture(capture); st.OrderID != order {
			t.Errorf("%s: state %+v", capture, st)
		}
	}
	a := h.get("/v2/checkout/orders/ORD1")
	if a.status != 200 || a.str("id") != "ORD1" || a.str("status") != "COMPLETED" {
		t.Fatalf("order: %d %s", a.status, a.body)
	}
	pu := a.decoded["purchase_units"].([]any)[0].(map[string]any)
	pay := pu["payments"].(map[string]any)
	if caps := pay["captures"].([]any); len(caps) != 2 || caps[0].(map[string]any)["id"] != "CAPA" || caps[1].(map[string]any)["id"] != "CAPB" {
		t.Errorf("captures %v", caps)
	}
	refunds := pay["refunds"].([]any)
	want := []struct{ capture, custom, value string }{{"CAPA", "", "1.00"}, {"CAPB", "refundkit,b,i2,1", "5.00"}}
	if len(refunds) != len(want) {
		t.Fatalf("refunds %v, want %d", refunds, len(want))
	}
	for i, w := range want {
		r := answer{decoded: refunds[i].(map[string]any)}
		links, _ := r.decoded["links"].([]any)
		up := ""
		for _, l := range links {
			if m := l.(map[string]any); m["rel"] == "up" {
				up, _ = m["href"].(string)
			}
		}
		if r.str("custom_id") != w.custom || r.str("amount.value") != w.value || r.str("status") != StatusCompleted ||
			!strings.HasSuffix(up, "/v2/payments/captures/"+w.capture) {
			t.Errorf("refund %d: %v, want %+v", i, r.decoded, w)
		}
	}
	if a := h.get("/v2/checkout/orders/ORDSIM00000000001"); a.status != 200 || a.str("purchase_units.0.amount.value") != "7.00" {
		t.Errorf("CAPOWN's order: %d %s", a.status, a.body)
	}
	if a := h.get("/v2/checkout/orders/NOSUCH"); a.status != 404 || a.issue() != "INVALID_RESOURCE_ID" {
		t.Errorf("unknown order: %d %s", a.status, a.body)
	}
	if a := h.raw("GET", "/v2/checkout/orders/ORD1", "", "-", ""); a.status != 401 {
		t.Errorf("no token: %d %s", a.status, a.body)
	}
	// A new capture joins its named order; a generated id skips one taken.
	if err := h.s.AddCaptures(Capture{ID: "CAPC", Amount: 100, OrderID: "ORDSIM00000000002"}, usd("CAPD", 100)); err != nil {
		t.Fatal(err)
	}
	if st, _ := h.s.Capture("CAPD"); st.OrderID != "ORDSIM00000000003" {
		t.Errorf("CAPD: %+v, want the next free order id", st)
	}
}

func TestOrderSeedsRefused(t *testing.T) {
	for _, tt := range []struct {
		cs  []Capture
		err string
	}{
		{[]Capture{{ID: "C1", Amount: 1, OrderID: "ord1"}}, `order_id "ord1": want 1-20 upper-case letters and digits`},
		{[]Capture{{ID: "C1", Amount: 1, OrderID: "O1", NoOrder: true}}, `order_id "O1" and no_order`},
		{[]Capture{{ID: "C1", Amount: 1, OrderID: "O1"}, {ID: "C2", Currency: "EUR", Amount: 1, OrderID: "O1"}}, "C2 in EUR, its order O1 is in USD"},
	} {
		_, err := New(sim.NewCore(1, sim.Faults{}), Config{Captures: tt.cs}, (&fakeClock{}).now)
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%+v: %v, want %q", tt.cs, err, tt.err)
		}
	}
}
