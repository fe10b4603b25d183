package paypal

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/refundkit/refundkit/refund"
)

// captureAnswer is a capture as Payments v2 shows it; order "" names none.
func captureAnswer(id, status, value, order string) string {
	c := map[string]any{"id": id, "status": status, "amount": map[string]string{"value": value, "currency_code": "USD"}}
	if order != "" {
		c["supplementary_data"] = map[string]any{"related_ids": map[string]string{"order_id": order}}
	}
	b, _ := json.Marshal(c)
	return string(b)
}

// orderAnswer is an order of one purchase unit with captures and refunds
// (refundJSON answers).
func orderAnswer(id string, captures []string, refunds ...string) string {
	var cs []string
	for _, c := range captures {
		cs = append(cs, `{"id":"`+c+`","status":"COMPLETED"}`)
	}
	return fmt.Sprintf(`{"id":%q,"status":"COMPLETED","purchase_units":[{"reference_id":"default","payments":{"captures":[%s],"refunds":[%s]}}]}`,
		id, strings.Join(cs, ","), strings.Join(refunds, ","))
}

// withTime sets a refund answer's create_time.
func withTime(r, t string) string { return strings.Replace(r, "2026-11-30T20:00:00Z", t, 1) }

// withTotal sets a refund answer's total_refunded_amount (USD).
func withTotal(r, value string) string {
	var m map[string]any
	_ = json.Unmarshal([]byte(r), &m)
	m["seller_payable_breakdown"] = map[string]any{"total_refunded_amount": map[string]string{"value": value, "currency_code": "USD"}}
	b, _ := json.Marshal(m)
	return string(b)
}

// noUp drops a refund answer's "up" link.
func noUp(r string) string {
	var m map[string]any
	_ = json.Unmarshal([]byte(r), &m)
	m["links"] = m["links"].([]any)[:1]
	b, _ := json.Marshal(m)
	return string(b)
}

// paypalAt is a fake PayPal with a capture and an order (answers by path;
// a status of 0 is 200).
func paypalAt(t *testing.T, capture string, orderStatus int, order string) *fake {
	f := newFake(t)
	f.api = func(w http.ResponseWriter, r *http.Request, _ []byte, _ int) {
		switch {
		case r.Method != http.MethodGet || r.Header.Get("PayPal-Request-Id") != "":
			t.Errorf("%s %s with request id %q: a look-up is a plain GET", r.Method, r.URL.Path, r.Header.Get("PayPal-Request-Id"))
		case r.URL.Path == "/v2/payments/captures/CAP123":
			answer(w, 200, capture)
			return
		case strings.HasPrefix(r.URL.Path, "/v2/checkout/orders/") && orderStatus != 0:
			answer(w, orderStatus, order)
			return
		case r.URL.Path == "/v2/checkout/orders/ORD1":
			answer(w, 200, order)
			return
		}
		answer(w, 404, `{"name":"RESOURCE_NOT_FOUND","details":[{"issue":"INVALID_RESOURCE_ID"}]}`)
	}
	return f
}

