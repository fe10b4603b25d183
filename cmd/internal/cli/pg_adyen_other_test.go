package cli

// Adyen with the PostgreSQL checkpoint, before any notification has come:
// an item another batch sent on the same payment (pending, or in doubt)
// holds the new one, as the file journal's does (adyen_other_items.txtar).

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/refundkit/refundkit/refund/sim/adyensim"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/refund/sim/stripesim/simtest"
)

func TestPGAdyenOtherBatchHoldsBeforeNotifications(t *testing.T) {
	_, dbURL := newPGDB(t, pgServer(t))
	payments := adyensim.GeneratePayments(3, 5)
	// No receiver: Adyen's notifications never come.
	s := simtest.Start(t, stripesim.Config{Seed: 4, Adyen: adyensim.Config{Payments: payments, APIKey: "pg-other-key", MerchantAccount: "Shop"}})
	env := map[string]string{"ADYEN_API_KEY": "pg-other-key", "ADYEN_MERCHANT_ACCOUNT": "Shop", "ADYEN_API_BASE": s.URL, "ADYEN_HMAC_KEY": pgAdyenHMAC}
	plan := func(batch string, ps ...adyensim.Payment) string {
		var b strings.Builder
		for _, p := range ps {
			fmt.Fprintf(&b, `{"batch":%q,"item":%q,"psp_reference":%q,"amount":100,"currency":"eur"}`+"\n", batch, "i-"+p.PSPReference, p.PSPReference)
		}
		return b.String()
	}
	run := func(in string, args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		args = append([]string{"--provider", "adyen", "--journal", dbURL, "--rate", "0", "--lease", "5s"}, args...)
		code := Refund(Env{Args: args, Stdin: strings.NewReader(in), Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }})
		return code, out.String(), errb.String()
	}
	creates := func() int64 { return s.Calls("POST /v71/payments/{paymentPspReference}/refunds") }

	if code, out, stderr := run(plan("A", payments[0], payments[1])); code != ExitOK || strings.Count(out, `"status":"pending"`) != 2 {
		t.Fatalf("batch A: exit %d\n%s%s", code, out, stderr)
	}
	// Batch B on the same payments: held, nothing sent.
	code, out, stderr := run(plan("B", payments[0], payments[1]))
	if code != ExitFailed || strings.Count(out, `"code":"refunded_by_other_batch"`) != 2 || !strings.Contains(out, `of batch \"A\" (pending, `) {
		t.Fatalf("batch B: exit %d, want 1 with both held\n%s%s", code, out, stderr)
	}
	if n := creates(); n != 2 {
		t.Fatalf("%d refund calls after batch B, want 2", n)
	}
	// An item in doubt (Adyen's 500 after it made the refund) holds one of
	// another batch on its payment too.
	if err := s.SetFaults(stripesim.Faults{ErrorAfterCommitShare: 1}); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := run(plan("C", payments[2])); code != ExitFailed || !strings.Contains(out, `"status":"in_doubt"`) {
		t.Fatalf("batch C: exit %d, want 1 in doubt\n%s%s", code, out, stderr)
	}
	if err := s.SetFaults(stripesim.Faults{}); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = run(plan("D", payments[2]))
	if code != ExitFailed || !strings.Contains(out, `"code":"refunded_by_other_batch"`) || !strings.Contains(out, `of batch \"C\" (in doubt, attempt 1 sent at `) {
		t.Fatalf("batch D: exit %d, want 1 held by C in doubt\n%s%s", code, out, stderr)
	}
	if n := creates(); n != 3 {
		t.Fatalf("%d refund calls after batch D, want 3", n)
	}
	// --allow-refunded-charges lifts the holds, as for Stripe's look-up.
	if code, out, stderr := run(plan("B", payments[0], payments[1]), "--allow-refunded-charges"); code != ExitOK || strings.Count(out, `"status":"pending"`) != 2 {
		t.Fatalf("batch B allowed: exit %d\n%s%s", code, out, stderr)
	}
	if n := creates(); n != 5 {
		t.Fatalf("%d refund calls after batch B was allowed, want 5", n)
	}
}
