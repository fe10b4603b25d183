package cli

// Adyen with the PostgreSQL checkpoint: the receivers write the
// notifications into the checkpoint's database (its own table), and
// workers on any host settle from there with no --notifications flag.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund/provider/adyen/notes"
	"github.com/refundkit/refundkit/refund/provider/adyen/webhook"
	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
	"github.com/refundkit/refundkit/refund/sim/adyensim"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/refund/sim/stripesim/simtest"
)

const pgAdyenHMAC = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"

// TestPGAdyenSettlesFromTheCheckpoint: two receivers behind one URL (as
// behind a load balancer, every notification sent to both: Adyen's
// retries land anywhere) keep each notification once in the checkpoint's
// database; three workers on the checkpoint leave every refund pending,
// then settle all of them from that table, sending nothing more; audit of
// the checkpoint with --provider adyen is clean.
func TestPGAdyenSettlesFromTheCheckpoint(t *testing.T) {
	_, dbURL := newPGDB(t, pgServer(t))
	key, err := wire.ParseHMACKey(pgAdyenHMAC)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var handlers []*webhook.Handler
	for range 2 {
		refunds, err := notes.OpenPG(ctx, dbURL, [][]byte{key})
		if err != nil {
			t.Fatal(err)
		}
		others, err := notes.OpenPGOthers(ctx, dbURL, [][]byte{key})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { refunds.Close(); others.Close() })
		h, err := webhook.New(webhook.Config{Keys: [][]byte{key}, Refunds: refunds, Others: others})
		if err != nil {
			t.Fatal(err)
		}
		handlers = append(handlers, h)
	}
	// One URL that hands every notification to both receivers.
	both := httptest.NewServer(teeHandler(handlers...))
	t.Cleanup(both.Close)

	payments := adyensim.GeneratePayments(30, 9)
	sim := simtest.Start(t, stripesim.Config{Seed: 4, Adyen: adyensim.Config{Payments: payments, APIKey: "pg-adyen-key",
		MerchantAccount: "Shop", NotifyURL: both.URL + webhook.DefaultPath, HMACKey: key}})
	var plan strings.Builder
	for _, p := range payments {
		fmt.Fprintf(&plan, `{"batch":"pgad","item":%q,"psp_reference":%q,"amount":%d,"currency":"eur"}`+"\n", "i-"+p.PSPReference, p.PSPReference, p.Amount)
	}
	env := map[string]string{"ADYEN_API_KEY": "pg-adyen-key", "ADYEN_MERCHANT_ACCOUNT": "Shop", "ADYEN_API_BASE": sim.URL, "ADYEN_HMAC_KEY": pgAdyenHMAC}
	run := func(cmd func(Env) int, args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := cmd(Env{Args: args, Stdin: strings.NewReader(plan.String()), Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }})
		return code, out.String(), errb.String()
	}
	workers := func() (pending, refunded int) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for w := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				code, out, stderr := run(Refund, "--provider", "adyen", "--journal", dbURL, "--worker", fmt.Sprintf("w%d", w), "--rate", "0", "--lease", "5s")
				if code != ExitOK {
					t.Errorf("worker %d exit %d: %s", w, code, stderr)
				}
				mu.Lock()
				pending += strings.Count(out, `"status":"pending"`)
				refunded += strings.Count(out, `"status":"refunded"`)
				mu.Unlock()
			}()
		}
		wg.Wait()
		return pending, refunded
	}
	// Notifications come in while the workers run: a worker settles any
	// pending item it claims, its own or another's.
	if p, r := workers(); p+r < len(payments) {
		t.Fatalf("first runs: %d pending and %d refunded, want %d in all", p, r, len(payments))
	}
	if n := sim.Calls("POST /v71/payments/{paymentPspReference}/refunds"); n != int64(len(payments)) {
		t.Fatalf("%d refund calls, want %d", n, len(payments))
	}
	flushCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := sim.Adyen().Flush(flushCtx); err != nil {
		t.Fatal(err)
	}
	kept := 0
	for _, h := range handlers {
		kept += int(h.Stats().Added)
	}
	if kept != len(payments) {
		t.Fatalf("the two receivers kept %d notifications, want %d (each once)", kept, len(payments))
	}
	creates := sim.Calls("POST /v71/payments/{paymentPspReference}/refunds")
	if p, _ := workers(); p != 0 {
		t.Fatalf("settling runs: %d still pending, with every notification kept", p)
	}
	if d := sim.Calls("POST /v71/payments/{paymentPspReference}/refunds") - creates; d != 0 {
		t.Fatalf("the settling runs sent %d refund calls", d)
	}
	code, out, stderr := run(Audit, "--provider", "adyen", dbURL)
	if code != ExitOK || !strings.Contains(stderr, fmt.Sprintf("%d items: %[1]d refunded", len(payments))) {
		t.Fatalf("audit exit %d: %s%s", code, out, stderr)
	}
}

// teeHandler hands each request to every handler in turn and answers as
// the last did, [accepted] only when every one accepted.
func teeHandler(hs ...*webhook.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var last *httptest.ResponseRecorder
		for _, h := range hs {
			req := r.Clone(r.Context())
			req.Body = io.NopCloser(bytes.NewReader(body))
			last = httptest.NewRecorder()
			h.ServeHTTP(last, req)
			if strings.TrimSpace(last.Body.String()) != wire.Accepted {
				break
			}
		}
		w.WriteHeader(last.Code)
		w.Write(last.Body.Bytes())
	})
}
