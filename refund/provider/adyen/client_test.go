package adyen

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
)

func testItem() *refund.Item {
	return &refund.Item{Batch: "B1", Item: "it-1", PSPReference: "PAY0000000000001", Amount: 1250, Currency: "eur"}
}

// TestCreateSendsKeyReferenceAndAmount: the request Adyen gets names the
// item (reference), the attempt's digest key, the amount in minor units
// and the merchant account; the answer is a pending refund whose metadata
// the reference tells.
func TestCreateSendsKeyReferenceAndAmount(t *testing.T) {
	var got struct {
		path, key, apiKey string
		body              refundRequest
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.path, got.key, got.apiKey = r.URL.Path, r.Header.Get("Idempotency-Key"), r.Header.Get("X-API-Key")
		data, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(data, &got.body); err != nil {
			t.Errorf("body: %v", err)
		}
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(wire.RefundAnswer{MerchantAccount: got.body.MerchantAccount, PaymentPSPReference: "PAY0000000000001",
			PSPReference: "REF0000000000001", Reference: got.body.Reference, Status: "received", Amount: got.body.Amount})
	}))
	defer srv.Close()
	c := New(Config{Base: srv.URL, APIKey: "secret-key", Merchant: "Shop"})
	a, err := c.Create(context.Background(), testItem(), 2)
	if err != nil {
		t.Fatal(err)
	}
	if got.path != "/v71/payments/PAY0000000000001/refunds" || got.apiKey != "secret-key" {
		t.Errorf("path %q api key %q", got.path, got.apiKey)
	}
	if want := wire.Key("B1", "it-1", 2); got.key != want || len(got.key) > wire.MaxKey {
		t.Errorf("key %q, want %q (at most %d)", got.key, want, wire.MaxKey)
	}
	if got.body.Amount != (wire.Amount{Currency: "EUR", Value: 1250}) || got.body.MerchantAccount != "Shop" || got.body.Reference != "refundkit:B1:it-1:2" {
		t.Errorf("body %+v", got.body)
	}
	r := a.Refund
	if r.ID != "REF0000000000001" || r.Status != refund.RefundPending || r.PSPReference != "PAY0000000000001" || r.Amount != 1250 || r.Currency != "eur" {
		t.Errorf("refund %+v", r)
	}
	if !refund.Matches(&r, "B1", "it-1") || r.Metadata[refund.MetaAttempt] != "2" {
		t.Errorf("metadata %v", r.Metadata)
	}
}

// TestClassify: only transient errors, 703, 704, 429 and answers that are
// not Adyen's are repeated under the key; Adyen's own 500 is
// indeterminate; 401/403 halt; other refusals are final.
func TestClassify(t *testing.T) {
	body := func(code, typ string) []byte {
		b, _ := json.Marshal(apiError{Status: 422, ErrorCode: code, Message: "m", ErrorType: typ})
		return b
	}
	transient := http.Header{}
	transient.Set("transient-error", "true")
	for _, c := range []struct {
		name   string
		status int
		h      http.Header
		body   []byte
		want   refund.Class
	}{
		{"in progress", 422, nil, body("704", "validation"), refund.ClassRetry},
		{"in progress 409", 409, nil, body("704", "validation"), refund.ClassRetry},
		{"store unavailable", 500, nil, body("703", "internal"), refund.ClassRetry},
		{"transient 500", 500, transient, body("000", "internal"), refund.ClassRetry},
		{"rate limited", 429, nil, nil, refund.ClassRetry},
		{"gateway page", 504, nil, []byte("<html>timeout</html>"), refund.ClassRetry},
		{"gateway 502", 502, nil, nil, refund.ClassRetry},
		{"adyen 500", 500, nil, body("000", "internal"), refund.ClassIndeterminate},
		{"unauthorized", 401, nil, body("000", "security"), refund.ClassFatal},
		{"forbidden", 403, nil, body("010", "security"), refund.ClassFatal},
		{"over refund", 422, nil, body("137", "validation"), refund.ClassFinal},
		{"unknown payment", 422, nil, body("167", "validation"), refund.ClassFinal},
	} {
		h := c.h
		if h == nil {
			h = http.Header{}
		}
		f := classify(c.status, h, c.body)
		if f.Class != c.want {
			t.Errorf("%s: class %v, want %v (%v)", c.name, f.Class, c.want, f)
		}
		if c.want == refund.ClassRetry && f.Status != 0 {
			t.Errorf("%s: status %d journaled for a call to repeat, want 0", c.name, f.Status)
		}
	}
}

