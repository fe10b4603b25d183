package stripesim

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v76"
	chargeapi "github.com/stripe/stripe-go/v76/charge"
	refundapi "github.com/stripe/stripe-go/v76/refund"
)

const testKey = "sk_test_simulator"

// start serves a simulator for one test with the given charges.
func start(t testing.TB, cfg Config) *Server {
	t.Helper()
	s, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// clientOpts tune the stripe-go client a test talks through.
type clientOpts struct {
	key       string
	retries   int64
	keepAlive bool
}

// clients are stripe-go's own refund and charge clients on the simulator.
type clients struct {
	refunds refundapi.Client
	charges chargeapi.Client
}

func newClients(s *Server, o clientOpts) clients {
	if o.key == "" {
		o.key = testKey
	}
	// Without keep-alive every request has its own connection, so a dropped
	// connection reaches the caller: Go's transport silently resends a
	// request with an Idempotency-Key when a reused connection dies.
	tr := &http.Transport{DisableKeepAlives: !o.keepAlive, MaxIdleConnsPerHost: 64}
	b := stripe.GetBackendWithConfig(stripe.APIBackend, &stripe.BackendConfig{
		URL:               stripe.String(s.URL()),
		HTTPClient:        &http.Client{Transport: tr, Timeout: time.Minute},
		MaxNetworkRetries: stripe.Int64(o.retries),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	})
	if bi, ok := b.(*stripe.BackendImplementation); ok {
		bi.SetNetworkRetriesSleep(false) // retries at once: tests stay fast
	}
	return clients{refunds: refundapi.Client{B: b, Key: o.key}, charges: chargeapi.Client{B: b, Key: o.key}}
}

func oneCharge(amount int64, refunds ...SeedRefund) Config {
	return Config{Charges: []Charge{{ID: "ch_a", PaymentIntent: "pi_a", Currency: "usd", Amount: amount, Refunds: refunds}}}
}

func refundParams(chargeID string, amount int64, key string) *stripe.RefundParams {
	p := &stripe.RefundParams{Charge: stripe.String(chargeID)}
	if amount > 0 {
		p.Amount = stripe.Int64(amount)
	}
	if key != "" {
		p.SetIdempotencyKey(key)
	}
	return p
}

// stripeErr unwraps a *stripe.Error or fails the test.
func stripeErr(t *testing.T, err error) *stripe.Error {
	t.Helper()
	var se *stripe.Error
	if !errors.As(err, &se) {
		t.Fatalf("want a Stripe error, got %v", err)
	}
	return se
}

func replayed(r *stripe.APIResponse) bool {
	return r != nil && r.Header.Get("Idempotent-Replayed") == "true"
}

func TestCreateRefund(t *testing.T) {
	s := start(t, oneCharge(1000))
	c := newClients(s, clientOpts{})

	p := refundParams("ch_a", 300, "k1")
	p.Reason = stripe.String("requested_by_customer")
	p.AddMetadata("refundkit_item", "i1")
	re, err := c.refunds.New(p)
	if err != nil {
		t.Fatal(err)
	}
	if re.Amount != 300 || re.Status != stripe.RefundStatusSucceeded || re.Charge.ID != "ch_a" ||
		re.PaymentIntent.ID != "pi_a" || re.Currency != "usd" || re.Reason != "requested_by_customer" ||
		re.Metadata["refundkit_item"] != "i1" || !strings.HasPrefix(re.ID, "re_") {
		t.Errorf("refund = %+v", re)
	}
	if replayed(re.LastResponse) || re.LastResponse.IdempotencyKey != "k1" {
		t.Errorf("first answer: replayed %v, key %q", replayed(re.LastResponse), re.LastResponse.IdempotencyKey)
	}

	// No amount: the rest of the charge.
	rest, err := c.refunds.New(refundParams("ch_a", 0, "k2"))
	if err != nil {
		t.Fatal(err)
	}
	if rest.Amount != 700 {
		t.Errorf("refund without amount = %d, want the remaining 700", rest.Amount)
	}
	ch, err := c.charges.Get("ch_a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if ch.AmountRefunded != 1000 || !ch.Refunded || ch.Amount != 1000 || ch.PaymentIntent.ID != "pi_a" || ch.Currency != "usd" {
		t.Errorf("charge = %+v", ch)
	}
	got, err := c.refunds.Get(re.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != re.ID || got.Amount != 300 || got.Metadata["refundkit_item"] != "i1" {
		t.Errorf("get = %+v", got)
	}
	gp := &stripe.RefundParams{}
	gp.AddExpand("charge")
	exp, err := c.refunds.Get(re.ID, gp)
	if err != nil {
		t.Fatal(err)
	}
	if exp.Charge.AmountRefunded != 1000 {
		t.Errorf("expanded charge = %+v", exp.Charge)
	}

	byIntent, err := c.refunds.New(&stripe.RefundParams{PaymentIntent: stripe.String("pi_a")})
	if se := stripeErr(t, err); se.Code != stripe.ErrorCodeChargeAlreadyRefunded || byIntent != nil && byIntent.ID != "" {
		t.Errorf("refund of a refunded payment intent: %v", err)
	}
	if st := s.Stats(); st.RefundsCreated != 2 || st.Requests["POST /v1/refunds"] != 3 || st.Requests["GET /v1/charges/{id}"] != 1 {
		t.Errorf("stats = %+v", st)
	}
}

func TestCreateValidation(t *testing.T) {
	full := SeedRefund{Amount: 500}
	cfg := Config{Charges: []Charge{
		{ID: "ch_open", PaymentIntent: "pi_open", Amount: 1000},
		{ID: "ch_done", Amount: 500, Refunds: []SeedRefund{full}},
	}}
	manyKeys := map[string]string{}
	for i := range 51 {
		manyKeys[fmt.Sprintf("k%d", i)] = "v"
	}
	tests := []struct {
		name   string
		params *stripe.RefundParams
		status int
		typ    stripe.ErrorType
		code   stripe.ErrorCode
		param  string
	}{
		{"unknown charge", &stripe.RefundParams{Charge: stripe.String("ch_nope")}, 404, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeResourceMissing, "charge"},
		{"unknown payment intent", &stripe.RefundParams{PaymentIntent: stripe.String("pi_nope")}, 404, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeResourceMissing, "payment_intent"},
		{"neither charge nor intent", &stripe.RefundParams{Amount: stripe.Int64(5)}, 400, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeParameterMissing, "charge"},
		{"both charge and intent", &stripe.RefundParams{Charge: stripe.String("ch_open"), PaymentIntent: stripe.String("pi_open")}, 400, stripe.ErrorTypeInvalidRequest, "", "payment_intent"},
		{"empty charge", &stripe.RefundParams{Charge: stripe.String("")}, 400, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeParameterInvalidEmpty, "charge"},
		{"already refunded", &stripe.RefundParams{Charge: stripe.String("ch_done")}, 400, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeChargeAlreadyRefunded, ""},
		{"amount too large", &stripe.RefundParams{Charge: stripe.String("ch_open"), Amount: stripe.Int64(1001)}, 400, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeAmountTooLarge, "amount"},
		{"amount zero", &stripe.RefundParams{Charge: stripe.String("ch_open"), Amount: stripe.Int64(0)}, 400, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeParameterInvalidInteger, "amount"},
		{"amount negative", &stripe.RefundParams{Charge: stripe.String("ch_open"), Amount: stripe.Int64(-5)}, 400, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeParameterInvalidInteger, "amount"},
		{"empty reason", &stripe.RefundParams{Charge: stripe.String("ch_open"), Reason: stripe.String("")}, 400, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeParameterInvalidEmpty, "reason"},
		{"unknown reason", &stripe.RefundParams{Charge: stripe.String("ch_open"), Reason: stripe.String("changed_mind")}, 400, stripe.ErrorTypeInvalidRequest, "", "reason"},
		{"too much metadata", &stripe.RefundParams{Charge: stripe.String("ch_open"), Metadata: manyKeys}, 400, stripe.ErrorTypeInvalidRequest, "", "metadata"},
		{"unexpandable field", func() *stripe.RefundParams {
			p := &stripe.RefundParams{Charge: stripe.String("ch_open")}
			p.AddExpand("balance_transaction")
			return p
		}(), 400, stripe.ErrorTypeInvalidRequest, "", "expand"},
		{"metadata not an object", func() *stripe.RefundParams {
			p := &stripe.RefundParams{Charge: stripe.String("ch_open")}
			p.AddExtra("metadata", "x")
			return p
		}(), 400, stripe.ErrorTypeInvalidRequest, "", "metadata"},
		{"unknown parameter", func() *stripe.RefundParams {
			p := &stripe.RefundParams{Charge: stripe.String("ch_open")}
			p.AddExtra("amout", "5")
			return p
		}(), 400, stripe.ErrorTypeInvalidRequest, stripe.ErrorCodeParameterUnknown, "amout"},
	}
	s := start(t, cfg)
	c := newClients(s, clientOpts{keepAlive: true})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			re, err := c.refunds.New(tt.params)
			if err == nil {
				t.Fatalf("created %s, want an error", re.ID)
			}
			se := stripeErr(t, err)
			if se.HTTPStatusCode != tt.status || se.Type != tt.typ || se.Code != tt.code || se.Param != tt.param || se.Msg == "" {
				t.Errorf("got %d %s %s param %q (%s), want %d %s %s param %q",
					se.HTTPStatusCode, se.Type, se.Code, se.Param, se.Msg, tt.status, tt.typ, tt.code, tt.param)
			}
		})
	}
	if st, _ := s.Charge("ch_open"); st.AmountRefunded != 0 {
		t.Errorf("refused requests refunded %d", st.AmountRefunded)
	}
	if n := len(s.Refunds()); n != 1 {
		t.Errorf("%d refunds, want only the seeded one", n)
	}
}

