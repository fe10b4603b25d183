package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund/provider/adyen/notes"
	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

func item(event, psp string) wire.Item {
	it := wire.Item{
		Amount:              wire.Amount{Currency: "EUR", Value: 1250},
		EventCode:           event,
		MerchantAccountCode: "RefundkitTest",
		MerchantReference:   "refundkit:b:item-1:1",
		OriginalReference:   "PAY1",
		PSPReference:        psp,
		Success:             "true",
	}
	wire.SetSignature(&it, testKey)
	return it
}

func body(t *testing.T, items ...wire.Item) string {
	t.Helper()
	req := wire.Request{Live: "false"}
	req.NotificationItems = make([]struct {
		NotificationRequestItem wire.Item `json:"NotificationRequestItem"`
	}, len(items))
	for i, it := range items {
		req.NotificationItems[i].NotificationRequestItem = it
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type rig struct {
	t              *testing.T
	h              *Handler
	srv            *httptest.Server
	out, othersOut string
}

func newRig(t *testing.T, mod func(*Config)) *rig {
	t.Helper()
	dir := t.TempDir()
	r := &rig{t: t, out: filepath.Join(dir, "notes.jsonl"), othersOut: filepath.Join(dir, "notes.others.jsonl")}
	refunds, err := notes.OpenFile(r.out, [][]byte{testKey}, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { refunds.Close() })
	others, err := notes.OpenFile(r.othersOut, [][]byte{testKey}, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { others.Close() })
	cfg := Config{Keys: [][]byte{testKey}, Refunds: refunds, Others: others, Logf: func(f string, a ...any) {}}
	if mod != nil {
		mod(&cfg)
	}
	r.h, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.srv = httptest.NewServer(r.h)
	t.Cleanup(r.srv.Close)
	return r
}

// post sends body to path and returns the status and answer.
func (r *rig) post(path, body string, auth ...string) (int, string) {
	r.t.Helper()
	req, err := http.NewRequest(http.MethodPost, r.srv.URL+path, strings.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if len(auth) == 2 {
		req.SetBasicAuth(auth[0], auth[1])
	}
	resp, err := r.srv.Client().Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (r *rig) lines(path string) int {
	r.t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		r.t.Fatal(err)
	}
	return bytes.Count(b, []byte("\n"))
}

func TestAcceptedOnceDurableAndRetryKeptOnce(t *testing.T) {
	r := newRig(t, func(c *Config) {
		c.Now = func() time.Time { return time.Date(2026, 11, 2, 9, 0, 0, 0, time.FixedZone("x", 3600)) }
	})
	b := body(t, item(wire.EventRefund, "RF1"), item(wire.EventRefundFailed, "RF2"))
	for range 3 { // Adyen's retries
		status, answer := r.post(DefaultPath, b)
		if status != 200 || answer != wire.Accepted {
			t.Fatalf("%d %q", status, answer)
		}
	}
	if n := r.lines(r.out); n != 2 {
		t.Fatalf("%d lines, want 2", n)
	}
	rd, err := notes.OpenFile(r.out, [][]byte{testKey}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	got, err := rd.ForRefund(context.Background(), "RF1")
	if err != nil || len(got) != 1 {
		t.Fatalf("%v, %v", got, err)
	}
	if n := got[0]; n.V != wire.Version || n.Live || !n.Received.Equal(time.Date(2026, 11, 2, 8, 0, 0, 0, time.UTC)) || n.Received.Location() != time.UTC {
		t.Errorf("kept %+v", n)
	}
	st := r.h.Stats()
	if st.Accepted != 3 || st.Added != 2 || st.Duplicates != 4 || st.Others != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestRefusedRequestsWriteNothing: every refusal leaves both files byte
// for byte as they were, even when the bad item comes after a good one.
func TestRefusedRequestsWriteNothing(t *testing.T) {
	forged := item(wire.EventRefund, "RF9")
	forged.AdditionalData[wire.SignatureField] = wire.Sign(&forged, []byte("an attacker's key"))
	altered := item(wire.EventRefund, "RF8")
	altered.Success = "false" // signed as a success
	unsigned := item(wire.EventRefund, "RF7")
	delete(unsigned.AdditionalData, wire.SignatureField)
	notB64 := item(wire.EventRefund, "RF6")
	notB64.AdditionalData[wire.SignatureField] = "!!!"
	foreign := item(wire.EventRefund, "RF5")
	foreign.MerchantAccountCode = "SomeoneElse"
	wire.SetSignature(&foreign, testKey)
	good := item(wire.EventRefund, "RF1")
	auth := item(wire.EventAuthorisation, "PAY2")

	r := newRig(t, func(c *Config) { c.MerchantAccount = "RefundkitTest"; c.MaxBody = 4096 })
	// Something kept already, in both files, to compare against.
	if status, _ := r.post(DefaultPath, body(t, item(wire.EventRefund, "RF0"), item(wire.EventCapture, "PAY0"))); status != 200 {
		t.Fatal(status)
	}
	before, _ := os.ReadFile(r.out)
	beforeOthers, _ := os.ReadFile(r.othersOut)

	for _, tc := range []struct {
		name   string
		body   string
		status int
		reason string
	}{
		{"forged", body(t, forged), 401, ReasonHMAC},
		{"good then forged", body(t, good, auth, forged), 401, ReasonHMAC},
		{"altered", body(t, altered), 401, ReasonHMAC},
		{"missing signature", body(t, good, unsigned), 401, ReasonHMAC},
		{"signature not base64", body(t, notB64), 401, ReasonHMAC},
		{"another merchant account", body(t, good, foreign), 422, ReasonMerchant},
		{"broken JSON", body(t, good)[:50], 400, ReasonBadRequest},
		{"no items", `{"live":"false","notificationItems":[]}`, 400, ReasonBadRequest},
		{"not a request", `[1,2,3]`, 400, ReasonBadRequest},
		{"trailing garbage", body(t, good) + "x", 400, ReasonBadRequest},
		{"live neither true nor false", strings.Replace(body(t, good), `"live":"false"`, `"live":"yes"`, 1), 400, ReasonBadRequest},
		{"oversized", body(t, good) + strings.Repeat(" ", 4096), 413, ReasonTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			was := r.h.Stats().Rejected[tc.reason]
			status, _ := r.post(DefaultPath, tc.body)
			if status != tc.status {
				t.Errorf("status %d, want %d", status, tc.status)
			}
			if got := r.h.Stats().Rejected[tc.reason]; got != was+1 {
				t.Errorf("rejected[%s] %d, want %d", tc.reason, got, was+1)
			}
			if after, _ := os.ReadFile(r.out); !bytes.Equal(after, before) {
				t.Errorf("the notifications file changed:\n%s", after)
			}
			if after, _ := os.ReadFile(r.othersOut); !bytes.Equal(after, beforeOthers) {
				t.Errorf("the others file changed:\n%s", after)
			}
		})
	}
	if st := r.h.Stats(); st.Accepted != 1 || st.Added != 1 || st.Others != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestMethodPathAndBasicAuth(t *testing.T) {
	r := newRig(t, func(c *Config) { c.Username, c.Password = "adyen", "hunter2"; c.Path = "/hooks/adyen" })
	b := body(t, item(wire.EventRefund, "RF1"))
	if status, _ := r.post("/hooks/adyen", b); status != 401 {
		t.Errorf("no auth: %d", status)
	}
	if status, _ := r.post("/hooks/adyen", b, "adyen", "hunter3"); status != 401 {
		t.Errorf("wrong password: %d", status)
	}
	if status, _ := r.post("/hooks/adyen", b, "adyem", "hunter2"); status != 401 {
		t.Errorf("wrong user: %d", status)
	}
	if status, _ := r.post(DefaultPath, b, "adyen", "hunter2"); status != 404 {
		t.Errorf("another path: %d", status)
	}
	resp, err := r.srv.Client().Get(r.srv.URL + "/hooks/adyen")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" {
		t.Errorf("GET: %d Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
	if n := r.lines(r.out); n != 0 {
		t.Fatalf("%d lines before the right credentials", n)
	}
	if status, answer := r.post("/hooks/adyen", b, "adyen", "hunter2"); status != 200 || answer != wire.Accepted {
		t.Errorf("right credentials: %d %q", status, answer)
	}
	if n := r.lines(r.out); n != 1 {
		t.Fatalf("%d lines", n)
	}
	if st := r.h.Stats(); st.Rejected[ReasonAuth] != 3 || st.Rejected[ReasonMethod] != 1 || st.NotFound != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestOtherEventsAreKeptApart(t *testing.T) {
	r := newRig(t, nil)
	b := body(t, item(wire.EventAuthorisation, "PAY1"), item(wire.EventRefund, "RF1"), item("SOMETHING_NEW", "X1"))
	for range 2 {
		if status, answer := r.post(DefaultPath, b); status != 200 || answer != wire.Accepted {
			t.Fatalf("%d %q", status, answer)
		}
	}
	if n := r.lines(r.out); n != 1 {
		t.Errorf("refund events: %d lines", n)
	}
	if n := r.lines(r.othersOut); n != 2 {
		t.Errorf("others: %d lines", n)
	}
	if st := r.h.Stats(); st.Others != 2 || st.OthersDuplicates != 2 || st.Added != 1 || st.Duplicates != 1 {
		t.Errorf("stats %+v", st)
	}
}

type failingStore struct{ notes.Store }

func (failingStore) Add(context.Context, wire.Notification) (bool, error) {
	return false, errors.New("disk full")
}

func TestStoreErrorIs500(t *testing.T) {
	var logged []string
	r := newRig(t, func(c *Config) {
		c.Refunds = failingStore{c.Refunds}
		c.Logf = func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) }
	})
	status, answer := r.post(DefaultPath, body(t, item(wire.EventRefund, "RF1")))
	if status != 500 || strings.Contains(answer, wire.Accepted) {
		t.Fatalf("%d %q", status, answer)
	}
	if st := r.h.Stats(); st.StoreErrors != 1 || st.Accepted != 0 {
		t.Errorf("stats %+v", st)
	}
	if len(logged) != 1 || !strings.Contains(logged[0], `answered 500, not [accepted] (Adyen retries): storing REFUND pspReference "RF1": disk full`) {
		t.Errorf("logged %q", logged)
	}
}

func TestNewRefusesHalfAConfig(t *testing.T) {
	s := failingStore{}
	for _, c := range []Config{
		{Refunds: s, Others: s},
		{Keys: [][]byte{testKey}, Refunds: s},
		{Keys: [][]byte{testKey}, Refunds: s, Others: s, Username: "u"},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("%+v: accepted", c)
		}
	}
}

// TestKeyRotation: while a key is rotated both keys verify, at the door
// and when the kept notifications are read again; a reader that holds
// only the new key refuses what the old one signed, and a third key, or an
// empty one, verifies nothing.
func TestKeyRotation(t *testing.T) {
	newKey := []byte("fedcba9876543210fedcba9876543210")
	dir := t.TempDir()
	out := filepath.Join(dir, "notes.jsonl")
	both := [][]byte{newKey, testKey}
	store, err := notes.OpenFile(out, both, true)
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Config{Keys: both, Refunds: store, Others: store})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	post := func(it wire.Item) int {
		res, err := http.Post(srv.URL+DefaultPath, "application/json", strings.NewReader(body(t, it)))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	underOld := item(wire.EventRefund, "RF-OLD") // item signs under testKey
	underNew := item(wire.EventRefund, "RF-NEW")
	wire.SetSignature(&underNew, newKey)
	underOther := item(wire.EventRefund, "RF-OTHER")
	wire.SetSignature(&underOther, []byte("a third key, nobody's"))
	underEmpty := item(wire.EventRefund, "RF-EMPTY")
	wire.SetSignature(&underEmpty, nil)
	for _, c := range []struct {
		it     wire.Item
		status int
	}{{underOld, 200}, {underNew, 200}, {underOther, 401}, {underEmpty, 401}} {
		if got := post(c.it); got != c.status {
			t.Errorf("%s: %d, want %d", c.it.PSPReference, got, c.status)
		}
	}
	store.Close()

	rd, err := notes.OpenFile(out, both, false)
	if err != nil {
		t.Fatal(err)
	}
	all, err := rd.All(context.Background())
	rd.Close()
	if err != nil || len(all) != 2 {
		t.Fatalf("read under both keys: %d notifications, %v; want 2", len(all), err)
	}
	if _, err := notes.OpenFile(out, [][]byte{newKey}, false); err == nil {
		t.Fatal("a reader with only the new key took a notification signed under the old one")
	} else if ce := (*notes.CorruptError)(nil); !errors.As(err, &ce) {
		t.Fatalf("a reader with only the new key: %v, want a *notes.CorruptError", err)
	}
	if _, err := New(Config{Keys: [][]byte{nil}, Refunds: store, Others: store}); err == nil {
		t.Error("New took an empty key")
	}
}
