package adyensim

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
	"github.com/refundkit/refundkit/refund/sim"
)

func TestNotificationSigned(t *testing.T) {
	h := start(t, sim.Faults{}, Config{}, true)
	r := h.created(h.refund("PAY1", body(2500, "EUR", "refundkit:b:i1:1"), "k1"))
	st := h.flush()
	items := h.recv.accepted()
	if len(items) != 1 || st.Delivered != 1 || st.Pending != 0 || st.Queued != 1 || st.Retries != 0 {
		t.Fatalf("items %v, stats %+v", events(items), st)
	}
	it := items[0]
	if it.EventCode != wire.EventRefund || it.Success != "true" || it.PSPReference != r.PSPReference || it.OriginalReference != "PAY1" ||
		it.MerchantReference != "refundkit:b:i1:1" || it.MerchantAccountCode != DefaultMerchantAccount ||
		it.Amount != (wire.Amount{Currency: "EUR", Value: 2500}) || it.EventDate == "" {
		t.Errorf("item %+v", it)
	}
	if got := h.s.Refunds()[0]; got.Status != OutcomeRefunded {
		t.Errorf("status %s after its REFUND, want refunded", got.Status)
	}
	if st := h.s.Stats(); st.Refunds[OutcomeRefunded] != 1 || st.Notifications.Delivered != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestNotificationRetriedUntilAccepted(t *testing.T) {
	h := start(t, sim.Faults{}, Config{}, true)
	// A 500, a 200 that is not [accepted], then [accepted].
	h.recv.answer = func(n int) (int, string) {
		switch n {
		case 0:
			return http.StatusInternalServerError, wire.Accepted
		case 1:
			return http.StatusOK, "ok"
		}
		return http.StatusOK, wire.Accepted
	}
	h.created(h.refund("PAY1", body(100, "EUR", ""), "k1"))
	st := h.flush()
	if st.Retries != 2 || st.Delivered != 1 || h.recv.requests() != 3 || len(h.recv.accepted()) != 1 {
		t.Errorf("stats %+v, %d requests", st, h.recv.requests())
	}
}

func TestNotificationOutcomesInOrder(t *testing.T) {
	for _, tt := range []struct {
		name    string
		f       sim.Faults
		want    []string // event:success of the refund, in arrival order
		outcome string
		held    int64
	}{
		{"refused", sim.Faults{AdyenRefundFailedShare: 1}, []string{"REFUND:false"}, OutcomeRefused, 0},
		{"failed later", sim.Faults{AdyenRefundFailedLaterShare: 1}, []string{"REFUND:true", "REFUND_FAILED:true"}, OutcomeFailed, 0},
		{"reversed", sim.Faults{AdyenReversedShare: 1}, []string{"REFUND:true", "REFUNDED_REVERSED:true"}, OutcomeReversed, 0},
		{"reordered", sim.Faults{AdyenRefundFailedLaterShare: 1, AdyenNotifyReorder: true}, []string{"REFUND_FAILED:true", "REFUND:true"}, OutcomeFailed, 0},
		{"duplicated", sim.Faults{AdyenNotifyDuplicateShare: 1}, []string{"REFUND:true", "REFUND:true"}, OutcomeRefunded, 300},
		{"delayed", sim.Faults{AdyenNotifyDelay: 20 * time.Millisecond, AdyenNotifyJitter: 5 * time.Millisecond, AdyenReversedShare: 1},
			[]string{"REFUND:true", "REFUNDED_REVERSED:true"}, OutcomeReversed, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := start(t, tt.f, Config{}, true)
			r := h.created(h.refund("PAY1", body(300, "EUR", "ref"), "k1"))
			h.flush()
			var got []string
			for _, it := range h.recv.accepted() {
				if it.PSPReference != r.PSPReference {
					t.Fatalf("item of %s", it.PSPReference)
				}
				got = append(got, it.EventCode+":"+it.Success)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("notifications %v, want %v", got, tt.want)
			}
			rf := h.s.Refunds()[0]
			p, _ := h.s.Payment("PAY1")
			if rf.Status != tt.outcome || rf.Outcome != tt.outcome || p.Refunded != tt.held {
				t.Errorf("refund %+v, payment refunded %d, want %s and %d", rf, p.Refunded, tt.outcome, tt.held)
			}
		})
	}
}

func TestNotificationFailShare(t *testing.T) {
	h := start(t, sim.Faults{AdyenNotifyFailShare: 0.5}, Config{}, true)
	for i := range 8 {
		h.created(h.refund("PAY1", body(100, "EUR", ""), "k"+string(rune('a'+i))))
	}
	st := h.flush()
	if st.Delivered != 8 || st.FailedByKnob == 0 || st.Retries != st.FailedByKnob || st.Pending != 0 {
		t.Errorf("stats %+v", st)
	}
	// Every delivery that counted as failed reached the receiver, which
	// accepted it: Adyen sent it again, and the receiver has duplicates.
	if got := len(h.recv.accepted()); int64(got) != st.Delivered+st.FailedByKnob {
		t.Errorf("receiver accepted %d, want %d", got, st.Delivered+st.FailedByKnob)
	}
}

func TestFlushBoundedByContext(t *testing.T) {
	h := start(t, sim.Faults{}, Config{}, true)
	ctx, cancel := context.WithCancel(context.Background())
	back := make(chan struct{}) // closed: the receiver accepts again
	// The receiver refuses; flush cannot end on its own, so the test
	// cancels it once the receiver has refused twice.
	h.recv.answer = func(n int) (int, string) {
		select {
		case <-back:
			return http.StatusOK, wire.Accepted
		default:
		}
		if n == 1 {
			cancel()
		}
		return http.StatusServiceUnavailable, ""
	}
	h.created(h.refund("PAY1", body(100, "EUR", ""), "k1"))
	st, err := h.s.Flush(ctx)
	if err == nil || st.Pending != 1 || st.Delivered != 0 {
		t.Errorf("flush: %v %+v, want the context's error with 1 pending", err, st)
	}
	close(back)
	if st := h.flush(); st.Delivered != 1 || st.Pending != 0 || st.Retries < 2 {
		t.Errorf("after: %+v", st)
	}
}

func TestNoNotifyURL(t *testing.T) {
	h := start(t, sim.Faults{}, Config{}, false)
	h.created(h.refund("PAY1", body(100, "EUR", ""), "k1"))
	if st := h.flush(); st != (NotifyStats{}) {
		t.Errorf("stats %+v", st)
	}
	if _, err := New(h.core, Config{NotifyURL: "http://example.com/hook", HMACKey: []byte{1}}, h.clock.now); err == nil {
		t.Error("a notify URL off loopback taken")
	}
	if _, err := New(h.core, Config{NotifyURL: "http://127.0.0.1:1/hook"}, h.clock.now); err == nil {
		t.Error("notifications without an HMAC key taken")
	}
}
