package crashrig

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/sim/paypalsim"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
)

// paypalRefund makes a refund of capture through PayPal's API at sim,
// under the request id of batch, item and attempt, as refund would.
func makePayPalRefund(t *testing.T, sim *Sim, capture, batch, item string, attempt int) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, sim.URL()+"/v1/oauth2/token", strings.NewReader("grant_type=client_credentials"))
	req.SetBasicAuth("id", "secret")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	tok := strings.Split(strings.Split(string(b), `"access_token":"`)[1], `"`)[0]
	req, _ = http.NewRequest(http.MethodPost, sim.URL()+"/v2/payments/captures/"+capture+"/refund", strings.NewReader(`{"amount":{"value":"1.00","currency_code":"USD"}}`))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("PayPal-Request-Id", refund.IdempotencyKey(batch, item, attempt))
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("refund of %s: %d", capture, res.StatusCode)
	}
}

// TestCheckOnceOfPayPalCaptures: the one CheckOnce serves PayPal's
// refunds (read by their request id): two live refunds of an item, none,
// an item meant to be in doubt that the journal does not say so, and a
// FAILED refund beside another are each found; an item in doubt with one
// refund and a FAILED refund journaled failed are not.
func TestCheckOnceOfPayPalCaptures(t *testing.T) {
	var captures []paypalsim.Capture
	for _, id := range []string{"A", "B", "C", "D", "E", "F", "G"} {
		captures = append(captures, paypalsim.Capture{ID: "CAP" + id, Currency: "USD", Amount: 10000})
	}
	sim, err := StartSim(stripesim.Config{PayPal: paypalsim.Config{Captures: captures}})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	for _, c := range []struct {
		item    string
		attempt int
	}{{"a", 1}, {"b", 1}, {"b", 2}, {"d", 1}} {
		makePayPalRefund(t, sim, "CAP"+strings.ToUpper(c.item), "b", c.item, c.attempt)
	}
	// PENDING refunds that fail at once: f's alone, g's beside a second.
	if err := sim.SetFaults(stripesim.Faults{PayPalPendingShare: 1, PayPalFailedShare: 1, PayPalPendingFor: time.Nanosecond}); err != nil {
		t.Fatal(err)
	}
	makePayPalRefund(t, sim, "CAPF", "b", "f", 1)
	makePayPalRefund(t, sim, "CAPG", "b", "g", 1)
	if err := sim.SetFaults(stripesim.Faults{}); err != nil {
		t.Fatal(err)
	}
	makePayPalRefund(t, sim, "CAPG", "b", "g", 2)

	all := sim.BatchRefunds("b")
	rec := func(item string, typ journal.Type) *journal.Record {
		r := &journal.Record{V: journal.Version, Type: typ, Time: ts, Batch: "b", Item: item, Capture: "CAP" + strings.ToUpper(item),
			Attempt: 1, Key: refund.IdempotencyKey("b", item, 1)}
		if typ == journal.TypeRefunded {
			r.Amount, r.Refund, r.Status, r.Source = 100, "REFNONE", "succeeded", journal.SourceAPI
			if rs := all[item]; len(rs) > 0 {
				r.Refund = rs[0].ID
			}
		}
		if typ == journal.TypeFailed {
			r.Code, r.Final = "refund_failed", true
			if rs := all[item]; len(rs) > 0 {
				r.Refund = rs[0].ID
			}
		}
		return r
	}
	path := filepath.Join(t.TempDir(), "j.jsonl")
	write(t, path, []*journal.Record{
		rec("a", journal.TypeIntent), rec("a", journal.TypeRefunded),
		rec("b", journal.TypeIntent), rec("b", journal.TypeRefunded),
		rec("c", journal.TypeIntent),
		rec("d", journal.TypeIntent),
		rec("e", journal.TypeIntent), rec("e", journal.TypeRefunded),
		rec("f", journal.TypeIntent), rec("f", journal.TypeFailed),
		rec("g", journal.TypeIntent), rec("g", journal.TypeFailed),
	})
	want := []Want{
		{Item: "a", Capture: "CAPA", Amount: 100},
		{Item: "b", Capture: "CAPB", Amount: 100},
		{Item: "c", Capture: "CAPC"},
		{Item: "d", Capture: "CAPD", ForPerson: true},
		{Item: "e", Capture: "CAPE", ForPerson: true},
		{Item: "f", Capture: "CAPF"},
		{Item: "g", Capture: "CAPG"},
	}
	var p problems
	missing := sim.CheckOnce(&p, "b", want, path)
	got := strings.Join(p, "\n")
	if missing != 1 {
		t.Errorf("CheckOnce counted %d missing, want 1 (c)", missing)
	}
	for _, w := range []string{"item b: 2 live refunds", "item c: no refund", "item e: meant to be left for a person", "item g: 2 refunds"} {
		if !strings.Contains(got, w) {
			t.Errorf("no problem says %q:\n%s", w, got)
		}
	}
	for _, item := range []string{"item a:", "item d", "item f:"} {
		if strings.Contains(got, item) {
			t.Errorf("a problem with %s, which ended as meant:\n%s", item, got)
		}
	}
	if len(p) != 4 {
		t.Errorf("%d problems, want 4:\n%s", len(p), got)
	}
}

func TestParseKey(t *testing.T) {
	tests := []struct {
		key, batch, item, attempt string
		ok                        bool
	}{
		{refund.IdempotencyKey("b", "i1", 1), "b", "i1", "1", true},
		{refund.IdempotencyKey("day-2", "a:b:c", 12), "day-2", "a:b:c", "12", true},
		{"refundkit:cancel:re_1", "", "", "", false},
		{"other:b:i:1", "", "", "", false},
		{"refundkit:b:i:x", "", "", "", false},
		{"refundkit:b:i:0", "", "", "", false},
	}
	for _, tt := range tests {
		batch, item, attempt, ok := ParseKey(tt.key)
		if got, want := fmt.Sprint(batch, item, attempt, ok), fmt.Sprint(tt.batch, tt.item, tt.attempt, tt.ok); got != want {
			t.Errorf("ParseKey(%q) = %s, want %s", tt.key, got, want)
		}
	}
}
