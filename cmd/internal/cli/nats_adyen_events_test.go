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

	"github.com/refundkit/refundkit/refund/provider/adyen/webhook"
	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
	"github.com/refundkit/refundkit/refund/sim/adyensim"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
	"github.com/refundkit/refundkit/scripts/crashrig"
)

// TestNATSAdyenNotificationsSettleFromTheCheckpoint: webhook --adyen
// nats://... keeps Adyen's signed notifications in a bucket beside a NATS
// JetStream checkpoint; refund --provider adyen --notifications nats://...
// settles every refund from there with no call to Adyen, and audit reads
// them against the journal.
func TestNATSAdyenNotificationsSettleFromTheCheckpoint(t *testing.T) {
	spec := natsEventsURL(t)
	key, err := wire.ParseHMACKey(pgAdyenHMAC)
	if err != nil {
		t.Fatal(err)
	}
	bins := map[string]string{}
	for _, b := range []string{"webhook", "refund", "audit"} {
		if bins[b], err = exec.LookPath(b); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	const items = 10
	payments := adyensim.GeneratePayments(items, 5)
	sim, err := crashrig.StartSim(stripesim.Config{Seed: 5, Adyen: adyensim.Config{Payments: payments, APIKey: "nats-adyen-key",
		MerchantAccount: "Shop", NotifyURL: "http://" + addr + webhook.DefaultPath, HMACKey: key, NotifyBackoff: 5 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	dir := t.TempDir()
	var plan strings.Builder
	for _, p := range payments {
		fmt.Fprintf(&plan, `{"batch":"natsad","item":%q,"psp_reference":%q,"amount":%d,"currency":"eur"}`+"\n", "i-"+p.PSPReference, p.PSPReference, p.Amount)
	}
	planFile := filepath.Join(dir, "plan.jsonl")
	if err := os.WriteFile(planFile, []byte(plan.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	env := crashrig.Env(scriptKey, "", "ADYEN_API_KEY=nats-adyen-key", "ADYEN_MERCHANT_ACCOUNT=Shop",
		"ADYEN_API_BASE="+sim.URL(), "ADYEN_HMAC_KEY="+pgAdyenHMAC)
	run := func(bin string, args ...string) *crashrig.Proc {
		t.Helper()
		p, err := crashrig.Start(crashrig.Cmd{Bin: bins[bin], Dir: dir, Args: args, Env: env})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	journal := filepath.Join(dir, "j.jsonl")
	refundArgs := []string{"--provider", "adyen", "--journal", journal, "--notifications", spec, "--rate", "0", planFile}
	// Before any receiver kept anything there: a usage error, nothing sent.
	p := run("refund", refundArgs...)
	if p.Wait(); p.Code != ExitUsage || !strings.Contains(p.Stderr.String(), "no bucket refundkit_events_adyen_events") || sim.Creates() != 0 {
		t.Fatalf("refund before the receiver exited %d: %s", p.Code, p.Stderr.String())
	}
	if _, err := os.Stat(journal); !os.IsNotExist(err) {
		t.Fatalf("the refused run left a journal: %v", err)
	}
	// The receiver makes its bucket before it listens: once it says where
	// it listens (into a fifo), the bucket is there.
	addrFile := filepath.Join(dir, "wh.addr")
	if err := syscall.Mkfifo(addrFile, 0o600); err != nil {
		t.Fatal(err)
	}
	wh := run("webhook", "--listen", addr, "--adyen", spec, "--addr-file", addrFile)
	go wh.Wait()
	defer wh.Cmd.Process.Kill()
	go func() { // a receiver that dies first must not leave the read below hanging
		<-wh.Exited()
		if f, err := os.OpenFile(addrFile, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	}()
	if b, err := os.ReadFile(addrFile); err != nil || !strings.Contains(string(b), addr) {
		t.Fatalf("the receiver's address: %q, %v (%s)", b, err, wh.Stderr.String())
	}

	p = run("refund", refundArgs...)
	if p.Wait(); p.Code != 0 || strings.Count(p.Stdout.String(), `"status":`) != items {
		t.Fatalf("first run exited %d, want %d outcomes: %s%s", p.Code, items, p.Stdout.String(), p.Stderr.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := sim.Adyen().Flush(ctx); err != nil {
		t.Fatalf("flushing the notifications: %v (webhook: %s)", err, wh.Stderr.String())
	}
	before := sim.Stats().Requests
	p = run("refund", refundArgs...)
	if p.Wait(); p.Code != 0 || strings.Count(p.Stdout.String(), `"status":"refunded"`) != items {
		t.Fatalf("rerun exited %d, want %d refunded: %s%s", p.Code, items, p.Stdout.String(), p.Stderr.String())
	}
	for ep, n := range sim.Stats().Requests {
		if n != before[ep] {
			t.Errorf("the rerun asked Adyen %s %d times: want no request", ep, n-before[ep])
		}
	}
	if n := sim.Creates(); n != items {
		t.Errorf("%d refund calls, want %d", n, items)
	}
	a := run("audit", "--provider", "adyen", "--notifications", spec, "--plan", planFile, journal)
	if a.Wait(); a.Code != 0 || a.Stdout.Len() != 0 || !strings.Contains(a.Stderr.String(), fmt.Sprintf("%d items: %[1]d refunded", items)) {
		t.Fatalf("audit exited %d: %s%s", a.Code, a.Stdout.String(), a.Stderr.String())
	}
	wh.Cmd.Process.Signal(syscall.SIGINT)
	<-wh.Exited()
	if wh.Code != 0 || !strings.Contains(wh.Stdout.String(), `"adyen":{`) || strings.Contains(wh.Stderr.String(), "nats-adyen-key") {
		t.Fatalf("webhook exited %d: %s%s", wh.Code, wh.Stdout.String(), wh.Stderr.String())
	}
}
