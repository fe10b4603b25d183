package events

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund"
	store "github.com/refundkit/refundkit/refund/provider/events"
	"github.com/refundkit/refundkit/refund/provider/paypal/wire"
)

// refundEvent is an event of typ whose resource is refund REF-<n> in status.
func refundEvent(id, typ, status string, n int, created time.Time) []byte {
	return fmt.Appendf(nil, `{"id":%q,"event_type":%q,"resource_type":"refund","create_time":%q,"resource":{"id":"REF-%d","status":%q,`+
		`"amount":{"currency_code":"USD","value":"5.00"},"custom_id":"refundkit,b1,i1,1","create_time":%q,`+
		`"links":[{"rel":"up","href":"https://api.paypal.com/v2/payments/captures/CAP-1","method":"GET"}]}}`,
		id, typ, created.Format(time.RFC3339), n, status, created.Format(time.RFC3339))
}

// receiver serves a Receiver over a new events file at path.
func receiver(t *testing.T, path string, v *Verifier) (*Receiver, *EventsFile) {
	t.Helper()
	f, err := OpenEvents(path, v, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	r, err := NewReceiver(ReceiverConfig{Verifier: v, Events: f, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	return r, f
}

func post(t *testing.T, h http.Handler, body []byte, hs *Headers) int {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, EventsPath, bytes.NewReader(body))
	if hs != nil {
		hs.Set(req.Header)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Code
}

func TestReceiverKeepsVerifiedEventsOnce(t *testing.T) {
	rig, c, v := setup(t)
	path := filepath.Join(t.TempDir(), "paypal.jsonl")
	r, f := receiver(t, path, v)
	s := signer(c, rig.url("CERT-1"))
	pending := refundEvent("WH-1", "PAYMENT.REFUND.PENDING", "PENDING", 1, now.Add(-2*time.Minute))
	done := refundEvent("WH-2", "PAYMENT.CAPTURE.REFUNDED", "COMPLETED", 1, now.Add(-time.Minute))
	sign := func(b []byte, tid string, at time.Time) *Headers { h := s.Sign(b, webhookID, tid, at); return &h }

	other := mustCerts(t, now.Add(-time.Hour), now.Add(24*time.Hour)) // its own root, not trusted
	rig.serve("CERT-OTHER", other.ChainPEM)
	notEvent := []byte(`{"id":"WH-3"}`)
	for _, c := range []struct {
		name string
		body []byte
		h    *Headers
		want int
	}{
		{"the later event first", done, sign(done, "T-2", now), 200},
		{"then the first", pending, sign(pending, "T-1", now), 200},
		{"its retry", pending, sign(pending, "T-1b", now.Add(time.Second)), 200},
		{"forged: another chain", done, ptr(signer(other, rig.url("CERT-OTHER")).Sign(done, webhookID, "T-9", now)), 401},
		{"forged: another key", done, ptr(signer(other, rig.url("CERT-1")).Sign(done, webhookID, "T-9", now)), 401},
		{"tampered", refundEvent("WH-2", "PAYMENT.CAPTURE.REFUNDED", "FAILED", 1, now.Add(-time.Minute)), sign(done, "T-2", now), 401},
		{"another webhook's", done, ptr(s.Sign(done, "WH-OTHER", "T-2", now)), 401},
		{"replayed", done, sign(done, "T-2", now.Add(-Tolerance-time.Minute)), 401},
		{"unsigned", done, nil, 401},
		{"cert url not PayPal's", done, ptr(signer(c, "https://evil.example"+"/v1/notifications/certs/X").Sign(done, webhookID, "T-2", now)), 401},
		{"signed, no event", notEvent, sign(notEvent, "T-3", now), 400},
		{"too large", bytes.Repeat([]byte(" "), 1<<20+1), sign(done, "T-2", now), 413},
	} {
		if got := post(t, r, c.body, c.h); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
	// A certificate that cannot be fetched: 503, so that PayPal retries.
	rig.fail.Store(true)
	if got := post(t, r, done, ptr(signer(c, rig.url("CERT-NEW")).Sign(done, webhookID, "T-4", now))); got != http.StatusServiceUnavailable {
		t.Errorf("cert host down: %d, want 503", got)
	}
	rig.fail.Store(false)
	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, EventsPath, nil))
	if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != http.MethodPost {
		t.Errorf("GET: %d Allow %q", w.Code, w.Header().Get("Allow"))
	}

	st := r.Stats()
	want := map[string]int64{RefusedSignature: 7, RefusedCertFetch: 1, RefusedBadRequest: 1, RefusedTooLarge: 1, RefusedMethod: 1}
	if st.Accepted != 3 || st.Added != 2 || st.Duplicates != 1 || st.StoreErrors != 0 || fmt.Sprint(st.Rejected) != fmt.Sprint(want) {
		t.Fatalf("stats %+v, want rejected %v", st, want)
	}
	if f.Fsyncs() == 0 {
		t.Fatal("events answered 200 with no fsync")
	}

	// A reader of the file (refund --notifications) verifies each line
	// again, one certificate fetch for the file, and tells the outcome
	// whatever the arrival order.
	fetches := rig.fetches.Load()
	rv := rig.verifier(c)
	rd, err := OpenEvents(path, rv, false)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if n := rig.fetches.Load() - fetches; n != 1 {
		t.Errorf("reading 2 lines signed under one certificate fetched it %d times, want 1", n)
	}
	tell := &Telling{Events: rd}
	got, ok, err := tell.Told(context.Background(), "REF-1")
	if err != nil || !ok || got.Status != refund.RefundSucceeded || got.Amount != 500 || got.Capture != "CAP-1" || got.Metadata[refund.MetaItem] != "i1" {
		t.Fatalf("Told REF-1: %+v %v %v", got, ok, err)
	}
	if _, ok, _ := tell.Told(context.Background(), "REF-other"); ok {
		t.Fatal("told of a refund no event names")
	}
	all, err := tell.AllTold(context.Background())
	if err != nil || len(all) != 1 || all[0].ID != "REF-1" || all[0].Status != refund.RefundSucceeded {
		t.Fatalf("AllTold: %+v %v", all, err)
	}

	// A reader for another webhook cannot verify the lines: refused with
	// the line, not skipped.
	ov := rig.verifier(c)
	ov.WebhookID = "WH-OTHER"
	var corrupt *store.CorruptError
	if _, err := OpenEvents(path, ov, false); !errors.As(err, &corrupt) || corrupt.Line != 1 || !strings.HasPrefix(err.Error(), path+":1: ") {
		t.Fatalf("reader for another webhook: %v, want a *CorruptError at %s:1", err, path)
	}
}

func ptr[T any](v T) *T { return &v }

func TestEventsFileRefusesAnEditedLine(t *testing.T) {
	rig, c, v := setup(t)
	path := filepath.Join(t.TempDir(), "paypal.jsonl")
	r, f := receiver(t, path, v)
	s := signer(c, rig.url("CERT-1"))
	for i, b := range [][]byte{
		refundEvent("WH-1", "PAYMENT.REFUND.PENDING", "PENDING", 1, now),
		refundEvent("WH-2", "PAYMENT.REFUND.FAILED", "FAILED", 1, now),
	} {
		if code := post(t, r, b, ptr(s.Sign(b, webhookID, fmt.Sprint("T-", i), now))); code != 200 {
			t.Fatalf("POST %d: %d", i, code)
		}
	}
	f.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Someone turns the failure into a success by hand.
	edited := strings.Replace(string(b), `\"status\":\"FAILED\"`, `\"status\":\"COMPLETED\"`, 1)
	if edited == string(b) {
		t.Fatal("the test's edit changed nothing")
	}
	if err := os.WriteFile(path, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	var corrupt *store.CorruptError
	for _, write := range []bool{false, true} {
		_, err := OpenEvents(path, rig.verifier(c), write)
		if !errors.As(err, &corrupt) || corrupt.Line != 2 || !strings.HasPrefix(err.Error(), path+":2: PayPal signature does not verify") {
			t.Fatalf("edited line (write %v): %v, want a *CorruptError at %s:2", write, err, path)
		}
	}
}

func TestReceiverConcurrentDeliveries(t *testing.T) {
	rig, c, v := setup(t)
	path := filepath.Join(t.TempDir(), "paypal.jsonl")
	r, f := receiver(t, path, v)
	s := signer(c, rig.url("CERT-1"))
	const events, copies = 12, 4
	var wg sync.WaitGroup
	codes := make(chan int, events*copies)
	for i := range events {
		b := refundEvent(fmt.Sprint("WH-", i), "PAYMENT.CAPTURE.REFUNDED", "COMPLETED", i, now)
		for j := range copies {
			h := s.Sign(b, webhookID, fmt.Sprintf("T-%d-%d", i, j), now)
			wg.Go(func() { codes <- post(t, r, b, &h) })
		}
	}
	wg.Wait()
	close(codes)
	for code := range codes {
		if code != 200 {
			t.Errorf("a delivery answered %d", code)
		}
	}
	if st := r.Stats(); st.Accepted != events*copies || st.Added != events || st.Duplicates != events*(copies-1) {
		t.Fatalf("stats %+v", st)
	}
	all, err := f.All(context.Background())
	if err != nil || len(all) != events {
		t.Fatalf("kept %d events (%v), want %d", len(all), err, events)
	}
	b, _ := os.ReadFile(path)
	if n := bytes.Count(b, []byte("\n")); n != events {
		t.Fatalf("%d lines, want %d: a duplicate was written", n, events)
	}
}

func TestReceiverStoreFailure(t *testing.T) {
	rig, c, v := setup(t)
	r, f := receiver(t, filepath.Join(t.TempDir(), "paypal.jsonl"), v)
	f.Close() // the store is gone: PayPal must retry, so never a 2xx
	b := refundEvent("WH-1", "PAYMENT.CAPTURE.REFUNDED", "COMPLETED", 1, now)
	if code := post(t, r, b, ptr(signer(c, rig.url("CERT-1")).Sign(b, webhookID, "T-1", now))); code != http.StatusInternalServerError {
		t.Fatalf("store closed: %d, want 500", code)
	}
	if st := r.Stats(); st.StoreErrors != 1 || st.Accepted != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestReceiverSecondWriterLockedOut(t *testing.T) {
	rig, c, v := setup(t)
	path := filepath.Join(t.TempDir(), "paypal.jsonl")
	receiver(t, path, v)
	if _, err := OpenEvents(path, rig.verifier(c), true); !errors.As(err, new(*store.LockedError)) {
		t.Fatalf("second writer: %v, want a *LockedError", err)
	}
	if _, err := NewReceiver(ReceiverConfig{Verifier: &Verifier{}, Events: &EventsFile{}}); err == nil {
		t.Fatal("a receiver with no webhook id")
	}
}

func signer(c *wire.Certs, certURL string) *wire.Signer {
	return &wire.Signer{Key: c.Key, CertURL: certURL}
}
