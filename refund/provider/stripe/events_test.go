package stripe

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76/webhook"

	"github.com/refundkit/refundkit/refund"
)

func refundEvent(id, typ, status string, created int64, amount int64) []byte {
	return fmt.Appendf(nil, `{"id":%q,"object":"event","type":%q,"created":%d,"data":{"object":{"id":"re_1","object":"refund","amount":%d,"currency":"usd","charge":"ch_1","status":%q,"metadata":{"refundkit_batch":"b","refundkit_item":"i1","refundkit_attempt":"1"}}}}`,
		id, typ, created, amount, status)
}

func sign(payload []byte, secret string, at time.Time) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: payload, Secret: secret, Timestamp: at}).Header
}

func TestVerifyEventSecrets(t *testing.T) {
	p := refundEvent("evt_1", "refund.updated", "succeeded", 1, 500)
	now := time.Now()
	old, rolled := "whsec_old", "whsec_new"
	cases := []struct {
		name    string
		header  string
		payload []byte
		secrets []string
		tol     time.Duration
		want    error
	}{
		{"current secret", sign(p, old, now), p, []string{old}, Tolerance, nil},
		{"rolled: signed under the new, both held", sign(p, rolled, now), p, []string{old, rolled}, Tolerance, nil},
		{"rolled: signed under the old, both held", sign(p, old, now), p, []string{rolled, old}, Tolerance, nil},
		{"another secret", sign(p, "whsec_other", now), p, []string{old, rolled}, Tolerance, webhook.ErrNoValidSignature},
		{"tampered payload", sign(p, old, now), refundEvent("evt_1", "refund.updated", "succeeded", 1, 50000), []string{old}, Tolerance, webhook.ErrNoValidSignature},
		{"replay past the tolerance", sign(p, old, now.Add(-Tolerance-time.Minute)), p, []string{old}, Tolerance, webhook.ErrTooOld},
		{"old, re-read: the signature alone", sign(p, old, now.Add(-48*time.Hour)), p, []string{old}, 0, nil},
		{"old, forged, re-read", sign(p, "whsec_other", now.Add(-48*time.Hour)), p, []string{old}, 0, webhook.ErrNoValidSignature},
		{"no header", "", p, []string{old}, Tolerance, webhook.ErrNotSigned},
		{"bad header", "t=x,v1=00", p, []string{old}, Tolerance, webhook.ErrInvalidHeader},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := VerifyEvent(c.payload, c.header, c.secrets, c.tol); !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
				t.Fatalf("VerifyEvent: %v, want %v", err, c.want)
			}
		})
	}
	if err := VerifyEvent(p, sign(p, old, now), nil, Tolerance); err == nil {
		t.Fatal("VerifyEvent with no secret: nil error")
	}
}

func TestReadEvent(t *testing.T) {
	e, err := ReadEvent(refundEvent("evt_1", "refund.updated", "succeeded", 7, 500))
	if err != nil {
		t.Fatal(err)
	}
	r := e.Refund
	if e.ID != "evt_1" || e.Created != 7 || r == nil || r.ID != "re_1" || r.Charge != "ch_1" || r.Amount != 500 || r.Currency != "usd" ||
		r.Status != refund.RefundSucceeded || r.Metadata[refund.MetaItem] != "i1" {
		t.Fatalf("ReadEvent: %+v refund %+v", e, r)
	}
	other, err := ReadEvent([]byte(`{"id":"evt_2","object":"event","type":"charge.refunded","created":1,"data":{"object":{"id":"ch_1","object":"charge"}}}`))
	if err != nil || other.Refund != nil || other.Type != ChargeRefunded {
		t.Fatalf("charge.refunded: %+v, %v; want kept, no refund", other, err)
	}
	for _, bad := range []string{`nope`, `{"type":"refund.updated"}`, `{"id":"evt_3","type":"refund.updated","data":{"object":{"id":"ch_1","object":"charge"}}}`} {
		if _, err := ReadEvent([]byte(bad)); err == nil {
			t.Errorf("ReadEvent(%s): nil error", bad)
		}
	}
}

func TestOutcomeOrderFree(t *testing.T) {
	read := func(typ, status string, created, amount int64) Event {
		e, err := ReadEvent(refundEvent("evt", typ, status, created, amount))
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	pending, succeeded, failed := read("refund.created", "pending", 1, 500), read("refund.updated", "succeeded", 2, 500), read("refund.failed", "failed", 3, 500)
	cases := []struct {
		name   string
		events []Event
		status string
	}{
		{"pending", []Event{pending}, refund.RefundPending},
		{"in order", []Event{pending, succeeded}, refund.RefundSucceeded},
		{"reordered", []Event{succeeded, pending}, refund.RefundSucceeded},
		{"duplicated", []Event{succeeded, pending, succeeded, pending}, refund.RefundSucceeded},
		{"failed later, any order", []Event{failed, pending, succeeded}, refund.RefundFailed},
		{"another amount contradicts", []Event{pending, read("refund.updated", "succeeded", 2, 400)}, refund.RefundPending},
		// A succeeded refund may fail; it is never canceled after.
		{"succeeded then canceled contradicts", []Event{succeeded, read("refund.updated", "canceled", 3, 500)}, refund.RefundPending},
		// A status refundkit does not know stands: Stripe is then asked.
		{"an unknown status later", []Event{succeeded, read("refund.updated", "reversed", 9, 500)}, "reversed"},
		{"an unknown status earlier", []Event{read("refund.updated", "reversed", 1, 500), failed}, "reversed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, ok := Outcome("re_1", c.events)
			if !ok || r.Status != c.status {
				t.Fatalf("Outcome: %+v %v, want %s", r, ok, c.status)
			}
			if strings.Contains(c.name, "contradicts") != (r.FailureReason == ReasonContradicts) {
				t.Fatalf("FailureReason %q", r.FailureReason)
			}
		})
	}
	if _, ok := Outcome("re_other", []Event{pending}); ok {
		t.Fatal("Outcome of a refund no event names: ok")
	}
	// Every order of the same events gives the same refund.
	all := []Event{pending, succeeded, read("refund.updated", "succeeded", 2, 500), failed}
	all[2].ID = "evt_b"
	want, _ := Outcome("re_1", all)
	for _, perm := range [][]int{{3, 2, 1, 0}, {1, 3, 0, 2}, {2, 0, 3, 1}} {
		evs := make([]Event, len(perm))
		for i, k := range perm {
			evs[i] = all[k]
		}
		if got, _ := Outcome("re_1", evs); got.Status != want.Status || got.FailureReason != want.FailureReason {
			t.Errorf("order %v: %+v, want %+v", perm, got, want)
		}
	}
}

// A connected account's event (a Connect endpoint gets them too) tells
// of no refund of the platform's: kept, it settles nothing.
func TestReadEventOfAConnectedAccount(t *testing.T) {
	body := refundEvent("evt_c", "refund.updated", "succeeded", 2, 500)
	body = []byte(strings.Replace(string(body), `"object":"event",`, `"object":"event","account":"acct_someone_else",`, 1))
	e, err := ReadEvent(body)
	if err != nil || e.Refund != nil {
		t.Fatalf("ReadEvent: %+v %v, want an event of no refund", e, err)
	}
}
