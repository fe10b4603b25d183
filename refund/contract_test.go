package refund_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"

	stripe "github.com/stripe/stripe-go/v76"
	striperefund "github.com/stripe/stripe-go/v76/refund"

	"github.com/refundkit/refundkit/refund"
)

// The contract tests send refund's real requests to stripe-mock, Stripe's
// own mock generated from the API's OpenAPI spec: it refuses any parameter
// or value the real API would refuse. (It keeps no state: the simulator
// covers behaviour; this covers the shape of the requests.)

// stripeMock starts stripe-mock on a free loopback port and returns its URL.
// `make test` installs the pinned version and names it in STRIPE_MOCK_BIN.
func stripeMock(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("STRIPE_MOCK_BIN")
	if bin == "" {
		bin, _ = exec.LookPath("stripe-mock")
	}
	if _, err := os.Stat(bin); bin == "" || err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("stripe-mock is not installed: run `make tools` (CI must run the contract tests)")
		}
		t.Skip("stripe-mock not installed: `make test` installs it (`make tools`)")
	}
	cmd := exec.Command(bin, "-http-addr", "127.0.0.1:")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	addr := make(chan string, 1)
	go func() {
		listening := regexp.MustCompile(`Listening for HTTP at address: (\S+)`)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
				break
			}
		}
		io.Copy(io.Discard, out)
	}()
	select {
	case a := <-addr:
		return "http://" + a
	case <-time.After(60 * time.Second):
		t.Fatal("stripe-mock did not start listening within 60s")
	}
	return ""
}

func TestContractRequestsFitStripesAPISpec(t *testing.T) {
	url := stripeMock(t)
	c := refund.NewStripe(url, "sk_test_123", 2)
	ctx := context.Background()

	for _, it := range []refund.Item{
		{Batch: "b1", Item: "i1", Charge: "ch_1", Amount: 500, Reason: "requested_by_customer", Metadata: map[string]string{"ticket": "T-1"}},
		{Batch: "b1", Item: "i2", PaymentIntent: "pi_1"},
		{Batch: "b1", Item: "i3:part-2", Charge: "ch_1", Amount: 1, Reason: "fraudulent"},
	} {
		r, _, err := c.Create(ctx, &it, 3)
		if err != nil {
			t.Errorf("create refund for %+v: stripe-mock refused it: %v", it, err)
			continue
		}
		if r.ID == "" || r.Object != "refund" {
			t.Errorf("create refund for %+v: answer %+v is not a refund", it, r)
		}
	}
	for _, it := range []refund.Item{{Charge: "ch_1"}, {PaymentIntent: "pi_1"}} {
		if _, err := c.List(ctx, &it); err != nil {
			t.Errorf("list refunds of %+v: %v", it, err)
		}
	}
}

// TestContractMockRefusesWhatStripeRefuses shows the contract above can
// fail: a parameter outside the spec is refused by stripe-mock.
func TestContractMockRefusesWhatStripeRefuses(t *testing.T) {
	url := stripeMock(t)
	backend := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL: stripe.String(url), MaxNetworkRetries: stripe.Int64(0),
		LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull},
	})
	client := striperefund.Client{B: backend, Key: "sk_test_123"}
	params := &stripe.RefundParams{Charge: stripe.String("ch_1")}
	params.AddExtra("refund_everything_twice", "true")
	_, err := client.New(params)
	var se *stripe.Error
	if !errors.As(err, &se) || se.HTTPStatusCode != 400 {
		t.Fatalf("stripe-mock accepted an unknown parameter (err %v): the contract test would prove nothing", err)
	}
}