func TestExpandCharge(t *testing.T) {
	s := start(t, oneCharge(1000))
	c := newClients(s, clientOpts{keepAlive: true})
	p := refundParams("ch_a", 250, "k")
	p.AddExpand("charge")
	re, err := c.refunds.New(p)
	if err != nil {
		t.Fatal(err)
	}
	if re.Charge.ID != "ch_a" || re.Charge.AmountRefunded != 250 || re.Charge.Amount != 1000 {
		t.Errorf("expanded charge on create = %+v", re.Charge)
	}
	lp := &stripe.RefundListParams{Charge: stripe.String("ch_a")}
	lp.AddExpand("data.charge")
	it := c.refunds.List(lp)
	if !it.Next() || it.Refund().Charge.AmountRefunded != 250 {
		t.Errorf("expanded charge in list: %+v, %v", it.Refund(), it.Err())
	}
	plain := c.refunds.List(&stripe.RefundListParams{Charge: stripe.String("ch_a")})
	if !plain.Next() || plain.Refund().Charge.ID != "ch_a" || plain.Refund().Charge.Amount != 0 {
		t.Errorf("unexpanded charge in list: %+v", plain.Refund().Charge)
	}
}

func TestAuth(t *testing.T) {
	s := start(t, oneCharge(1000))
	tests := []struct {
		name, header string
		status       int
	}{
		{"no header", "", 401},
		{"live key", "Bearer sk_live_abcdef", 401},
		{"publishable key", "Bearer pk_test_abcdef", 401},
		{"bare prefix", "Bearer sk_test_", 401},
		{"not bearer", "Token sk_test_abcdef", 401},
		{"secret test key", "Bearer sk_test_abcdef", 200},
		{"restricted test key", "Bearer rk_test_abcdef", 200},
		{"basic auth as curl -u sends it", "Basic c2tfdGVzdF9hYmNkZWY6", 200}, // sk_test_abcdef:
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", s.URL()+"/v1/charges/ch_a", nil)
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body := readAll(t, resp)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, body)
			}
			if strings.Contains(body, "abcdef") {
				t.Errorf("answer echoes the key: %s", body)
			}
		})
	}

	// Through stripe-go: a live key gets a 401 Stripe error.
	c := newClients(s, clientOpts{key: "sk_live_secret123"})
	_, err := c.refunds.New(refundParams("ch_a", 1, "k"))
	if se := stripeErr(t, err); se.HTTPStatusCode != 401 || strings.Contains(se.Msg, "secret123") {
		t.Errorf("live key: %d %q", se.HTTPStatusCode, se.Msg)
	}
	if st, _ := s.Charge("ch_a"); st.AmountRefunded != 0 {
		t.Error("an unauthorized request refunded")
	}
}