// TestCreateAnswerNotReceived: a success status whose body is not Adyen's
// "received" (a proxy's page) is no answer: the call is repeated.
func TestCreateAnswerNotReceived(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"status":"ok"}`)
	}))
	defer srv.Close()
	_, err := New(Config{Base: srv.URL, APIKey: "k", Merchant: "m"}).Create(context.Background(), testItem(), 1)
	if f := refund.Classify(err); f.Class != refund.ClassRetry || f.Code != "unreadable_answer" {
		t.Fatalf("got %+v", f)
	}
}

func note(event, psp, success string, at int) wire.Notification {
	return wire.Notification{V: wire.Version, Received: time.Unix(int64(1000+at), 0),
		Item: wire.Item{EventCode: event, PSPReference: psp, OriginalReference: "PAY0000000000001", Success: success,
			MerchantAccountCode: "Shop", MerchantReference: "refundkit:B1:it-1:1", Amount: wire.Amount{Currency: "EUR", Value: 1250}}}
}

// TestOutcomeOrderFree: a refund's end does not depend on the order its
// notifications arrived in, nor on duplicates.
func TestOutcomeOrderFree(t *testing.T) {
	const id = "REF0000000000001"
	for _, c := range []struct {
		name   string
		notes  []wire.Notification
		status string
		reason string
	}{
		{"none", nil, "", ""},
		{"succeeded", []wire.Notification{note("REFUND", id, "true", 0)}, refund.RefundSucceeded, ""},
		{"succeeded twice", []wire.Notification{note("REFUND", id, "true", 0), note("REFUND", id, "true", 1)}, refund.RefundSucceeded, ""},
		{"refused", []wire.Notification{note("REFUND", id, "false", 0)}, refund.RefundFailed, ""},
		{"failed later", []wire.Notification{note("REFUND", id, "true", 0), note("REFUND_FAILED", id, "true", 1)}, refund.RefundFailed, ReasonFailedLater},
		{"failed later, arrived first", []wire.Notification{note("REFUND_FAILED", id, "true", 0), note("REFUND", id, "true", 1)}, refund.RefundFailed, ReasonFailedLater},
		{"reversed, arrived first", []wire.Notification{note("REFUNDED_REVERSED", id, "true", 0), note("REFUND", id, "true", 1)}, refund.RefundFailed, ReasonReversed},
		{"contradicting", []wire.Notification{note("REFUND", id, "true", 0), note("REFUND", id, "false", 1)}, refund.RefundPending, ReasonContradicts},
		{"another refund's", []wire.Notification{note("REFUND", "REF0000000000002", "true", 0)}, "", ""},
		{"not a refund event", []wire.Notification{note("CAPTURE", id, "true", 0)}, "", ""},
	} {
		r, ok := Outcome(id, c.notes)
		if ok != (c.status != "") || r.Status != c.status || (c.reason != "" && r.FailureReason != c.reason) {
			t.Errorf("%s: %v %+v, want %q %q", c.name, ok, r, c.status, c.reason)
		}
		if ok && (r.PSPReference != "PAY0000000000001" || r.Amount != 1250 || r.Currency != "eur" || !refund.Matches(&r, "B1", "it-1")) {
			t.Errorf("%s: bindings %+v", c.name, r)
		}
	}
}

type fakeNotes []wire.Notification

func (f fakeNotes) ForRefund(_ context.Context, psp string) ([]wire.Notification, error) {
	var out []wire.Notification
	for _, n := range f {
		if n.Item.PSPReference == psp {
			out = append(out, n)
		}
	}
	return out, nil
}

func (f fakeNotes) All(context.Context) ([]wire.Notification, error) { return f, nil }

func (f fakeNotes) ForPayment(_ context.Context, psp string) ([]wire.Notification, error) {
	var out []wire.Notification
	for _, n := range f {
		if n.Item.OriginalReference == psp {
			out = append(out, n)
		}
	}
	return out, nil
}

// TestGetAndFindFromNotifications: Get is pending until a notification
// tells; Find lists the payment's refunds newest first; without
// notifications neither can be read.
func TestGetAndFindFromNotifications(t *testing.T) {
	ctx := context.Background()
	bare := New(Config{APIKey: "k", Merchant: "m"})
	if _, err := bare.Get(ctx, "X"); !errors.Is(err, refund.ErrNoLookup) {
		t.Errorf("Get without notifications: %v", err)
	}
	if _, err := bare.Find(ctx, refund.Payment{PSPReference: "PAY0000000000001"}); !errors.Is(err, refund.ErrNoLookup) {
		t.Errorf("Find without notifications: %v", err)
	}
	notes := fakeNotes{note("REFUND", "REF0000000000001", "true", 0), note("REFUND", "REF0000000000002", "false", 1)}
	c := New(Config{APIKey: "k", Merchant: "m", Notes: notes})
	r, err := c.Get(ctx, "REF0000000000009")
	if err != nil || r.Status != refund.RefundPending || r.ID != "REF0000000000009" {
		t.Errorf("unheard-of refund: %+v %v", r, err)
	}
	r, err = c.Get(ctx, "REF0000000000001")
	if err != nil || r.Status != refund.RefundSucceeded {
		t.Errorf("settled refund: %+v %v", r, err)
	}
	list, err := c.Find(ctx, refund.Payment{PSPReference: "PAY0000000000001"})
	if err != nil || len(list) != 2 || list[0].ID != "REF0000000000002" || list[0].Status != refund.RefundFailed || list[1].Status != refund.RefundSucceeded {
		t.Errorf("find: %+v %v", list, err)
	}
	if !c.Facts().PartialLookup {
		t.Error("Adyen's look-up is partial: a refund whose notification has not come is not listed")
	}
}

// TestReferenceRoundTrip: a reference names batch, item (with its ':')
// and attempt, and fits Adyen's 80 characters whenever ReferenceFits.
func TestReferenceRoundTrip(t *testing.T) {
	item := "ch:abc:def"
	ref := wire.Reference("B1", item, 9999)
	b, i, n, ok := wire.ParseReference(ref)
	if !ok || b != "B1" || i != item || n != 9999 {
		t.Fatalf("%q: %q %q %d %v", ref, b, i, n, ok)
	}
	long := make([]byte, wire.MaxBatchItem-2)
	for k := range long {
		long[k] = 'x'
	}
	if !wire.ReferenceFits("B1", string(long)) || len(wire.Reference("B1", string(long), 9999)) > wire.MaxReference {
		t.Fatalf("a fitting item's reference passes %d characters", wire.MaxReference)
	}
	if wire.ReferenceFits("B1x", string(long)) {
		t.Fatal("one character more must not fit")
	}
	for _, s := range []string{"refundkit:B1:1", "other:B1:x:1", "refundkit::x:1", "refundkit:B1:x:01", "refundkit:B1:x:0"} {
		if _, _, _, ok := wire.ParseReference(s); ok {
			t.Errorf("%q parsed as refundkit's", s)
		}
	}
}
