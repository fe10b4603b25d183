package stripe_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	stripego "github.com/stripe/stripe-go/v76"
	striperefund "github.com/stripe/stripe-go/v76/refund"

	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/provider/stripe"
)

// The contract tests send refund's real requests to stripe-mock, Stripe's
// own mock generated from the API's OpenAPI spec: it refuses any parameter
// or value the real API would refuse. (It keeps no state: the simulator
// covers behaviour; this covers the shape of the requests.)

// stripeMockArgs binds both of stripe-mock's listeners to loopback ports
// the system picks; stripe-mock prints the addresses it got. Given only
// -http-addr, stripe-mock v0.203.0 still opens HTTPS on its default :12112,
// on every interface, and exits when anything holds that port.
var stripeMockArgs = []string{"-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:0"}

// stripeMockStartTimeout bounds stripe-mock's start: it loads the whole
// API spec first, a second or two, longer on a loaded machine.
const stripeMockStartTimeout = 60 * time.Second

// stripeMockBin is the stripe-mock to run: STRIPE_MOCK_BIN, as `make test`
// installs the pinned version, or one on PATH; the test is skipped without
// one, except in CI.
func stripeMockBin(t *testing.T) string {
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
	return bin
}

// stripeMock starts stripe-mock on free loopback ports and returns its HTTP
// URL. It is stopped when the test ends; if the test failed, its output is
// logged.
func stripeMock(t *testing.T) string {
	t.Helper()
	m, err := startStripeMock(stripeMockBin(t), stripeMockArgs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.stop()
		if t.Failed() {
			t.Logf("stripe-mock's output:\n%s", m.out)
		}
	})
	return m.url
}

// mockProcess is a running stripe-mock.
type mockProcess struct {
	cmd     *exec.Cmd
	out     *mockOutput
	url     string        // its HTTP base URL
	exited  chan struct{} // closed once it exited and its output is read
	waitErr error         // how it exited, set before exited is closed
}

// startStripeMock runs bin with args and waits until both of its listeners
// are bound. If it exits first or does not get there in time, the error
// quotes everything it wrote.
func startStripeMock(bin string, args ...string) (*mockProcess, error) {
	out := &mockOutput{ready: make(chan string, 1)}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out // one pipe: the lines in order
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	m := &mockProcess{cmd: cmd, out: out, exited: make(chan struct{})}
	go func() {
		m.waitErr = cmd.Wait()
		close(m.exited)
	}()
	deadline := time.NewTimer(stripeMockStartTimeout)
	defer deadline.Stop()
	select {
	case addr := <-out.ready:
		m.url = "http://" + addr
		return m, nil
	case <-m.exited:
		return nil, fmt.Errorf("stripe-mock %s exited before it listened (%v); its output:\n%s", strings.Join(args, " "), m.waitErr, out)
	case <-deadline.C:
		m.stop()
		return nil, fmt.Errorf("stripe-mock %s did not listen within %v; its output:\n%s", strings.Join(args, " "), stripeMockStartTimeout, out)
	}
}

// stop kills stripe-mock and waits until it is gone.
func (m *mockProcess) stop() {
	m.cmd.Process.Kill()
	<-m.exited
}

// mockOutput keeps what stripe-mock writes and sends its HTTP address on
// ready once it says both listeners are bound: it prints each line once
// net.Listen returned, so the port already accepts connections.
type mockOutput struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	ready chan string // buffered: sent to once
	sent  bool
}

// listeningLine is stripe-mock's line for a bound listener, whole.
var listeningLine = regexp.MustCompile(`(?m)^Listening for (HTTPS?) at address: (\S+)\n`)

func (o *mockOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf.Write(p)
	if !o.sent {
		httpAddr, https := "", false
		for _, m := range listeningLine.FindAllStringSubmatch(o.buf.String(), -1) {
			if m[1] == "HTTP" {
				httpAddr = m[2]
			} else {
				https = true
			}
		}
		if httpAddr != "" && https {
			o.ready <- httpAddr
			o.sent = true
		}
	}
	return len(p), nil
}