func TestReplayWithHeader(t *testing.T) {
	s := start(t, oneCharge(1000))
	c := newClients(s, clientOpts{keepAlive: true})
	first, err := c.refunds.New(refundParams("ch_a", 100, "key-1"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.refunds.New(refundParams("ch_a", 100, "key-1"))
	if err != nil {
		t.Fatal(err)
	}
	if again.ID != first.ID || !replayed(again.LastResponse) || replayed(first.LastResponse) {
		t.Errorf("second answer %s replayed=%v, want %s replayed", again.ID, replayed(again.LastResponse), first.ID)
	}
	if string(again.LastResponse.RawJSON) != string(first.LastResponse.RawJSON) || again.LastResponse.RequestID != first.LastResponse.RequestID {
		t.Error("replay differs from the first answer")
	}
	// The key is scoped to the API key: another account's key is new.
	other := newClients(s, clientOpts{key: "sk_test_other", keepAlive: true})
	third, err := other.refunds.New(refundParams("ch_a", 100, "key-1"))
	if err != nil {
		t.Fatal(err)
	}
	if third.ID == first.ID || replayed(third.LastResponse) {
		t.Errorf("same idempotency key under another API key replayed %s", third.ID)
	}
	if st := s.Stats(); st.RefundsCreated != 2 || st.Replayed != 1 {
		t.Errorf("stats = %+v", st)
	}
}

func TestKeyMismatch(t *testing.T) {
	s := start(t, oneCharge(1000))
	c := newClients(s, clientOpts{keepAlive: true})
	first, err := c.refunds.New(refundParams("ch_a", 100, "k"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		call func() error
		msg  string
	}{
		{"other amount", func() error {
			_, err := c.refunds.New(refundParams("ch_a", 200, "k"))
			return err
		}, "can only be used with the same parameters they were first used with"},
		{"extra metadata", func() error {
			p := refundParams("ch_a", 100, "k")
			p.AddMetadata("x", "y")
			_, err := c.refunds.New(p)
			return err
		}, "can only be used with the same parameters they were first used with"},
		{"other endpoint", func() error {
			p := &stripe.RefundCancelParams{}
			p.SetIdempotencyKey("k")
			_, err := c.refunds.Cancel(first.ID, p)
			return err
		}, "can only be used for the same endpoint they were first used for"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			se := stripeErr(t, tt.call())
			var ie *stripe.IdempotencyError
			if se.HTTPStatusCode != 400 || se.Type != stripe.ErrorTypeIdempotency || !errors.As(se.Err, &ie) || !strings.Contains(se.Msg, tt.msg) {
				t.Errorf("got %d %s %q", se.HTTPStatusCode, se.Type, se.Msg)
			}
		})
	}
	// The mismatches changed nothing: the key still replays the first answer.
	again, err := c.refunds.New(refundParams("ch_a", 100, "k"))
	if err != nil || again.ID != first.ID || !replayed(again.LastResponse) {
		t.Errorf("after mismatches: %v, %v", again, err)
	}
	if n := len(s.Refunds()); n != 1 {
		t.Errorf("%d refunds, want 1", n)
	}
}

func TestKeyInFlight(t *testing.T) {
	s := start(t, oneCharge(1000))
	reserved := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	s.SetCreateHook(func(key string) {
		if key == "held" {
			once.Do(func() {
				close(reserved)
				<-release
			})
		}
	})
	c := newClients(s, clientOpts{})
	type result struct {
		re  *stripe.Refund
		err error
	}
	done := make(chan result)
	go func() {
		re, err := c.refunds.New(refundParams("ch_a", 100, "held"))
		done <- result{re, err}
	}()
	<-reserved

	_, err := c.refunds.New(refundParams("ch_a", 100, "held"))
	se := stripeErr(t, err)
	if se.HTTPStatusCode != 409 || se.Type != stripe.ErrorTypeIdempotency || se.Code != stripe.ErrorCodeIdempotencyKeyInUse {
		t.Errorf("concurrent use: %d %s %s", se.HTTPStatusCode, se.Type, se.Code)
	}
	if n := len(s.Refunds()); n != 0 {
		t.Fatalf("%d refunds while the first request is held", n)
	}
	close(release)
	first := <-done
	if first.err != nil {
		t.Fatal(first.err)
	}
	// The 409 was not saved: the key now replays the first request's answer.
	again, err := c.refunds.New(refundParams("ch_a", 100, "held"))
	if err != nil || again.ID != first.re.ID || !replayed(again.LastResponse) {
		t.Errorf("after release: %v, %v", again, err)
	}
	if st := s.Stats(); st.KeyInUse != 1 || st.RefundsCreated != 1 {
		t.Errorf("stats = %+v", st)
	}
}

func TestRateLimitNotSaved(t *testing.T) {
	s := start(t, Config{Charges: oneCharge(1000).Charges, Faults: Faults{RateLimitShare: 1}})
	c := newClients(s, clientOpts{keepAlive: true})
	_, err := c.refunds.New(refundParams("ch_a", 100, "k"))
	se := stripeErr(t, err)
	if se.HTTPStatusCode != 429 || se.Code != stripe.ErrorCodeRateLimit {
		t.Fatalf("got %d %s, want 429 rate_limit", se.HTTPStatusCode, se.Code)
	}
	if _, err := c.charges.Get("ch_a", nil); stripeErr(t, err).HTTPStatusCode != 429 {
		t.Error("reads are rate limited too")
	}
	if err := s.SetFaults(Faults{}); err != nil {
		t.Fatal(err)
	}
	re, err := c.refunds.New(refundParams("ch_a", 100, "k"))
	if err != nil {
		t.Fatal(err)
	}
	if replayed(re.LastResponse) {
		t.Error("a 429 was saved under the key and replayed")
	}
	if st := s.Stats(); st.RateLimited != 2 || st.RefundsCreated != 1 ||
		st.RateLimitedRoutes["POST /v1/refunds"] != 1 || st.RateLimitedRoutes["GET /v1/charges/{id}"] != 1 ||
		st.RateLimitedReasons[ReasonGlobalRate] != 0 || st.RateLimitedReasons[ReasonEndpointRate] != 0 {
		t.Errorf("stats = %+v", st)
	}
}

func TestServerErrors(t *testing.T) {
	tests := []struct {
		name        string
		faults      Faults
		wantCreated int
	}{
		{"before commit", Faults{ErrorBeforeCommitShare: 1}, 0},
		{"after commit", Faults{ErrorAfterCommitShare: 1}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := start(t, Config{Charges: oneCharge(1000).Charges, Faults: tt.faults})
			// Retries on: stripe-go must not retry a POST's 500 by itself.
			c := newClients(s, clientOpts{retries: 2, keepAlive: true})
			_, err := c.refunds.New(refundParams("ch_a", 100, "k"))
			var apiErr *stripe.APIError
			if se := stripeErr(t, err); se.HTTPStatusCode != 500 || se.Type != stripe.ErrorTypeAPI || !errors.As(se.Err, &apiErr) {
				t.Fatalf("got %d %s", se.HTTPStatusCode, se.Type)
			}
			if n := len(s.Refunds()); n != tt.wantCreated {
				t.Fatalf("%d refunds after the 500, want %d", n, tt.wantCreated)
			}
			if tt.wantCreated == 1 && s.Refunds()[0].IdempotencyKey != "k" {
				t.Error("refund does not carry the key that created it")
			}
			// Faults off: the key still replays the 500, and nothing more is created.
			s.SetFaults(Faults{})
			_, err = c.refunds.New(refundParams("ch_a", 100, "k"))
			se := stripeErr(t, err)
			if se.HTTPStatusCode != 500 || !replayed(se.LastResponse) {
				t.Errorf("retry with the key: %d replayed=%v, want the saved 500", se.HTTPStatusCode, replayed(se.LastResponse))
			}
			if n := len(s.Refunds()); n != tt.wantCreated {
				t.Errorf("%d refunds after the retry, want %d", n, tt.wantCreated)
			}
			// A new key goes through.
			if _, err := c.refunds.New(refundParams("ch_a", 100, "k2")); err != nil {
				t.Error(err)
			}
			st := s.Stats()
			if st.ErrorsBeforeCommit+st.ErrorsAfterCommit != 1 || st.Replayed != 1 || st.Requests["POST /v1/refunds"] != 3 {
				t.Errorf("stats = %+v", st)
			}
		})
	}
}

func TestDropAfterCommit(t *testing.T) {
	s := start(t, Config{Charges: oneCharge(1000).Charges, Faults: Faults{DropAfterCommitShare: 1}})
	c := newClients(s, clientOpts{})
	_, err := c.refunds.New(refundParams("ch_a", 100, "k"))
	if err == nil {
		t.Fatal("dropped connection answered")
	}
	var se *stripe.Error
	if errors.As(err, &se) {
		t.Fatalf("want a network error, got Stripe error %v", se)
	}
	all := s.Refunds()
	if len(all) != 1 || all[0].Amount != 100 {
		t.Fatalf("refunds after the drop = %+v, want one of 100", all)
	}
	s.SetFaults(Faults{})
	re, err := c.refunds.New(refundParams("ch_a", 100, "k"))
	if err != nil {
		t.Fatal(err)
	}
	if re.ID != all[0].ID || !replayed(re.LastResponse) {
		t.Errorf("retry got %s replayed=%v, want the saved %s", re.ID, replayed(re.LastResponse), all[0].ID)
	}
	if st := s.Stats(); st.Dropped != 1 || st.Replayed != 1 || st.RefundsCreated != 1 {
		t.Errorf("stats = %+v", st)
	}
}

func TestDropAfterCommitStripeGoRetries(t *testing.T) {
	// stripe-go retries a network error with the same key by itself; with
	// drops on every new refund, its retry must get the saved success.
	s := start(t, Config{Charges: oneCharge(1000).Charges, Faults: Faults{DropAfterCommitShare: 1}})
	c := newClients(s, clientOpts{retries: 1})
	re, err := c.refunds.New(refundParams("ch_a", 100, "k"))
	if err != nil {
		t.Fatal(err)
	}
	if !replayed(re.LastResponse) || len(s.Refunds()) != 1 {
		t.Errorf("got %s replayed=%v with %d refunds", re.ID, replayed(re.LastResponse), len(s.Refunds()))
	}
}

func TestListPagination(t *testing.T) {
	var seeded []SeedRefund
	for i := range 25 {
		seeded = append(seeded, SeedRefund{Amount: 10, Metadata: map[string]string{"n": fmt.Sprint(i)}})
	}
	s := start(t, Config{Charges: []Charge{
		{ID: "ch_many", PaymentIntent: "pi_many", Amount: 1000, Refunds: seeded},
		{ID: "ch_other", Amount: 1000, Refunds: []SeedRefund{{Amount: 1}, {Amount: 2}}},
	}})
	c := newClients(s, clientOpts{keepAlive: true})
	// One more on ch_many, created after ch_other's: newest of its list.
	last, err := c.refunds.New(refundParams("ch_many", 5, "k"))
	if err != nil {
		t.Fatal(err)
	}

	collect := func(p *stripe.RefundListParams) []*stripe.Refund {
		t.Helper()
		it := c.refunds.List(p)
		var out []*stripe.Refund
		for it.Next() {
			out = append(out, it.Refund())
		}
		if err := it.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	tests := []struct {
		name   string
		params *stripe.RefundListParams
		want   int
	}{
		{"by charge, pages of 10", &stripe.RefundListParams{Charge: stripe.String("ch_many"), ListParams: stripe.ListParams{Limit: stripe.Int64(10)}}, 26},
		{"by payment intent, pages of 7", &stripe.RefundListParams{PaymentIntent: stripe.String("pi_many"), ListParams: stripe.ListParams{Limit: stripe.Int64(7)}}, 26},
		{"by charge, default limit", &stripe.RefundListParams{Charge: stripe.String("ch_many")}, 26},
		{"everything", &stripe.RefundListParams{ListParams: stripe.ListParams{Limit: stripe.Int64(4)}}, 28},
		{"other charge", &stripe.RefundListParams{Charge: stripe.String("ch_other")}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := collect(tt.params)
			if len(got) != tt.want {
				t.Fatalf("%d refunds, want %d", len(got), tt.want)
			}
			for i := 1; i < len(got); i++ {
				if got[i-1].ID <= got[i].ID {
					t.Fatalf("not newest first at %d: %s then %s", i, got[i-1].ID, got[i].ID)
				}
			}
			if tt.params.Charge != nil && got[0].ID != last.ID && *tt.params.Charge == "ch_many" {
				t.Errorf("newest = %s, want %s", got[0].ID, last.ID)
			}
		})
	}

	// ending_before walks back toward the newest, as stripe-go's iterator does.
	byCharge := collect(&stripe.RefundListParams{Charge: stripe.String("ch_many")})
	oldest := byCharge[len(byCharge)-1]
	p := &stripe.RefundListParams{Charge: stripe.String("ch_many")}
	p.EndingBefore = stripe.String(oldest.ID)
	p.Limit = stripe.Int64(6)
	newer := collect(p)
	if len(newer) != 25 || newer[0].ID != byCharge[len(byCharge)-2].ID || newer[24].ID != last.ID {
		t.Errorf("ending_before %s: %d refunds, first %s last %s", oldest.ID, len(newer), newer[0].ID, newer[len(newer)-1].ID)
	}

	// One page: has_more and the list envelope.
	single := &stripe.RefundListParams{Charge: stripe.String("ch_many")}
	single.Limit = stripe.Int64(3)
	single.Single = true
	it := c.refunds.List(single)
	for it.Next() {
	}
	if it.Err() != nil || !it.RefundList().HasMore || len(it.RefundList().Data) != 3 || it.RefundList().URL != "/v1/refunds" {
		t.Errorf("single page: %+v, %v", it.RefundList(), it.Err())
	}

	// Bad list requests.
	for name, p := range map[string]*stripe.RefundListParams{
		"unknown charge": {Charge: stripe.String("ch_nope")},
		"limit too big":  {ListParams: stripe.ListParams{Limit: stripe.Int64(101)}},
		"unknown cursor": {ListParams: stripe.ListParams{StartingAfter: stripe.String("re_nope")}},
	} {
		it := c.refunds.List(p)
		if it.Next() || it.Err() == nil {
			t.Errorf("%s: listed without error", name)
		}
	}
}

func TestCancel(t *testing.T) {
	s := start(t, Config{Charges: oneCharge(1000).Charges, Faults: Faults{RequiresActionShare: 1}})
	c := newClients(s, clientOpts{keepAlive: true})
	re, err := c.refunds.New(refundParams("ch_a", 400, "k"))
	if err != nil {
		t.Fatal(err)
	}
	if re.Status != stripe.RefundStatusRequiresAction {
		t.Fatalf("status %s, want requires_action", re.Status)
	}
	if st, _ := s.Charge("ch_a"); st.AmountRefunded != 400 {
		t.Errorf("requires_action refund holds %d of the charge, want 400", st.AmountRefunded)
	}
	canceled, err := c.refunds.Cancel(re.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if canceled.Status != stripe.RefundStatusCanceled || canceled.ID != re.ID {
		t.Errorf("cancel = %+v", canceled)
	}
	ch, err := c.charges.Get("ch_a", nil)
	if err != nil {
		t.Fatal(err)
	}
	if ch.AmountRefunded != 0 || ch.Refunded {
		t.Errorf("after cancel the charge has %d refunded", ch.AmountRefunded)
	}

	s.SetFaults(Faults{})
	done, err := c.refunds.New(refundParams("ch_a", 100, "k2"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, id string
		status   int
	}{
		{"already canceled", re.ID, 400},
		{"succeeded", done.ID, 400},
		{"unknown", "re_sim9999999999", 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.refunds.Cancel(tt.id, nil)
			if se := stripeErr(t, err); se.HTTPStatusCode != tt.status || se.Type != stripe.ErrorTypeInvalidRequest {
				t.Errorf("got %d %s: %s", se.HTTPStatusCode, se.Type, se.Msg)
			}
		})
	}
	if st := s.Stats(); st.RefundsCanceled != 1 {
		t.Errorf("stats = %+v", st)
	}
}

func TestForgetKeys(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).Unix())
	s := start(t, Config{Charges: oneCharge(1000).Charges, KeyTTL: 24 * time.Hour})
	s.now = func() time.Time { return time.Unix(clock.Load(), 0) }
	c := newClients(s, clientOpts{keepAlive: true})

	first, err := c.refunds.New(refundParams("ch_a", 100, "k"))
	if err != nil {
		t.Fatal(err)
	}
	clock.Add(int64((23 * time.Hour).Seconds()))
	if re, err := c.refunds.New(refundParams("ch_a", 100, "k")); err != nil || re.ID != first.ID {
		t.Fatalf("within the TTL: %v, %v", re, err)
	}
	clock.Add(int64((time.Hour).Seconds()))
	second, err := c.refunds.New(refundParams("ch_a", 100, "k"))
	if err != nil {
		t.Fatal(err)
	}
	if second.ID == first.ID || replayed(second.LastResponse) {
		t.Fatal("an expired key replayed")
	}

	if n := s.ForgetKeys(); n != 1 {
		t.Errorf("forgot %d keys, want 1", n)
	}
	third, err := c.refunds.New(refundParams("ch_a", 100, "k"))
	if err != nil {
		t.Fatal(err)
	}
	if third.ID == second.ID {
		t.Error("a forgotten key replayed")
	}
	// Three refunds for one key: the duplicate that forgotten keys allow.
	if n := len(s.Refunds()); n != 3 {
		t.Errorf("%d refunds, want 3", n)
	}
}

