package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund/provider/adyen/notes"
	"github.com/refundkit/refundkit/refund/provider/adyen/wire"
)

func init() {
	scriptCommands["adyen-webhook"] = runAs(AdyenWebhook)
	scriptCommands["webhook"] = runAs(Webhook)
	scriptCommands["adyen-notify"] = runAs(adyenNotify)
}

// adyenNotify is a test command that prints the body of a notification
// request, one item signed with $ADYEN_HMAC_KEY as Adyen signs it (with
// -forged, under another key); with -line, the line a notifications file
// (adyen-webhook --out) keeps of it instead. -amount V/CUR, -success S
// and -ref REFERENCE change what the item says:
//
//	adyen-notify [-forged] [-line] [-amount V/CUR] [-success S] [-ref R] EVENT PSP ORIGINAL [MERCHANT]
func adyenNotify(env Env) int {
	const usage = "usage: adyen-notify [-forged] [-line] [-amount V/CUR] [-success S] [-ref R] EVENT PSP ORIGINAL [MERCHANT]"
	args := env.Args
	var forged, line bool
	var amount, success, ref string
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "-forged":
			forged = true
		case "-line":
			line = true
		case "-amount", "-success", "-ref":
			if len(args) < 2 {
				fmt.Fprintln(env.Stderr, usage)
				return ExitUsage
			}
			*map[string]*string{"-amount": &amount, "-success": &success, "-ref": &ref}[args[0]] = args[1]
			args = args[1:]
		default:
			fmt.Fprintln(env.Stderr, usage)
			return ExitUsage
		}
		args = args[1:]
	}
	if len(args) < 3 || len(args) > 4 {
		fmt.Fprintln(env.Stderr, usage)
		return ExitUsage
	}
	key, err := wire.ParseHMACKey(env.Getenv(envHMACKey))
	if err != nil {
		fmt.Fprintln(env.Stderr, "adyen-notify:", err)
		return ExitUsage
	}
	merchant := "RefundkitTest"
	if len(args) == 4 {
		merchant = args[3]
	}
	it := notifyItem(args[0], args[1], args[2], merchant)
	if amount != "" {
		v, cur, _ := strings.Cut(amount, "/")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			fmt.Fprintln(env.Stderr, "adyen-notify: -amount:", err)
			return ExitUsage
		}
		it.Amount = wire.Amount{Value: n, Currency: cur}
	}
	if success != "" {
		it.Success = strings.ReplaceAll(success, "_", " ")
	}
	if ref != "" {
		it.MerchantReference = ref
	}
	req := signedRequest(key, forged, it)
	var v any = req
	if line {
		v = wire.Notification{V: wire.Version, Received: time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC), Item: req.NotificationItems[0].NotificationRequestItem}
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	fmt.Fprintf(env.Stdout, "%s\n", b)
	return ExitOK
}

func notifyItem(event, psp, orig, merchant string) wire.Item {
	return wire.Item{
		Amount:              wire.Amount{Currency: "EUR", Value: 1250},
		EventCode:           event,
		EventDate:           "2026-11-02T10:00:00+01:00",
		MerchantAccountCode: merchant,
		MerchantReference:   "refundkit:b:item-1:1",
		OriginalReference:   orig,
		PSPReference:        psp,
		Success:             "true",
	}
}

func signedRequest(key []byte, forged bool, items ...wire.Item) wire.Request {
	if forged {
		key = []byte("not the key")
	}
	req := wire.Request{Live: "false"}
	req.NotificationItems = make([]struct {
		NotificationRequestItem wire.Item `json:"NotificationRequestItem"`
	}, len(items))
	for i := range items {
		wire.SetSignature(&items[i], key)
		req.NotificationItems[i].NotificationRequestItem = items[i]
	}
	return req
}

const webhookTestKey = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

