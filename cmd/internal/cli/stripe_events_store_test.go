package cli

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund/checkpoint/natsjs/natstest"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// TestPGStripeEventsSettleFromTheCheckpoint: webhook --stripe keeps
// Stripe's events in the PostgreSQL checkpoint's database, and refund
// --notifications postgres://... settles every pending refund from there
// with no request to Stripe.
func TestPGStripeEventsSettleFromTheCheckpoint(t *testing.T) {
	_, dbURL := newPGDB(t, pgServer(t))
	checkStripeEventsSettleFrom(t, dbURL)
}

// TestNATSStripeEventsSettleFromTheCheckpoint: the same through a bucket
// beside a NATS JetStream checkpoint (nats://...).
func TestNATSStripeEventsSettleFromTheCheckpoint(t *testing.T) {
	checkStripeEventsSettleFrom(t, natsEventsURL(t))
}

// natsEventsURL is a checkpoint on a fresh nats-server that syncs every
// write, where the receiver keeps the providers' events.
func natsEventsURL(t *testing.T) string {
	t.Helper()
	srv, err := natstest.Start(natstest.Options{SyncAlways: true})
	if err != nil {
		t.Fatalf("the NATS tests need nats-server (make test installs it): %v", err)
	}
	t.Cleanup(func() { srv.Stop() })
	return srv.URL("events") + "?monitor=" + srv.MonitorURL()
}

// checkStripeEventsSettleFrom runs a batch whose every refund goes pending,
// with webhook --stripe keeping Stripe's events at spec, then reruns it
// with --notifications spec: every item settles with no request to Stripe.
func checkStripeEventsSettleFrom(t *testing.T, spec string) {
	t.Helper()
	const secret = "whsec_pg_events_0123456789"
	webhookBin, err := exec.LookPath("webhook")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	const items = 12
	r := newCrashRigWith(t, items, stripesim.Config{
		Faults: stripesim.Faults{StripePendingShare: 1, StripePendingFor: 20 * time.Millisecond, StripeEventsDuplicateShare: 0.5},
		Events: stripesim.EventsConfig{URL: "http://" + addr + "/stripe/events", Secrets: []string{secret}, Backoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond},
	})
	r.env = []string{"STRIPE_WEBHOOK_SECRET=" + secret}
	wh, err := crashrig.Start(crashrig.Cmd{Bin: webhookBin, Dir: r.dir, Args: []string{"--listen", addr, "--stripe", spec}, Env: crashrig.Env(scriptKey, "", r.env...)})
	if err != nil {
		t.Fatal(err)
	}
	go wh.Wait()
	defer wh.Cmd.Process.Kill()

	path := filepath.Join(r.dir, "j.jsonl")
	p, stderr := r.start(path)
	if p.Wait(); p.Code != 0 || strings.Count(p.Stdout.String(), `"status":"pending"`) != items {
		t.Fatalf("first run exited %d, want %d pending: %s%s", p.Code, items, p.Stdout.String(), stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := r.sim.FlushEvents(ctx); err != nil {
		t.Fatal(err)
	}
	before := r.sim.Stats().Requests
	p, stderr = r.start(path, "--notifications", spec)
	if p.Wait(); p.Code != 0 || strings.Count(p.Stdout.String(), `"status":"refunded"`) != items {
		t.Fatalf("rerun exited %d, want %d refunded: %s%s", p.Code, items, p.Stdout.String(), stderr)
	}
	for ep, n := range r.sim.Stats().Requests {
		if n != before[ep] {
			t.Errorf("the rerun asked Stripe %s %d times: want no request", ep, n-before[ep])
		}
	}
	if !strings.Contains(stderr.String(), "12 refunds settled by Stripe's events, with no request") {
		t.Errorf("summary: %s", stderr)
	}
	r.checkExactlyOnce(path, items)
	wh.Cmd.Process.Signal(syscall.SIGINT)
	<-wh.Exited()
	if wh.Code != 0 || !strings.Contains(wh.Stdout.String(), `"stripe":{"accepted":`) {
		t.Fatalf("webhook exited %d: %s%s", wh.Code, wh.Stdout.String(), wh.Stderr.String())
	}
}

// TestNATSReceiverWarnsWhatItCannotShowDurable: the receiver answers 2xx
// once the server acknowledged; a server with one replica whose sync it
// cannot check (no monitor= in the URL) is said so on stderr, as refund
// --journal says it of the checkpoint.
func TestNATSReceiverWarnsWhatItCannotShowDurable(t *testing.T) {
	srv, err := natstest.Start(natstest.Options{})
	if err != nil {
		t.Fatalf("the NATS tests need nats-server (make test installs it): %v", err)
	}
	t.Cleanup(func() { srv.Stop() })
	webhookBin, err := exec.LookPath("webhook")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	addrFile := filepath.Join(dir, "wh.addr")
	if err := syscall.Mkfifo(addrFile, 0o600); err != nil {
		t.Fatal(err)
	}
	wh, err := crashrig.Start(crashrig.Cmd{Bin: webhookBin, Dir: dir, Args: []string{"--listen", "127.0.0.1:0", "--stripe", srv.URL("ck"), "--addr-file", addrFile},
		Env: crashrig.Env(scriptKey, "", "STRIPE_WEBHOOK_SECRET=whsec_warn_0123456789")})
	if err != nil {
		t.Fatal(err)
	}
	go wh.Wait()
	defer wh.Cmd.Process.Kill()
	go func() { // a receiver that dies first must not leave the read below hanging
		<-wh.Exited()
		if f, err := os.OpenFile(addrFile, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	}()
	if b, err := os.ReadFile(addrFile); err != nil || len(b) == 0 {
		t.Fatalf("the receiver's address: %q, %v (%s)", b, err, wh.Stderr.String())
	}
	wh.Cmd.Process.Signal(syscall.SIGINT)
	<-wh.Exited()
	if wh.Code != 0 || !strings.Contains(wh.Stderr.String(), "webhook: --stripe: the checkpoint's streams have 1 replica(s), and whether the server syncs every write") {
		t.Fatalf("webhook exited %d, stderr: %s", wh.Code, wh.Stderr.String())
	}
}
