package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/refundkit/refundkit/refund/sim/paypalsim"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
)

func init() { scriptCommands["stripe-sim"] = runAs(StripeSim) }

// simScripts run the real stripe-sim process: start, serve, stop on a
// signal. They live here rather than in testdata/script because they drive
// the simulator itself, not refundkit through it.
var simScripts = map[string]string{
	"serve_and_stop": `
[!exec:mkfifo] skip 'needs mkfifo'
exec mkfifo addr
exec stripe-sim --addr 127.0.0.1:0 --addr-file addr --charges 3 --seed 7 --charges-file old.jsonl --requires-action-share 0 &sim&
readurl addr SIM

# The API answers the real stripe-go wire format.
simhttp GET $SIM/v1/charges/ch_sim0000002
stdout '^200 '
stdout '"id":"ch_sim0000002"'
stdout '"payment_intent":"pi_sim0000002"'
simhttp GET $SIM/v1/charges/ch_old
stdout '"amount_refunded":300'
simhttp POST $SIM/v1/refunds charge=ch_old&amount=100 key-1
stdout '^200 '
stdout '"amount":100'
simhttp POST $SIM/v1/refunds charge=ch_old&amount=100 key-1
stdout '^200 replayed '
simhttp POST $SIM/v1/refunds charge=ch_old&amount=5000 key-2
stdout '^400 '
stdout '"code":"amount_too_large"'

# Control endpoints.
simhttp POST $SIM/_sim/faults '{"rate_limit_share":1}'
stdout '^200 '
simhttp GET $SIM/v1/refunds?charge=ch_old
stdout '^429 '
simhttp GET $SIM/_sim/refunds
stdout '"idempotency_key":"key-1"'
stdout '"refundkit_item":"old-1"'
simhttp POST $SIM/_sim/forget-keys
stdout '"forgotten":2'

kill -INT sim
wait sim
stderr '^stripe-sim: listening on http://127\.0\.0\.1:[0-9]+$'
stderr '^stripe-sim: stopped: 1 refunds created, 1 replayed, 1 rate limited, 0 dropped$'
stdout '"refunds_created":1'
stdout '"POST /v1/refunds":3'

-- old.jsonl --
{"id":"ch_old","payment_intent":"pi_old","currency":"usd","amount":1000,"refunds":[{"amount":300,"metadata":{"refundkit_batch":"b","refundkit_item":"old-1"}}]}
`,
	"gateway_faults": `
[!exec:mkfifo] skip 'needs mkfifo'
exec mkfifo addr
exec stripe-sim --addr 127.0.0.1:0 --addr-file addr --charges 2 --latency 1h --gateway-timeout-share 1 &sim&
readurl addr SIM

# A gateway answers 504 at once, an HTML page without Request-Id, while the
# refund goes on behind it, holding its key for the hour of latency.
simhttp POST $SIM/v1/refunds charge=ch_sim0000001&amount=100 key-1
stdout '^504 no-request-id <html>'
simhttp POST $SIM/_sim/faults '{}'
simhttp POST $SIM/v1/refunds charge=ch_sim0000001&amount=100 key-1
stdout '^409 \{"error":\{"type":"idempotency_error","code":"idempotency_key_in_use"'
simhttp GET $SIM/_sim/stats
stdout '"refunds_created":0,'
stdout '"gateway_timeouts":1,'
stdout '"gateway_in_flight":1'

# After the commit: a 502 with a Stripe-shaped body, still no Request-Id;
# the key then replays the saved success.
simhttp POST $SIM/_sim/faults '{"gateway_error_after_commit_share":1,"gateway_stripe_body":true}'
stdout '"gateway_stripe_body":true'
simhttp POST $SIM/v1/refunds charge=ch_sim0000002&amount=100 key-2
stdout '^502 no-request-id \{"error":\{"type":"api_error"'
simhttp POST $SIM/_sim/faults '{}'
simhttp POST $SIM/v1/refunds charge=ch_sim0000002&amount=100 key-2
stdout '^200 replayed \{"id":"re_sim0000000001"'

# Stopping cuts the hour short: the held refund is committed, then counted.
kill -INT sim
wait sim
stderr '^stripe-sim: stopped: 2 refunds created, 1 replayed, 0 rate limited, 0 dropped$'
stdout '"gateway_timeouts":1,"gateway_errors_after_commit":1,"gateway_in_flight":0'
`,
	"rate_limits": `
[!exec:mkfifo] skip 'needs mkfifo'
exec mkfifo addr
# Live mode's limits, with buckets that refill next to never (one token in
# 1000s), so what each admits does not depend on the machine's speed.
exec stripe-sim --addr 127.0.0.1:0 --addr-file addr --charges 2 --rate-limits live --global-rate 0.001 --global-burst 4 --endpoint-rate 0.001 --endpoint-burst 2 &sim&
readurl addr SIM

# Each endpoint takes its burst, then 429 endpoint-rate; a refused refund
# leaves its key free.
simhttp POST $SIM/v1/refunds charge=ch_sim0000001&amount=10 key-1
stdout '^200 \{"id":"re_sim0000000001"'
simhttp POST $SIM/v1/refunds charge=ch_sim0000001&amount=10 key-2
stdout '^200 '
simhttp POST $SIM/v1/refunds charge=ch_sim0000001&amount=10 key-3
stdout '^429 rate-limited:endpoint-rate \{"error":\{"type":"invalid_request_error","code":"rate_limit","message":"Request rate limit exceeded\.'
# GET /v1/refunds is another endpoint; the account's 4th request empties
# the global bucket, which then refuses first.
simhttp GET $SIM/v1/refunds?charge=ch_sim0000001
stdout '^200 \{"object":"list"'
simhttp GET $SIM/v1/charges/ch_sim0000002
stdout '^200 '
simhttp GET $SIM/v1/charges/ch_sim0000002
stdout '^429 rate-limited:global-rate '
# Control endpoints are never limited.
simhttp GET $SIM/_sim/stats
stdout '"rate_limited":2,'
stdout '"rate_limited_reasons":\{"endpoint-rate":1,"global-rate":1\}'
stdout '"rate_limited_routes":\{"GET /v1/charges":0,"GET /v1/charges/\{id\}":1,"GET /v1/refunds":0,"GET /v1/refunds/\{id\}":0,"POST /v1/refunds":1,'
simhttp GET $SIM/_sim/faults
stdout '"rate_limits":\{"mode":"live","global_rate":0.001,"global_burst":4,"endpoint_rate":0.001,"endpoint_burst":2\}'

# New limits through the control endpoint start full buckets: the refused
# refund's retry with its key creates it, once, not replayed.
simhttp POST $SIM/_sim/faults '{"rate_limits":{"mode":"test","global_rate":0.001,"global_burst":5,"endpoint_rate":0.001,"endpoint_burst":5}}'
stdout '^200 '
simhttp POST $SIM/v1/refunds charge=ch_sim0000001&amount=10 key-3
stdout '^200 \{"id":"re_sim0000000003"'
simhttp POST $SIM/v1/refunds charge=ch_sim0000001&amount=10 key-3
stdout '^200 replayed \{"id":"re_sim0000000003"'
simhttp GET $SIM/_sim/refunds
stdout -count=1 '"idempotency_key":"key-3"'

kill -INT sim
wait sim
stderr '^stripe-sim: rate limits: live mode, 0\.001 requests/s for the account \(burst 4\), 0\.001 per endpoint \(burst 2\)$'
stderr '^stripe-sim: stopped: 3 refunds created, 1 replayed, 2 rate limited, 0 dropped$'
`,
	// refund against Stripe's test-mode rates with buckets of 2: 12 items
	// at -j 8 and no pacing of refund's own send more at once than the
	// buckets hold and refill (a token in 40ms), so 429s come, and every
	// item is still refunded exactly once. The account's bucket holds no
	// more than an endpoint's and refills no faster, so it is always the
	// one that refuses.
	"rate_limits_refund": `
[!exec:mkfifo] skip 'needs mkfifo'
exec mkfifo addr
exec stripe-sim --addr 127.0.0.1:0 --addr-file addr --charges 12 --rate-limits test --global-burst 2 --endpoint-burst 2 &sim&
readurl addr SIM
env STRIPE_API_KEY=sk_test_ratelimits
exec plan --batch rl charges.txt
cp stdout plan.jsonl
stdin plan.jsonl
exec refund --journal j.jsonl --api-base $SIM --rate 0 -j 8
stdout -count=12 '"status":"refunded"'
simhttp GET $SIM/_sim/stats
stdout '"refunds_created":12,'
stdout '"rate_limited_reasons":\{"endpoint-rate":0,"global-rate":[1-9][0-9]*\}'
simhttp GET $SIM/_sim/refunds
stdout -count=12 '"refundkit_batch":"rl"'
kill -INT sim
wait sim

-- charges.txt --
ch_sim0000001
ch_sim0000002
ch_sim0000003
ch_sim0000004
ch_sim0000005
ch_sim0000006
ch_sim0000007
ch_sim0000008
ch_sim0000009
ch_sim0000010
ch_sim0000011
ch_sim0000012
`,
	"paypal": `
[!exec:mkfifo] skip 'needs mkfifo'
exec mkfifo addr
exec stripe-sim --addr 127.0.0.1:0 --addr-file addr --charges 1 --captures 2 --captures-file caps.jsonl --paypal-token-ttl 1h &sim&
readurl addr SIM

# PayPal's refund API on the same port: a token from client credentials,
# refunds under PayPal-Request-Id, the same id again the same refund.
paypalhttp POST $SIM/v2/payments/captures/CAPSIM00000000001/refund '{"amount":{"value":"1.50","currency_code":"USD"},"custom_id":"refundkit,b,i,1"}' rid-1
stdout '^201 \{"id":"REFSIM00000000001","amount":\{"currency_code":"USD","value":"1.50"\},"status":"COMPLETED","custom_id":"refundkit,b,i,1"'
paypalhttp POST $SIM/v2/payments/captures/CAPSIM00000000001/refund '' rid-1
stdout '^201 \{"id":"REFSIM00000000001","amount":\{"currency_code":"USD","value":"1.50"\}'
paypalhttp POST $SIM/v2/payments/captures/CAPKWD/refund '{"amount":{"value":"1.5","currency_code":"KWD"}}' rid-2
stdout '^201 .*"value":"1.500"'
paypalhttp POST $SIM/v2/payments/captures/CAPKWD/refund '{"amount":{"value":"9","currency_code":"KWD"}}' rid-3
stdout '^422 \{"name":"UNPROCESSABLE_ENTITY".*"issue":"REFUND_AMOUNT_EXCEEDED"'
paypalhttp GET $SIM/v2/payments/captures/CAPKWD
stdout '^200 .*"status":"PARTIALLY_REFUNDED","amount":\{"currency_code":"KWD","value":"2.000"\}'

# A gateway's 502 after the commit: no Paypal-Debug-Id; the request id
# then gets the refund made.
simhttp POST $SIM/_sim/faults '{"gateway_error_after_commit_share":1}'
paypalhttp POST $SIM/v2/payments/captures/CAPSIM00000000002/refund '' rid-4
stdout '^502 no-debug-id <html>'
simhttp POST $SIM/_sim/faults '{}'
paypalhttp POST $SIM/v2/payments/captures/CAPSIM00000000002/refund '' rid-4
stdout '^201 \{"id":"REFSIM00000000003"'

simhttp GET $SIM/_sim/refunds
stdout -count=3 '"capture":"CAP'
stdout '"paypal_request_id":"rid-4"'
simhttp POST $SIM/_sim/forget-keys
stdout '"forgotten":4'

kill -INT sim
wait sim
stderr '^stripe-sim: stopped: 3 refunds created, 2 replayed, 0 rate limited, 0 dropped$'
stdout '"POST /v2/payments/captures/\{id\}/refund":6'
stdout '"paypal":\{"tokens_issued":7,"tokens_expired":0,"refunds":\{"CANCELLED":0,"COMPLETED":3,"FAILED":0,"PENDING":0\}\}'

-- caps.jsonl --
{"id":"CAPKWD","currency":"KWD","amount":2000}
`,
	"usage_errors": `
exit 2 stripe-sim --addr 0.0.0.0:0
stderr '^stripe-sim: --addr: address "0.0.0.0:0": the simulator listens only on loopback'
exit 2 stripe-sim --addr :12111
stderr 'listens only on loopback'
exit 2 stripe-sim --addr 127.0.0.1:0 --charges-file bad.jsonl
stderr '^stripe-sim: bad.jsonl:3: amount -5: want a positive whole number of minor units$'
exit 2 stripe-sim --addr 127.0.0.1:0 --charges 2 --charges-file clash.jsonl
stderr '^stripe-sim: clash.jsonl: ch_sim0000002 is also generated by --charges 2$'
exit 2 stripe-sim --addr 127.0.0.1:0 --rate-limit-share 1.5
stderr '^stripe-sim: rate_limit_share 1.5: want a share between 0 and 1$'
exit 2 stripe-sim --addr 127.0.0.1:0 --latency=-1s
stderr 'want durations of zero or more'
exit 2 stripe-sim --addr 127.0.0.1:0 --gateway-status 404
stderr '^stripe-sim: gateway_status 404: want 0 \(504 for timeouts, 502 after commit\) or a status from 500 to 599$'
exit 2 stripe-sim --addr 127.0.0.1:0 --gateway-timeout-share 2
stderr '^stripe-sim: gateway_timeout_share 2: want a share between 0 and 1$'
exit 2 stripe-sim --addr 127.0.0.1:0 --charges-file missing.jsonl
stderr '^stripe-sim: open missing.jsonl: no such file or directory$'
exit 2 stripe-sim --addr 127.0.0.1:0 --rate-limits fast
stderr '^stripe-sim: --rate-limits must be one of "off","test","live" but got "fast"$'
exit 2 stripe-sim --addr 127.0.0.1:0 --endpoint-burst 5
stderr '^stripe-sim: --endpoint-burst needs --rate-limits test or live$'
exit 2 stripe-sim --addr 127.0.0.1:0 --rate-limits off --global-rate 5
stderr '^stripe-sim: --global-rate needs --rate-limits test or live$'
exit 2 stripe-sim --addr 127.0.0.1:0 --rate-limits live --global-burst=-1
stderr '^stripe-sim: rate_limits.global_burst -1: want a number of requests, or 0 for one second''s worth$'
exit 2 stripe-sim --addr 127.0.0.1:0 --rate-limits test --endpoint-rate=-2
stderr '^stripe-sim: rate_limits.endpoint_rate -2: want requests per second, or 0 for Stripe''s$'
exit 2 stripe-sim --addr 127.0.0.1:0 --captures 1 --captures-file clash_caps.jsonl
stderr '^stripe-sim: clash_caps.jsonl: CAPSIM00000000001 is also generated by --captures 1$'
exit 2 stripe-sim --addr 127.0.0.1:0 --captures-file bad_caps.jsonl
stderr '^stripe-sim: bad_caps.jsonl:1: currency "US": want a three-letter ISO code$'
exit 2 stripe-sim --addr 127.0.0.1:0 --paypal-pending-share 2
stderr '^stripe-sim: paypal_pending_share 2: want a share between 0 and 1$'
exit 2 stripe-sim --bogus
stderr '^stripe-sim: unknown flag --bogus'
exit 0 stripe-sim --help
stdout '--addr-file=FILE'
stdout '--drop-after-commit-share'
stdout '--gateway-timeout-share=0-1'
stdout '--gateway-error-after-commit-share=0-1'
stdout '--gateway-status=500-599'
stdout '--gateway-stripe-body'
stdout '--rate-limits=off\|test\|live'
stdout 'Stripe-Rate-Limited-Reason'
stdout '--global-rate=R'
stdout '--global-burst=N'
stdout '--endpoint-rate=R'
stdout '--endpoint-burst=N'
stdout '--captures=N'
stdout '--paypal-pending-share=0-1'
stdout '--paypal-token-ttl'

-- bad.jsonl --
{"id":"ch_1","amount":5}

{"id":"ch_2","amount":-5}
-- clash.jsonl --
{"id":"ch_sim0000002","amount":5}
-- clash_caps.jsonl --
{"id":"CAPSIM00000000001","amount":5}
-- bad_caps.jsonl --
{"id":"CAP1","currency":"US","amount":5}
`,
}