// TestFindThroughOrder: the capture's refunds are its order's refunds of
// it, newest first, whoever made them: refundkit's (metadata from
// custom_id), another batch's, one made by hand (no metadata), a digest
// custom_id (refundkit's, unattributed); another capture's are left out,
// and one without an "up" link is unattributed when the purchase unit
// holds two captures. Statuses are mapped.
func TestFindThroughOrder(t *testing.T) {
	own := refundJSON("R1", "COMPLETED", "10.50", "USD", "refundkit,b1,order,42,1", "CAP123")
	other := withTime(refundJSON("R2", "PENDING", "1.00", "USD", "refundkit,b0,x,2", "CAP123"), "2026-11-30T20:00:02Z")
	byHand := withTime(refundJSON("R3", "CANCELLED", "2.00", "USD", "", "CAP123"), "2026-11-30T20:00:03Z")
	digest := withTime(refundJSON("R4", "COMPLETED", "3.00", "USD", customID("b1", strings.Repeat("i", 128), 1), "CAP123"), "2026-11-30T20:00:04Z")
	elsewhere := refundJSON("R5", "COMPLETED", "4.00", "USD", "refundkit,b1,order,42,1", "CAP999")
	orphan := withTime(noUp(refundJSON("R6", "COMPLETED", "5.00", "USD", "", "CAP123")), "2026-11-30T20:00:01Z")
	f := paypalAt(t, captureAnswer("CAP123", "PARTIALLY_REFUNDED", "50.00", "ORD1"), 0,
		orderAnswer("ORD1", []string{"CAP123", "CAP999"}, own, elsewhere, orphan, other, byHand, digest))
	got, err := f.client().Find(context.Background(), refund.Payment{Capture: "CAP123"})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(got))
	for i, r := range got {
		ids[i] = r.ID
		if r.Capture != "CAP123" || r.Currency != "usd" {
			t.Errorf("%s: capture %q currency %q", r.ID, r.Capture, r.Currency)
		}
	}
	if want := []string{"R4", "R3", "R2", "R6", "R1"}; !reflect.DeepEqual(ids, want) {
		t.Fatalf("refunds %v, want %v (newest first, CAP999's left out)", ids, want)
	}
	byID := map[string]refund.Refund{}
	for _, r := range got {
		byID[r.ID] = r
	}
	if r := byID["R1"]; !refund.Matches(&r, "b1", "order:42") || r.Metadata[refund.MetaAttempt] != "1" || r.Status != refund.RefundSucceeded || r.Amount != 1050 {
		t.Errorf("own: %+v", r)
	}
	if r := byID["R2"]; r.Metadata[refund.MetaBatch] != "b0" || r.Status != refund.RefundPending || r.FailureReason != "ECHECK" {
		t.Errorf("other batch: %+v", r)
	}
	if r := byID["R3"]; r.Metadata != nil || r.Status != refund.RefundCanceled {
		t.Errorf("by hand: %+v, want no metadata, canceled", r)
	}
	for _, id := range []string{"R4", "R6"} {
		if r := byID[id]; !isUnattributed(&r) || !refund.Live(&r) {
			t.Errorf("%s: %+v, want unattributed", id, r)
		}
	}
	sent := f.sent()
	if len(sent) != 2 || sent[0].path != "/v2/payments/captures/CAP123" || sent[1].path != "/v2/checkout/orders/ORD1" {
		t.Errorf("requests %+v", sent)
	}
}

// TestFindOneCapture: in a purchase unit of one capture, a refund without
// an "up" link is that capture's, with its metadata.
func TestFindOneCapture(t *testing.T) {
	f := paypalAt(t, captureAnswer("CAP123", "REFUNDED", "10.50", "ORD1"), 0,
		orderAnswer("ORD1", []string{"CAP123"}, noUp(refundJSON("R1", "COMPLETED", "10.50", "USD", "refundkit,b1,order,42,1", "CAP123"))))
	got, err := f.client().Find(context.Background(), refund.Payment{Capture: "CAP123"})
	if err != nil || len(got) != 1 || got[0].Capture != "CAP123" || !refund.Matches(&got[0], "b1", "order:42") {
		t.Errorf("%+v, %v", got, err)
	}
}