func TestForgetKeysKeepsInFlight(t *testing.T) {
	s := start(t, oneCharge(1000))
	reserved, release := make(chan struct{}), make(chan struct{})
	s.SetCreateHook(func(string) {
		close(reserved)
		<-release
	})
	c := newClients(s, clientOpts{})
	done := make(chan error)
	go func() {
		_, err := c.refunds.New(refundParams("ch_a", 100, "k"))
		done <- err
	}()
	<-reserved
	if n := s.ForgetKeys(); n != 0 {
		t.Errorf("forgot %d keys in flight", n)
	}
	_, err := c.refunds.New(refundParams("ch_a", 100, "k"))
	if se := stripeErr(t, err); se.HTTPStatusCode != 409 {
		t.Errorf("got %d, want 409: the key is still held", se.HTTPStatusCode)
	}
	s.SetCreateHook(nil)
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestValidationErrorNotSaved(t *testing.T) {
	s := start(t, oneCharge(1000))
	c := newClients(s, clientOpts{keepAlive: true})
	p := refundParams("ch_a", 100, "k")
	p.Reason = stripe.String("bogus")
	if _, err := c.refunds.New(p); stripeErr(t, err).HTTPStatusCode != 400 {
		t.Fatal("bad reason accepted")
	}
	// Stripe saves nothing when validation fails: the key is still free,
	// even for other parameters.
	re, err := c.refunds.New(refundParams("ch_a", 100, "k"))
	if err != nil || replayed(re.LastResponse) {
		t.Errorf("after a validation error: %v, %v", re, err)
	}
	// Errors from the endpoint itself are saved like successes.
	if _, err := c.refunds.New(refundParams("ch_a", 5000, "big")); stripeErr(t, err).Code != stripe.ErrorCodeAmountTooLarge {
		t.Fatal("want amount_too_large")
	}
	_, err = c.refunds.New(refundParams("ch_a", 5000, "big"))
	if se := stripeErr(t, err); se.Code != stripe.ErrorCodeAmountTooLarge || !replayed(se.LastResponse) {
		t.Errorf("amount_too_large not replayed: %v", err)
	}
}

func TestConcurrentRefundsNeverExceedCharge(t *testing.T) {
	s := start(t, oneCharge(50))
	c := newClients(s, clientOpts{keepAlive: true})
	var wg sync.WaitGroup
	var ok, refusedN atomic.Int64
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				_, err := c.refunds.New(refundParams("ch_a", 1, fmt.Sprintf("w%d-%d", w, i)))
				if err == nil {
					ok.Add(1)
				} else if se := stripeErr(t, err); se.Code == stripe.ErrorCodeChargeAlreadyRefunded {
					refusedN.Add(1)
				} else {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 50 || refusedN.Load() != 30 {
		t.Errorf("%d refunds and %d refusals, want 50 and 30", ok.Load(), refusedN.Load())
	}
	if st, _ := s.Charge("ch_a"); st.AmountRefunded != 50 {
		t.Errorf("charge refunded %d of 50", st.AmountRefunded)
	}
}

func TestFaultDrawsAreDeterministic(t *testing.T) {
	run := func(seed int64) []int {
		s := start(t, Config{Charges: GenerateCharges(200, 1), Seed: seed,
			Faults: Faults{RateLimitShare: 0.2, ErrorBeforeCommitShare: 0.1, RequiresActionShare: 0.3}})
		c := newClients(s, clientOpts{keepAlive: true})
		var statuses []int
		for _, ch := range GenerateCharges(200, 1) {
			re, err := c.refunds.New(refundParams(ch.ID, 0, "k-"+ch.ID))
			switch {
			case err != nil:
				statuses = append(statuses, stripeErr(t, err).HTTPStatusCode)
			case re.Status == stripe.RefundStatusRequiresAction:
				statuses = append(statuses, 202)
			default:
				statuses = append(statuses, 200)
			}
		}
		return statuses
	}
	a, b, other := run(7), run(7), run(8)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Error("the same seed gave other faults")
	}
	if fmt.Sprint(a) == fmt.Sprint(other) {
		t.Error("another seed gave the same faults")
	}
	// Shares land near their knobs: 200 draws, generous bounds.
	if n := countOf(a, 429); n < 20 || n > 60 {
		t.Errorf("%d of 200 rate limited, want about 40", n)
	}
	if n := countOf(a, 500); n < 5 || n > 35 {
		t.Errorf("%d of 200 failed before commit, want about 16", n)
	}
	if n := countOf(a, 202); n < 20 || n > 80 {
		t.Errorf("%d of 200 require action, want about 43", n)
	}
}

func TestListenRefusesNonLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:0", "example.com:80", "nonsense"} {
		if s, err := Listen(Config{}, addr); err == nil {
			s.Close()
			t.Errorf("Listen(%q) served", addr)
		}
	}
}

