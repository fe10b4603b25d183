package stripe

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/provider/events"
)

// receiver serves a Receiver over a new events file in dir.
func receiver(t *testing.T, path string, secrets ...string) (*Receiver, *EventsFile) {
	t.Helper()
	f, err := OpenEvents(path, secrets, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	r, err := NewReceiver(ReceiverConfig{Secrets: secrets, Events: f})
	if err != nil {
		t.Fatal(err)
	}
	return r, f
}

func post(t *testing.T, h http.Handler, body []byte, sig string) int {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, EventsPath, bytes.NewReader(body))
	if sig != "" {
		req.Header.Set(SignatureHeader, sig)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Code
}

func TestReceiverKeepsVerifiedEventsOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stripe.jsonl")
	const old, rolled = "whsec_old", "whsec_new"
	r, f := receiver(t, path, rolled, old)
	now := time.Now()
	pending := refundEvent("evt_1", "refund.created", "pending", 1, 500)
	done := refundEvent("evt_2", "refund.updated", "succeeded", 2, 500)

	// The later event first, then the first twice (a retry), one under
	// the secret being rolled out.
	for _, c := range []struct {
		body []byte
		sig  string
		want int
	}{
		{done, sign(done, rolled, now), 200},
		{pending, sign(pending, old, now), 200},
		{pending, sign(pending, old, now.Add(time.Second)), 200},
		{done, sign(done, "whsec_other", now), 401},                                              // forged
		{refundEvent("evt_2", "refund.updated", "failed", 2, 500), sign(done, rolled, now), 401}, // tampered
		{done, sign(done, rolled, now.Add(-Tolerance-time.Minute)), 401},                         // replayed
		{done, "", 401}, // unsigned
		{[]byte(`{"id":"evt_3"}`), sign([]byte(`{"id":"evt_3"}`), rolled, now), 400}, // signed, no event
	} {
		if got := post(t, r, c.body, c.sig); got != c.want {
			t.Errorf("POST %.60s: %d, want %d", c.body, got, c.want)
		}
	}
	st := r.Stats()
	if st.Accepted != 3 || st.Added != 2 || st.Duplicates != 1 || st.Rejected[RefusedSignature] != 4 || st.Rejected[RefusedBadRequest] != 1 {
		t.Fatalf("stats %+v", st)
	}
	if f.Fsyncs() == 0 {
		t.Fatal("events answered 200 with no fsync")
	}

	// A reader of the file (refund --notifications) verifies each line
	// again and tells the outcome, whatever the arrival order.
	rd, err := OpenEvents(path, []string{old, rolled}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	tell := &Telling{Events: rd}
	got, ok, err := tell.Told(context.Background(), "re_1")
	if err != nil || !ok || got.Status != refund.RefundSucceeded || got.Amount != 500 || got.Charge != "ch_1" || got.Metadata[refund.MetaItem] != "i1" {
		t.Fatalf("Told re_1: %+v %v %v", got, ok, err)
	}
	if _, ok, _ := (&Telling{Events: rd, Live: true}).Told(context.Background(), "re_1"); ok {
		t.Fatal("a live key took test-mode events")
	}
	if _, ok, _ := tell.Told(context.Background(), "re_other"); ok {
		t.Fatal("told of a refund no event names")
	}

	// A reader holding only the new secret cannot verify the lines signed
	// under the old one: refused with the line, not skipped.
	if _, err := OpenEvents(path, []string{rolled}, false); !errors.As(err, new(*events.CorruptError)) {
		t.Fatalf("reader without the old secret: %v, want a *CorruptError", err)
	}
}

func TestEventsFileRefusesAnEditedLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stripe.jsonl")
	r, f := receiver(t, path, "whsec_a")
	body := refundEvent("evt_1", "refund.updated", "failed", 1, 500)
	if code := post(t, r, body, sign(body, "whsec_a", time.Now())); code != 200 {
		t.Fatalf("POST: %d", code)
	}
	f.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Someone turns the failure into a success by hand.
	edited := strings.Replace(string(b), `\"status\":\"failed\"`, `\"status\":\"succeeded\"`, 1)
	if edited == string(b) {
		t.Fatal("the test's edit changed nothing")
	}
	if err := os.WriteFile(path, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	var corrupt *events.CorruptError
	if _, err := OpenEvents(path, []string{"whsec_a"}, false); !errors.As(err, &corrupt) || corrupt.Line != 1 {
		t.Fatalf("edited line: %v, want a *CorruptError at line 1", err)
	}
	if _, err := OpenEvents(path, []string{"whsec_a"}, true); !errors.As(err, &corrupt) {
		t.Fatalf("edited line, opened to write: %v, want a *CorruptError", err)
	}
}

func TestReceiverSecondWriterLockedOut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stripe.jsonl")
	receiver(t, path, "whsec_a")
	if _, err := OpenEvents(path, []string{"whsec_a"}, true); !errors.As(err, new(*events.LockedError)) {
		t.Fatalf("second writer: %v, want a *LockedError", err)
	}
}