// TestFindUnlisted: where the refunds cannot be listed (no order, the
// order gone or not the app's, the order silent about them, or its list
// short of what PayPal says the capture gave back), a capture PayPal says
// is refunded gets one unattributed refund standing for what is not
// listed, which holds the item; one that is not gets none. A capture that
// cannot be read, or an order that cannot be read now, is an error.
func TestFindUnlisted(t *testing.T) {
	emptyOrder := orderAnswer("ORD1", []string{"CAP123"})
	r1 := refundJSON("R1", "COMPLETED", "10.50", "USD", "refundkit,b1,order,42,1", "CAP123")
	for _, tc := range []struct {
		name, capture string
		orderStatus   int
		order         string
		want          int64 // -1: no refund; else the stand-in's amount
		class         refund.Class
		fails         bool
	}{
		{"no order, partially refunded", captureAnswer("CAP123", "PARTIALLY_REFUNDED", "50.00", ""), 0, "", 0, 0, false},
		{"no order, refunded", captureAnswer("CAP123", "REFUNDED", "50.00", ""), 0, "", 5000, 0, false},
		{"no order, not refunded", captureAnswer("CAP123", "COMPLETED", "50.00", ""), 0, "", -1, 0, false},
		{"order 404", captureAnswer("CAP123", "REFUNDED", "50.00", "ORD1"), 404, `{"name":"RESOURCE_NOT_FOUND"}`, 5000, 0, false},
		{"order 403", captureAnswer("CAP123", "PARTIALLY_REFUNDED", "50.00", "ORD1"), 403, `{"name":"NOT_AUTHORIZED"}`, 0, 0, false},
		{"order lists none", captureAnswer("CAP123", "PARTIALLY_REFUNDED", "50.00", "ORD1"), 0, emptyOrder, 0, 0, false},
		{"order lists only a failed one", captureAnswer("CAP123", "REFUNDED", "50.00", "ORD1"), 0,
			orderAnswer("ORD1", []string{"CAP123"}, refundJSON("R1", "FAILED", "1.00", "USD", "", "CAP123")), 5000, 0, false},
		{"order not listing the capture", captureAnswer("CAP123", "REFUNDED", "50.00", "ORD1"), 0, orderAnswer("ORD1", []string{"CAPX"}), 5000, 0, false},
		{"order unrefunded, none listed", captureAnswer("CAP123", "COMPLETED", "50.00", "ORD1"), 0, emptyOrder, -1, 0, false},
		{"refunded, listed short of it", captureAnswer("CAP123", "REFUNDED", "50.00", "ORD1"), 0, orderAnswer("ORD1", []string{"CAP123"}, r1), 3950, 0, false},
		{"total beyond the list", captureAnswer("CAP123", "PARTIALLY_REFUNDED", "50.00", "ORD1"), 0,
			orderAnswer("ORD1", []string{"CAP123"}, withTotal(r1, "20.00")), 950, 0, false},
		{"list adds up", captureAnswer("CAP123", "PARTIALLY_REFUNDED", "50.00", "ORD1"), 0,
			orderAnswer("ORD1", []string{"CAP123"}, withTotal(r1, "10.50")), -1, 0, false},
		{"order 500", captureAnswer("CAP123", "REFUNDED", "50.00", "ORD1"), 500, `{"name":"INTERNAL_SERVER_ERROR"}`, 0, refund.ClassRetry, true},
		{"capture 404", `{}`, 0, "", 0, refund.ClassFinal, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := paypalAt(t, tc.capture, tc.orderStatus, tc.order)
			if tc.capture == `{}` {
				f.api = func(w http.ResponseWriter, _ *http.Request, _ []byte, _ int) {
					answer(w, 404, `{"name":"RESOURCE_NOT_FOUND","details":[{"issue":"INVALID_RESOURCE_ID"}]}`)
				}
			}
			got, err := f.client().Find(context.Background(), refund.Payment{Capture: "CAP123"})
			if tc.fails {
				if fl := refund.Classify(err); err == nil || fl.Class != tc.class {
					t.Errorf("%+v, %v; want an error of class %v", got, err, tc.class)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var standIn []refund.Refund
			for _, r := range got {
				if isUnattributed(&r) {
					standIn = append(standIn, r)
				}
			}
			if tc.want < 0 {
				if len(standIn) != 0 {
					t.Errorf("%+v, want no stand-in", got)
				}
				return
			}
			if len(standIn) != 1 {
				t.Fatalf("%+v, want one unattributed refund", got)
			}
			r := standIn[0]
			if !refund.Live(&r) || r.Capture != "CAP123" || r.Amount != tc.want || r.Currency != "usd" || !strings.Contains(r.FailureReason, "cannot all be listed") {
				t.Errorf("%+v, want a live stand-in of %d", r, tc.want)
			}
		})
	}
}

// isUnattributed reports a refund unattributed marks.
func isUnattributed(r *refund.Refund) bool { return r.Unattributed }