func TestAddChargesRejectsDuplicates(t *testing.T) {
	s := New(oneCharge(100))
	tests := []struct {
		name    string
		charges []Charge
	}{
		{"existing id", []Charge{{ID: "ch_a", Amount: 1}}},
		{"existing intent", []Charge{{ID: "ch_b", PaymentIntent: "pi_a", Amount: 1}}},
		{"twice in one call", []Charge{{ID: "ch_c", Amount: 1}, {ID: "ch_c", Amount: 2}}},
		{"invalid", []Charge{{ID: "ch_d", Amount: 0}}},
		{"refunds above amount", []Charge{{ID: "ch_e", Amount: 10, Refunds: []SeedRefund{{Amount: 6}, {Amount: 6, Status: "pending"}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.AddCharges(tt.charges...); err == nil {
				t.Error("added")
			}
		})
	}
	if _, ok := s.Charge("ch_c"); ok {
		t.Error("a failed AddCharges added part of its charges")
	}
}

func TestPanicOnBadConfig(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New accepted an invalid charge")
		}
	}()
	New(Config{Charges: []Charge{{ID: "bad", Amount: 1}}})
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return sb.String()
}

// countOf counts the answers of status v among xs.
func countOf(xs []int, v int) (n int) {
	for _, x := range xs {
		if x == v {
			n++
		}
	}
	return n
}