// TestAdyenWebhookStopsOnSIGTERM runs the command in this process: it
// serves, keeps a notification, and on SIGTERM stops, closes its files and
// prints its counters, exit 0.
func TestAdyenWebhookStopsOnSIGTERM(t *testing.T) {
	dir := t.TempDir()
	addr := filepath.Join(dir, "addr")
	if err := syscall.Mkfifo(addr, 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "notes.jsonl")
	vars := map[string]string{envHMACKey: webhookTestKey, envMerchantAccount: "RefundkitTest"}
	var stdout, stderr bytes.Buffer
	env := Env{
		Args:   []string{"--listen", "127.0.0.1:0", "--out", out, "--addr-file", addr},
		Stdin:  strings.NewReader(""),
		Stdout: &stdout, Stderr: &stderr,
		Getenv: func(k string) string { return vars[k] },
	}
	done := make(chan int, 1)
	go func() { done <- AdyenWebhook(env) }()

	url := readFIFO(t, addr, done)
	key, _ := wire.ParseHMACKey(webhookTestKey)
	b, _ := json.Marshal(signedRequest(key, false, notifyItem(wire.EventRefund, "RF1", "PAY1", "RefundkitTest"), notifyItem(wire.EventCapture, "PAY1", "", "RefundkitTest")))
	resp, err := http.Post(url+"/adyen/notifications", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(answer) != wire.Accepted {
		t.Fatalf("%d %q", resp.StatusCode, answer)
	}

	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != ExitOK {
			t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
		}
	case <-time.After(time.Minute): // a guard against a hang, not a wait
		t.Fatal("adyen-webhook did not stop on SIGTERM")
	}
	if got := stdout.String(); !strings.HasPrefix(got, `{"accepted":1,"added":1,"duplicates":0,"others":1,"others_duplicates":0,"rejected":{"auth":0,"bad_request":0,"hmac":0,"merchant":0,"method":0,"too_large":0},"store_errors":0,"not_found":0}`) || strings.Count(got, "\n") != 1 {
		t.Errorf("stdout %q", got)
	}
	if !strings.Contains(stderr.String(), "adyen-webhook: stopped: 1 requests accepted, 1 refund notifications kept, 0 duplicates, 1 others kept, 0 requests refused, 0 store errors\n") {
		t.Errorf("stderr:\n%s", stderr.String())
	}
	if strings.Contains(stderr.String(), webhookTestKey) {
		t.Errorf("the key is in stderr")
	}
	for file, want := range map[string]int{out: 1, filepath.Join(dir, "notes.others.jsonl"): 1} {
		data, err := os.ReadFile(file)
		if err != nil || bytes.Count(data, []byte("\n")) != want {
			t.Errorf("%s: %q, %v", file, data, err)
		}
	}
	// The lock is released: another receiver can take the file.
	f, err := notes.OpenFile(out, [][]byte{key}, true)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// TestAdyenWebhookRefusesToStart: what is wrong before serving ends the
// command at once, with its exit code and a message that never holds the
// key.
func TestAdyenWebhookRefusesToStart(t *testing.T) {
	dir := t.TempDir()
	held := filepath.Join(dir, "held.jsonl")
	key, _ := wire.ParseHMACKey(webhookTestKey)
	w, err := notes.OpenFile(held, [][]byte{key}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	corrupt := filepath.Join(dir, "corrupt.jsonl")
	if err := os.WriteFile(corrupt, []byte("{\"v\":1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "notes.jsonl")
	for _, tc := range []struct {
		name string
		args []string
		vars map[string]string
		code int
		msg  string
	}{
		{"no key", []string{"--out", out}, map[string]string{}, ExitUsage, "adyen-webhook: ADYEN_HMAC_KEY is not set"},
		{"key not hex", []string{"--out", out}, map[string]string{envHMACKey: "zz-secret"}, ExitUsage, "adyen-webhook: ADYEN_HMAC_KEY: the HMAC key is not hex"},
		{"no --out", nil, nil, ExitUsage, "adyen-webhook: missing flags: --out="},
		{"public address", []string{"--out", out, "--listen", "0.0.0.0:0"}, nil, ExitUsage, "adyen-webhook: --listen 0.0.0.0:0 is not a loopback address: add --public"},
		{"all interfaces", []string{"--out", out, "--listen", ":8089"}, nil, ExitUsage, "is not a loopback address"},
		{"bad address", []string{"--out", out, "--listen", "nowhere"}, nil, ExitUsage, `adyen-webhook: --listen "nowhere"`},
		{"half basic auth", []string{"--out", out}, map[string]string{envHMACKey: webhookTestKey, envWebhookUser: "u"}, ExitUsage, "basic auth needs both ADYEN_WEBHOOK_USERNAME and ADYEN_WEBHOOK_PASSWORD"},
		{"relative path", []string{"--out", out, "--path", "hook"}, nil, ExitUsage, `--path "hook": want an absolute path`},
		{"others is out", []string{"--out", out, "--others", out}, nil, ExitUsage, "is --out: other events are kept apart"},
		{"held by another", []string{"--out", held, "--listen", "127.0.0.1:0"}, nil, ExitLocked, "adyen-webhook: --out: notifications file " + held + " is held by another receiver"},
		{"does not verify", []string{"--out", corrupt, "--listen", "127.0.0.1:0"}, nil, ExitUsage, "adyen-webhook: --out: " + corrupt + ":1: no hmacSignature"},
		{"unwritable", []string{"--out", filepath.Join(dir, "missing", "n.jsonl"), "--listen", "127.0.0.1:0"}, nil, ExitJournal, "no such file or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars := tc.vars
			if vars == nil {
				vars = map[string]string{envHMACKey: webhookTestKey}
			}
			var stdout, stderr bytes.Buffer
			code := AdyenWebhook(Env{Args: tc.args, Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Getenv: func(k string) string { return vars[k] }})
			if code != tc.code || !strings.Contains(stderr.String(), tc.msg) {
				t.Errorf("exit %d, want %d; stderr %q, want %q", code, tc.code, stderr.String(), tc.msg)
			}
			if stdout.Len() != 0 || strings.Contains(stderr.String(), "secret") || strings.Contains(stderr.String(), webhookTestKey) {
				t.Errorf("stdout %q, stderr %q", stdout.String(), stderr.String())
			}
		})
	}
}

// readFIFO reads the URL published into the named pipe path, failing if
// the command ends first.
func readFIFO(t *testing.T, path string, done <-chan int) string {
	t.Helper()
	got := make(chan []byte, 1)
	go func() {
		b, _ := os.ReadFile(path) // returns once the writer closes
		got <- b
	}()
	select {
	case b := <-got:
		return strings.TrimSpace(string(b))
	case code := <-done:
		t.Fatalf("exited %d before publishing its URL", code)
	case <-time.After(time.Minute): // a guard against a hang, not a wait
		t.Fatal("no URL published")
	}
	return ""
}
