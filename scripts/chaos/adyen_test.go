package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/provider/adyen/notes"
	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
	"github.com/refundkit/refundkit/refund/sim/adyensim"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
)

// TestCheckAdyenFindsDuplicatesAndMissing: the Adyen rows' final check
// counts an item refunded twice (one a duplicate on its payment, made
// under attempt 2's key), an item with no refund, a wrong amount, and
// refunds whose notifications the receiver's file lacks, so a clean Adyen
// row means something.
func TestCheckAdyenFindsDuplicatesAndMissing(t *testing.T) {
	m := &matrix{opts: options{Log: testWriter{t}}, work: t.TempDir()}
	tl := &tally{Name: "test"}
	r, err := m.newRig(tl, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	r.prov = provider{Name: provAdyen, Notes: r.path("notes.jsonl")}
	f, err := notes.OpenFile(r.prov.Notes, [][]byte{hmacKey()}, true)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	payments := []adyensim.Payment{{PSPReference: "PAYA", Amount: 1000, Currency: "EUR"},
		{PSPReference: "PAYB", Amount: 1000, Currency: "EUR"}, {PSPReference: "PAYC", Amount: 1000, Currency: "EUR"}}
	r.serveConfig(stripesim.Config{Adyen: adyensim.Config{Payments: payments, APIKey: adyenAPIKey, MerchantAccount: adyenMerchant}})
	p := &plan{Batch: "b", index: map[string]int{}}
	for i, id := range []string{"a", "b", "c"} {
		psp := "PAY" + strings.ToUpper(id)
		p.Items = append(p.Items, plannedItem{Item: refund.Item{Batch: "b", Item: id, PSPReference: psp, Amount: 400, Currency: "eur"}, Want: 400})
		p.index[id] = i
	}
	post := func(item string, attempt int, amount int64) {
		body, _ := json.Marshal(map[string]any{"amount": wire.Amount{Currency: "EUR", Value: amount},
			"merchantAccount": adyenMerchant, "reference": wire.Reference("b", item, attempt)})
		req, _ := http.NewRequest(http.MethodPost, r.sim.URL()+"/v71/payments/PAY"+strings.ToUpper(item)+"/refunds", bytes.NewReader(body))
		req.Header.Set("X-API-Key", adyenAPIKey)
		req.Header.Set("Idempotency-Key", wire.Key("b", item, attempt))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("refund of %s: %d", item, res.StatusCode)
		}
	}
	post("a", 1, 400)
	post("a", 2, 400)
	post("c", 1, 399)
	j := r.path("j.jsonl")
	if err := os.WriteFile(j, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r.checkAdyen(p, j, nil)
	if tl.Dup != 1 || tl.Missing != 1 || tl.Lost != 3 {
		t.Errorf("checkAdyen counted %d duplicates, %d missing, %d lost; want 1, 1, 3", tl.Dup, tl.Missing, tl.Lost)
	}
	all := strings.Join(tl.Problems, "\n")
	for _, want := range []string{"item a: 2 refunds", "is 399 EUR", "a key was burned", "no journaled intent"} {
		if !strings.Contains(all, want) {
			t.Errorf("no problem mentions %q: %q", want, tl.Problems)
		}
	}
}
