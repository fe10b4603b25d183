package cli

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund/sim/paypalsim"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// TestPGPayPalEventsSettleFromTheCheckpoint: webhook --paypal keeps
// PayPal's signed events (duplicated, reordered, some forged) in the
// PostgreSQL checkpoint's database, refund --provider paypal
// --notifications postgres://... settles every pending refund from there
// with no request to PayPal, and audit reads them against the journal.
func TestPGPayPalEventsSettleFromTheCheckpoint(t *testing.T) {
	_, dbURL := newPGDB(t, pgServer(t))
	checkPayPalEventsSettleFrom(t, dbURL)
}

// TestNATSPayPalEventsSettleFromTheCheckpoint: the same through a bucket
// beside a NATS JetStream checkpoint (nats://...).
func TestNATSPayPalEventsSettleFromTheCheckpoint(t *testing.T) {
	checkPayPalEventsSettleFrom(t, natsEventsURL(t))
}

// checkPayPalEventsSettleFrom runs a PayPal batch whose every refund goes
// pending, webhook --paypal keeping PayPal's events at spec; a rerun with
// --notifications spec settles every one with no request, and audit
// --notifications spec is clean.
func checkPayPalEventsSettleFrom(t *testing.T, spec string) {
	t.Helper()
	const webhookID, items = "WH-PG-PAYPAL-1", 8
	bins := map[string]string{}
	for _, b := range []string{"webhook", "refund", "audit"} {
		p, err := exec.LookPath(b)
		if err != nil {
			t.Fatal(err)
		}
		bins[b] = p
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	sim, err := crashrig.StartSim(stripesim.Config{
		Seed:   7,
		Faults: stripesim.Faults{PayPalPendingShare: 1, PayPalPendingFor: 20 * time.Millisecond},
		PayPal: paypalsim.Config{
			Captures: paypalsim.GenerateCaptures(items, 7),
			Events: paypalsim.EventsConfig{URL: "http://" + addr + "/paypal/events", WebhookID: webhookID,
				Backoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, DuplicateShare: 0.5, ReorderShare: 0.5, ForgedShare: 0.5},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	dir := t.TempDir()
	root, _, _, ok := sim.PayPal().EventsCerts()
	if !ok {
		t.Fatal("the simulator serves no PayPal certificates")
	}
	rootFile := filepath.Join(dir, "root.pem")
	var plan strings.Builder
	for i := 1; i <= items; i++ {
		fmt.Fprintf(&plan, `{"batch":"pgpp","item":"i%d","capture":"CAPSIM%011d"}`+"\n", i, i)
	}
	planFile := filepath.Join(dir, "plan.jsonl")
	for f, b := range map[string][]byte{rootFile: root, planFile: []byte(plan.String())} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	env := crashrig.Env(scriptKey, "", "PAYPAL_CLIENT_ID=pg_pp_id", "PAYPAL_CLIENT_SECRET=pg_pp_secret",
		"PAYPAL_API_BASE="+sim.URL(), "PAYPAL_WEBHOOK_ID="+webhookID, "PAYPAL_CERT_ROOT_FILE="+rootFile)
	run := func(bin string, args ...string) *crashrig.Proc {
		t.Helper()
		p, err := crashrig.Start(crashrig.Cmd{Bin: bins[bin], Dir: dir, Args: args, Env: env})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	wh := run("webhook", "--listen", addr, "--paypal", spec)
	go wh.Wait()
	defer wh.Cmd.Process.Kill()

	journal := filepath.Join(dir, "j.jsonl")
	refundArgs := []string{"--provider", "paypal", "--journal", journal, "--rate", "0", planFile}
	p := run("refund", refundArgs...)
	if p.Wait(); p.Code != 0 || strings.Count(p.Stdout.String(), `"status":"pending"`) != items {
		t.Fatalf("first run exited %d, want %d pending: %s%s", p.Code, items, p.Stdout.String(), p.Stderr.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := sim.PayPal().FlushEvents(ctx)
	if err != nil {
		t.Fatalf("flushing the events: %v (webhook: %s)", err, wh.Stderr.String())
	}
	if st.Forged == 0 || st.ForgedAccepted != 0 || st.Duplicates == 0 {
		t.Fatalf("event stats %+v: want forged deliveries, none accepted, and duplicates", st)
	}
	before := sim.Stats().Requests
	p = run("refund", append(refundArgs, "--notifications", spec)...)
	if p.Wait(); p.Code != 0 || strings.Count(p.Stdout.String(), `"status":"refunded"`) != items {
		t.Fatalf("rerun exited %d, want %d refunded: %s%s", p.Code, items, p.Stdout.String(), p.Stderr.String())
	}
	for ep, n := range sim.Stats().Requests {
		if n != before[ep] {
			t.Errorf("the rerun asked PayPal %s %d times: want no request", ep, n-before[ep])
		}
	}
	if !strings.Contains(p.Stderr.String(), fmt.Sprintf("%d refunds settled by PayPal's events, with no request", items)) {
		t.Errorf("summary: %s", p.Stderr.String())
	}
	a := run("audit", "--provider", "paypal", "--notifications", spec, "--plan", planFile, journal)
	if a.Wait(); a.Code != 0 || a.Stdout.Len() != 0 {
		t.Fatalf("audit exited %d: %s%s", a.Code, a.Stdout.String(), a.Stderr.String())
	}
	wh.Cmd.Process.Signal(syscall.SIGINT)
	<-wh.Exited()
	if wh.Code != 0 || !strings.Contains(wh.Stdout.String(), `"paypal":{"accepted":`) || strings.Contains(wh.Stderr.String(), "pg_pp_secret") {
		t.Fatalf("webhook exited %d: %s%s", wh.Code, wh.Stdout.String(), wh.Stderr.String())
	}
}