// TestStripeSimScripts runs simScripts against the real binary.
func TestStripeSimScripts(t *testing.T) {
	dir := t.TempDir()
	for name, script := range simScripts {
		if err := os.WriteFile(filepath.Join(dir, name+".txtar"), []byte(strings.TrimPrefix(script, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	testscript.Run(t, testscript.Params{
		Dir:                 dir,
		RequireExplicitExec: true,
		Cmds: map[string]func(*testscript.TestScript, bool, []string){
			"exit":       cmdExitCode,
			"readurl":    cmdReadURL,
			"simhttp":    cmdSimHTTP,
			"paypalhttp": cmdPayPalHTTP,
		},
	})
}

// cmdReadURL reads the URL that stripe-sim publishes in the named pipe
// FILE, blocking until it is listening, and sets the environment variable
// VAR to it: `readurl addr SIM`.
func cmdReadURL(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: readurl FIFO VAR")
	}
	got := make(chan []byte, 1)
	go func() {
		b, _ := os.ReadFile(ts.MkAbs(args[0])) // returns once the writer closes
		got <- b
	}()
	select {
	case b := <-got:
		url := strings.TrimSpace(string(b))
		if !strings.HasPrefix(url, "http://127.0.0.1:") {
			ts.Fatalf("stripe-sim published %q", b)
		}
		ts.Setenv(args[1], url)
	case <-time.After(time.Minute): // a guard against a hang, not a wait
		ts.Fatalf("stripe-sim did not publish its URL in %s", args[0])
	}
}

// cmdSimHTTP sends one request with a test key and prints
// "STATUS [replayed ][no-request-id ][rate-limited:REASON ]BODY" on stdout
// (no-request-id: the answer is not Stripe's own, as a gateway's; REASON:
// its Stripe-Rate-Limited-Reason header):
//
//	simhttp GET URL
//	simhttp POST URL [BODY [IDEMPOTENCY-KEY]]
//
// A POST body starting with { is sent as JSON, else as a form.
func cmdSimHTTP(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 || len(args) > 4 {
		ts.Fatalf("usage: simhttp METHOD URL [BODY [IDEMPOTENCY-KEY]]")
	}
	var body io.Reader
	if len(args) > 2 {
		body = strings.NewReader(args[2])
	}
	req, err := http.NewRequest(args[0], args[1], body)
	ts.Check(err)
	req.Header.Set("Authorization", "Bearer sk_test_scriptsim")
	if len(args) > 2 {
		if strings.HasPrefix(args[2], "{") {
			req.Header.Set("Content-Type", "application/json")
		} else {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
	}
	if len(args) > 3 {
		req.Header.Set("Idempotency-Key", args[3])
	}
	resp, err := http.DefaultClient.Do(req)
	ts.Check(err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	ts.Check(err)
	var out bytes.Buffer
	out.WriteString(resp.Status[:3] + " ")
	if resp.Header.Get("Idempotent-Replayed") == "true" {
		out.WriteString("replayed ")
	}
	if resp.Header.Get("Request-Id") == "" && !strings.Contains(args[1], "/_sim/") {
		out.WriteString("no-request-id ")
	}
	if reason := resp.Header.Get("Stripe-Rate-Limited-Reason"); reason != "" {
		out.WriteString("rate-limited:" + reason + " ")
	}
	out.Write(b)
	out.WriteByte('\n')
	ts.Stdout().Write(out.Bytes())
}

// cmdPayPalHTTP sends one request to PayPal's routes with a bearer token
// it fetches first (client credentials client-1:secret-1), and prints
// "STATUS [no-debug-id ]BODY" on stdout (no-debug-id: the answer is not
// PayPal's own, as a gateway's):
//
//	paypalhttp GET URL
//	paypalhttp POST URL [BODY [PAYPAL-REQUEST-ID]]
func cmdPayPalHTTP(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 || len(args) > 4 {
		ts.Fatalf("usage: paypalhttp METHOD URL [BODY [PAYPAL-REQUEST-ID]]")
	}
	u, err := url.Parse(args[1])
	ts.Check(err)
	tokReq, err := http.NewRequest("POST", u.Scheme+"://"+u.Host+"/v1/oauth2/token", strings.NewReader("grant_type=client_credentials"))
	ts.Check(err)
	tokReq.SetBasicAuth("client-1", "secret-1")
	tokReq.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	tokRes, err := http.DefaultClient.Do(tokReq)
	ts.Check(err)
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	err = json.NewDecoder(tokRes.Body).Decode(&tok)
	tokRes.Body.Close()
	if err != nil || tok.AccessToken == "" {
		ts.Fatalf("no token: %d %v", tokRes.StatusCode, err)
	}
	var body io.Reader
	if len(args) > 2 {
		body = strings.NewReader(args[2])
	}
	req, err := http.NewRequest(args[0], args[1], body)
	ts.Check(err)
	req.Header.Set("Authorization", "Bearer "+tok.AccessToken)
	req.Header.Set("Content-Type", "application/json")
	if len(args) > 3 {
		req.Header.Set("PayPal-Request-Id", args[3])
	}
	resp, err := http.DefaultClient.Do(req)
	ts.Check(err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	ts.Check(err)
	out := resp.Status[:3] + " "
	if resp.Header.Get(paypalsim.DebugIDHeader) == "" {
		out += "no-debug-id "
	}
	fmt.Fprintf(ts.Stdout(), "%s%s\n", out, b)
}

// TestStripeSimConfig checks the config the flags build: generated and
// file charges together, knobs passed through.
func TestStripeSimConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.jsonl")
	if err := os.WriteFile(file, []byte(`{"id":"ch_x","amount":10}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	caps := filepath.Join(dir, "p.jsonl")
	if err := os.WriteFile(caps, []byte(`{"id":"CAPJPY","currency":"JPY","amount":500}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := stripeSimCmd{Charges: 2, ChargesFile: file, Captures: 1, CapturesFile: caps, PayPalPendingShare: 0.5, PayPalPendingFor: time.Minute,
		PayPalFailedShare: 0.25, PayPalTokenTTL: time.Second, Seed: 5, RateLimitShare: 0.25, Latency: time.Millisecond, KeyTTL: time.Hour,
		GatewayTimeoutShare: 0.5, GatewayErrorAfterCommitShare: 0.125, GatewayStatus: 503, GatewayStripeBody: true}
	cfg, err := c.config()
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Charges) != 3 || cfg.Charges[0].ID != "ch_sim0000001" || cfg.Charges[2].ID != "ch_x" ||
		cfg.Faults.RateLimitShare != 0.25 || cfg.Faults.Latency != time.Millisecond || cfg.Seed != 5 || cfg.KeyTTL != time.Hour ||
		cfg.Faults.GatewayTimeoutShare != 0.5 || cfg.Faults.GatewayErrorAfterCommitShare != 0.125 || cfg.Faults.GatewayStatus != 503 || !cfg.Faults.GatewayStripeBody ||
		len(cfg.PayPal.Captures) != 2 || cfg.PayPal.Captures[0].ID != "CAPSIM00000000001" || cfg.PayPal.Captures[1].Currency != "JPY" ||
		cfg.Faults.PayPalPendingShare != 0.5 || cfg.Faults.PayPalPendingFor != time.Minute || cfg.Faults.PayPalFailedShare != 0.25 || cfg.Faults.PayPalTokenTTL != time.Second {
		t.Errorf("config = %+v", cfg)
	}
}

// TestStripeSimConfigRateLimits checks the rate-limit flags: off by
// default, a mode with its overrides passed through, overrides refused
// without a mode.
func TestStripeSimConfigRateLimits(t *testing.T) {
	for _, tt := range []struct {
		c    stripeSimCmd
		want stripesim.RateLimits
		err  string
	}{
		{c: stripeSimCmd{RateLimits: "off"}},
		{c: stripeSimCmd{RateLimits: "test"}, want: stripesim.RateLimits{Mode: "test"}},
		{c: stripeSimCmd{RateLimits: "live", GlobalRate: 50, GlobalBurst: 10, EndpointRate: 5, EndpointBurst: 2},
			want: stripesim.RateLimits{Mode: "live", GlobalRate: 50, GlobalBurst: 10, EndpointRate: 5, EndpointBurst: 2}},
		{c: stripeSimCmd{RateLimits: "off", EndpointRate: 5}, err: "--endpoint-rate needs --rate-limits test or live"},
		{c: stripeSimCmd{RateLimits: "test", GlobalRate: -1}, err: "rate_limits.global_rate -1: want requests per second, or 0 for Stripe's"},
	} {
		cfg, err := tt.c.config()
		if tt.err != "" {
			if err == nil || err.Error() != tt.err {
				t.Errorf("%+v: error %v, want %q", tt.c, err, tt.err)
			}
			continue
		}
		if err != nil || cfg.Faults.RateLimits != tt.want {
			t.Errorf("%+v: rate limits %+v (%v), want %+v", tt.c, cfg.Faults.RateLimits, err, tt.want)
		}
	}
}

func TestPublishURL(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "url")
	if err := os.WriteFile(file, []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := publishURL(context.Background(), file, "http://127.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "http://127.0.0.1:1\n" {
		t.Errorf("file holds %q, %v", b, err)
	}
	if err := publishURL(context.Background(), filepath.Join(dir, "no", "such"), "http://x"); err == nil {
		t.Error("wrote into a missing directory")
	}
}