// String is the output so far, indented to stand out in a test log.
func (o *mockOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	text := strings.TrimRight(o.buf.String(), "\n")
	if text == "" {
		return "\t(nothing)"
	}
	return "\t" + strings.ReplaceAll(text, "\n", "\n\t")
}

// holdPort listens on addr until the test ends, as another program would.
// A port some other program already holds is as good.
func holdPort(t *testing.T, addr string) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		t.Logf("%s is held already: %v", addr, err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
}

// TestContractStripeMockAvoidsItsDefaultPorts: `make test` once failed
// whenever anything held 127.0.0.1:12112, stripe-mock's default HTTPS port,
// and said only that stripe-mock did not start. With stripe-mock's default
// ports (and so the simulator's old default, 12111) held, it starts and
// answers; a listener it cannot bind fails the start with its own words.
func TestContractStripeMockAvoidsItsDefaultPorts(t *testing.T) {
	bin := stripeMockBin(t)
	holdPort(t, "127.0.0.1:12111")
	holdPort(t, "127.0.0.1:12112")

	c := stripe.New(stripeMock(t), "sk_test_123", 2)
	if _, err := c.Find(context.Background(), refund.Payment{Charge: "ch_1"}); err != nil {
		t.Errorf("stripe-mock started beside held ports does not answer: %v", err)
	}

	m, err := startStripeMock(bin, "-http-addr", "127.0.0.1:0", "-https-addr", "127.0.0.1:12112")
	if err == nil {
		m.stop()
		t.Fatal("stripe-mock started on a held port")
	}
	for _, want := range []string{"exited before it listened", "Listening for HTTP at address: 127.0.0.1:", "12112", "address already in use"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("start on a held port: error lacks %q:\n%v", want, err)
		}
	}
}

func TestContractRequestsFitStripesAPISpec(t *testing.T) {
	url := stripeMock(t)
	c := stripe.New(url, "sk_test_123", 2)
	ctx := context.Background()

	for _, it := range []refund.Item{
		{Batch: "b1", Item: "i1", Charge: "ch_1", Amount: 500, Reason: "requested_by_customer", Metadata: map[string]string{"ticket": "T-1"}},
		{Batch: "b1", Item: "i2", PaymentIntent: "pi_1"},
		{Batch: "b1", Item: "i3:part-2", Charge: "ch_1", Amount: 1, Reason: "fraudulent"},
	} {
		r, err := c.Create(ctx, &it, 3)
		if err != nil {
			t.Errorf("create refund for %+v: stripe-mock refused it: %v", it, err)
			continue
		}
		if r.ID == "" || r.HTTPStatus != 200 {
			t.Errorf("create refund for %+v: answer %+v is not a refund", it, r)
		}
	}
	for _, p := range []refund.Payment{{Charge: "ch_1"}, {PaymentIntent: "pi_1"}} {
		if _, err := c.Find(ctx, p); err != nil {
			t.Errorf("list refunds of %+v: %v", p, err)
		}
	}
}

// TestContractMockRefusesWhatStripeRefuses shows the contract above can
// fail: a parameter outside the spec is refused by stripe-mock.
func TestContractMockRefusesWhatStripeRefuses(t *testing.T) {
	url := stripeMock(t)
	backend := stripego.GetBackendWithConfig(stripego.APIBackend, &stripego.BackendConfig{
		URL: stripego.String(url), MaxNetworkRetries: stripego.Int64(0),
		LeveledLogger: &stripego.LeveledLogger{Level: stripego.LevelNull},
	})
	client := striperefund.Client{B: backend, Key: "sk_test_123"}
	params := &stripego.RefundParams{Charge: stripego.String("ch_1")}
	params.AddExtra("refund_everything_twice", "true")
	_, err := client.New(params)
	var se *stripego.Error
	if !errors.As(err, &se) || se.HTTPStatusCode != 400 {
		t.Fatalf("stripe-mock accepted an unknown parameter (err %v): the contract test would prove nothing", err)
	}
}
