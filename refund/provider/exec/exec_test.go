package exec

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/refundkit/refundkit/refund"
)

var item = refund.Item{Batch: "b1", Item: "i1", Charge: "ch_1", Amount: 500, Currency: "usd", Reason: "duplicate", Metadata: map[string]string{"order": "o1"}}

// syncBuffer is a stderr the provider's runs may share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newProvider(t *testing.T, cfg Config) (*Provider, *syncBuffer) {
	t.Helper()
	var errs syncBuffer
	cfg.Stderr, cfg.Prefix = &errs, "refund: "
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p, &errs
}

func create(t *testing.T, command string) (refund.Answer, refund.Failure, error) {
	t.Helper()
	p, _ := newProvider(t, Config{Create: command, Timeout: 10 * time.Second})
	it := item
	a, err := p.Create(context.Background(), &it, 2)
	if err != nil {
		return a, refund.Classify(err), err
	}
	return a, refund.Failure{}, nil
}

func TestCreateClassifiesExitAndAnswer(t *testing.T) {
	tests := []struct {
		name, command string
		class         refund.Class
		code          string
	}{
		{"final refusal", `echo '{"status":"failed","code":"charge_already_refunded","message":"already"}'`, refund.ClassFinal, "charge_already_refunded"},
		{"retry later", `exit 75`, refund.ClassRetry, "exec_tempfail"},
		{"credentials refused", `exit 77`, refund.ClassFatal, "exec_credentials_refused"},
		{"retry later with output", `echo '{"status":"succeeded","id":"re_1","amount":500}'; exit 75`, refund.ClassRetry, "exec_tempfail"},
		{"other exit", `echo '{"status":"succeeded","id":"re_1","amount":500}'; exit 1`, classNoAnswer, "exec_exit_1"},
		{"exit 2", `exit 2`, classNoAnswer, "exec_exit_2"},
		{"killed", `kill -9 $$`, classNoAnswer, "exec_signal"},
		{"no output", `true`, classNoAnswer, "exec_bad_answer"},
		{"not json", `echo refunded`, classNoAnswer, "exec_bad_answer"},
		{"two objects", `echo '{"status":"succeeded","id":"re_1","amount":1}{"status":"succeeded","id":"re_2","amount":1}'`, classNoAnswer, "exec_bad_answer"},
		{"trailing text", `echo '{"status":"succeeded","id":"re_1","amount":1} ok'`, classNoAnswer, "exec_bad_answer"},
		{"an array", `echo '[{"status":"succeeded","id":"re_1","amount":1}]'`, classNoAnswer, "exec_bad_answer"},
		{"null", `echo null`, classNoAnswer, "exec_bad_answer"},
		{"unknown status", `echo '{"status":"COMPLETED","id":"re_1","amount":1}'`, classNoAnswer, "exec_bad_answer"},
		{"canceled is not a create answer", `echo '{"status":"canceled","id":"re_1","amount":1}'`, classNoAnswer, "exec_bad_answer"},
		{"succeeded without id", `echo '{"status":"succeeded","amount":1}'`, classNoAnswer, "exec_bad_answer"},
		{"succeeded without amount", `echo '{"status":"succeeded","id":"re_1"}'`, classNoAnswer, "exec_bad_answer"},
		{"amount as a string", `echo '{"status":"succeeded","id":"re_1","amount":"5.00"}'`, classNoAnswer, "exec_bad_answer"},
		{"negative amount", `echo '{"status":"succeeded","id":"re_1","amount":-5}'`, classNoAnswer, "exec_bad_answer"},
		{"fractional amount", `echo '{"status":"succeeded","id":"re_1","amount":5.5}'`, classNoAnswer, "exec_bad_answer"},
		{"failed without code", `echo '{"status":"failed","message":"no"}'`, classNoAnswer, "exec_bad_answer"},
		{"over the cap", `printf '{"status":"succeeded","id":"re_1","amount":500,"message":"'; head -c 70000 /dev/zero | tr '\0' x; echo '"}'`, classNoAnswer, "exec_bad_answer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, f, err := create(t, tt.command)
			if err == nil {
				t.Fatal("no error")
			}
			if f.Class != tt.class || f.Code != tt.code {
				t.Errorf("class %d code %q, want %d %q (%s)", f.Class, f.Code, tt.class, tt.code, f.Message)
			}
			if tt.class == refund.ClassRetry && (!f.RateLimited || f.Status != 0) {
				t.Errorf("exit 75: rate limited %v, status %d; want a rate limit that counts as unanswered", f.RateLimited, f.Status)
			}
		})
	}
}

func TestCreateAnswered(t *testing.T) {
	for _, status := range []string{refund.RefundSucceeded, refund.RefundPending} {
		a, _, err := create(t, `echo '{"id":"re_9","status":"`+status+`","amount":500,"currency":"USD","unknown":1}'`)
		if err != nil {
			t.Fatal(err)
		}
		r := a.Refund
		if r.ID != "re_9" || r.Status != status || r.Amount != 500 || r.Currency != "usd" || r.Charge != "ch_1" {
			t.Errorf("%s: refund %+v", status, r)
		}
		if !refund.Matches(&r, "b1", "i1") || r.Metadata[refund.MetaAttempt] != "2" {
			t.Errorf("%s: metadata %v, want batch b1 item i1 attempt 2", status, r.Metadata)
		}
	}
}

// TestCreateInputAndEnvironment: the plan line on stdin, refundkit's
// variables set, stale ones from refund's own environment not inherited,
// the rest inherited.
func TestCreateInputAndEnvironment(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("REFUNDKIT_EXTRA", "stale")
	t.Setenv("SOME_API_TOKEN", "inherited")
	cmd := `cat > ` + dir + `/in; env | grep -E '^(REFUNDKIT_|SOME_API_TOKEN=)' | sort > ` + dir + `/env; echo '{"status":"failed","code":"x"}'`
	if _, f, _ := create(t, cmd); f.Code != "x" {
		t.Fatalf("code %q: %s", f.Code, f.Message)
	}
	in, _ := os.ReadFile(filepath.Join(dir, "in"))
	want := `{"batch":"b1","item":"i1","charge":"ch_1","amount":500,"currency":"usd","reason":"duplicate","metadata":{"order":"o1"}}` + "\n"
	if string(in) != want {
		t.Errorf("stdin %s, want %s", in, want)
	}
	env, _ := os.ReadFile(filepath.Join(dir, "env"))
	wantEnv := strings.Join([]string{"REFUNDKIT_AMOUNT=500", "REFUNDKIT_ATTEMPT=2", "REFUNDKIT_BATCH=b1", "REFUNDKIT_CURRENCY=usd",
		"REFUNDKIT_IDEMPOTENCY_KEY=" + refund.IdempotencyKey("b1", "i1", 2), "REFUNDKIT_ITEM=i1", "REFUNDKIT_TARGET=ch_1", "SOME_API_TOKEN=inherited"}, "\n") + "\n"
	if string(env) != wantEnv {
		t.Errorf("environment\n%s\nwant\n%s", env, wantEnv)
	}
}

func TestStderrPrefixedLineByLine(t *testing.T) {
	// Only what goes to fd 2 is passed through; a long line is cut short.
	p, errs := newProvider(t, Config{Create: `printf 'one\r\ntwo\n\nlast' >&2; echo; printf 'x%.0s' $(seq 5000) >&2; echo >&2; exit 3`, Timeout: 10 * time.Second})
	it := item
	p.Create(context.Background(), &it, 1)
	lines := strings.Split(strings.TrimSuffix(errs.String(), "\n"), "\n")
	const pre = "refund: exec-create ch_1: "
	want := []string{pre + "one", pre + "two", pre, pre + "last" + strings.Repeat("x", maxStderrLine-4) + "..."}
	if len(lines) != len(want) {
		t.Fatalf("stderr %q", errs.String())
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d: %q, want %q", i, cut(lines[i]), cut(want[i]))
		}
	}
}

func cut(s string) string {
	if len(s) > 80 {
		return s[:40] + "..." + s[len(s)-20:]
	}
	return s
}

// TestTimeoutKillsTheProcessGroup: the shell and the child it waits for are
// killed, and the item is in doubt. The command is the slow one (an hour);
// the timeout is long enough for a busy machine's shell to start its child
// and write its pid first.
func TestTimeoutKillsTheProcessGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	p, _ := newProvider(t, Config{Create: `sleep 3600 & echo $! > ` + pidFile + `; wait`, Timeout: 5 * time.Second})
	it := item
	_, err := p.Create(context.Background(), &it, 1)
	if f := refund.Classify(err); f.Class != classNoAnswer || f.Code != "exec_timeout" {
		t.Fatalf("class %d code %q: %v", f.Class, f.Code, err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	// SIGKILL was sent to the group before Create returned; its delivery
	// is the kernel's, so wait for the process to be gone (or a zombie).
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the command's child %d is still running after the timeout", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

func TestFind(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("REFUNDKIT_BATCH", "stale")
	p, _ := newProvider(t, Config{Create: "false", Timeout: 10 * time.Second, Find: `cat > ` + dir + `/in; env | grep ^REFUNDKIT_ > ` + dir + `/env
echo '{"id":"re_old","status":"canceled","amount":100,"currency":"USD","created":100,"batch":"b1","item":"i1","attempt":"1"}'
echo
echo '{"id":"re_new","status":"succeeded","amount":500,"currency":"usd","created":300,"batch":"b1","item":"i1","attempt":2,"charge":"ch_1"}'
echo '{"id":"re_hand","status":"pending","amount":7,"currency":"usd","created":200}'`})
	rs, err := p.Find(context.Background(), refund.Payment{Charge: "ch_1"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range rs {
		ids = append(ids, r.ID)
		if r.Charge != "ch_1" {
			t.Errorf("%s: charge %q", r.ID, r.Charge)
		}
	}
	if strings.Join(ids, " ") != "re_new re_hand re_old" {
		t.Errorf("refunds %v, want newest first", ids)
	}
	if !refund.Matches(&rs[0], "b1", "i1") || rs[0].Metadata[refund.MetaAttempt] != "2" || rs[2].Metadata[refund.MetaAttempt] != "1" {
		t.Errorf("metadata %v %v", rs[0].Metadata, rs[2].Metadata)
	}
	if rs[1].Metadata != nil || rs[2].Currency != "usd" {
		t.Errorf("refund made by hand: %+v", rs[1])
	}
	in, _ := os.ReadFile(filepath.Join(dir, "in"))
	env, _ := os.ReadFile(filepath.Join(dir, "env"))
	if string(in) != `{"charge":"ch_1"}`+"\n" || string(env) != "REFUNDKIT_TARGET=ch_1\n" {
		t.Errorf("stdin %q, environment %q", in, env)
	}
}

func TestFindFailures(t *testing.T) {
	tests := []struct {
		name, command string
		class         refund.Class
	}{
		{"retry later", `exit 75`, refund.ClassRetry},
		{"credentials refused", `exit 77`, refund.ClassFatal},
		{"other exit", `exit 1`, refund.ClassIndeterminate},
		{"killed", `kill -9 $$`, refund.ClassIndeterminate},
		{"not json", `echo nothing`, refund.ClassIndeterminate},
		{"no id", `echo '{"status":"succeeded","amount":1}'`, refund.ClassIndeterminate},
		{"unknown status", `echo '{"id":"re_1","status":"done","amount":1}'`, refund.ClassIndeterminate},
		{"bad attempt", `echo '{"id":"re_1","status":"succeeded","amount":1,"batch":"b","item":"i","attempt":"x"}'`, refund.ClassIndeterminate},
		{"bad amount", `echo '{"id":"re_1","status":"succeeded","amount":"1"}'`, refund.ClassIndeterminate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _ := newProvider(t, Config{Create: "false", Find: tt.command, Timeout: 10 * time.Second})
			_, err := p.Find(context.Background(), refund.Payment{Charge: "ch_1"})
			if f := refund.Classify(err); err == nil || f.Class != tt.class {
				t.Errorf("class %d, want %d: %v", f.Class, tt.class, err)
			}
		})
	}
}

func TestNoFindCommandCannotLookUp(t *testing.T) {
	p, _ := newProvider(t, Config{Create: "false"})
	if _, err := p.Find(context.Background(), refund.Payment{Charge: "ch_1"}); !errors.Is(err, refund.ErrNoLookup) {
		t.Fatalf("Find without a command: %v, want ErrNoLookup", err)
	}
	if f := p.Facts(); f.KeyTTL != 0 || f.Name != Name {
		t.Errorf("facts %+v: want keys kept for ever unless said otherwise", f)
	}
}

// An Adyen payment, named by psp_reference, goes to the commands and comes
// back as any payment does: in the plan line and the find command's input,
// and on the refunds they answer with.
func TestPSPReferencePayments(t *testing.T) {
	const psp = "8815658961765250"
	dir := t.TempDir()
	p, _ := newProvider(t, Config{Timeout: 10 * time.Second,
		Create: `cat > ` + dir + `/create; echo '{"id":"re_9","status":"succeeded","amount":500,"currency":"eur"}'`,
		Find: `cat > ` + dir + `/find
echo '{"id":"re_9","status":"succeeded","amount":500,"currency":"eur","batch":"b1","item":"i1","attempt":1}'
echo '{"id":"re_x","status":"succeeded","amount":5,"currency":"eur","psp_reference":"QFQTPCQ8HXSKGK82"}'`})
	it := refund.Item{Batch: "b1", Item: "i1", PSPReference: psp, Amount: 500, Currency: "eur"}
	a, err := p.Create(context.Background(), &it, 1)
	if err != nil {
		t.Fatal(err)
	}
	if a.PSPReference != psp || a.Charge != "" {
		t.Errorf("created %+v, want it on psp_reference %s", a.Refund, psp)
	}
	rs, err := p.Find(context.Background(), refund.Payment{PSPReference: psp})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].PSPReference != psp || rs[1].PSPReference != "QFQTPCQ8HXSKGK82" {
		t.Errorf("found %+v, want re_9 on %s (the payment asked for) and re_x on the one it names", rs, psp)
	}
	create, _ := os.ReadFile(filepath.Join(dir, "create"))
	find, _ := os.ReadFile(filepath.Join(dir, "find"))
	if want := `{"batch":"b1","item":"i1","psp_reference":"` + psp + `","amount":500,"currency":"eur"}` + "\n"; string(create) != want {
		t.Errorf("create's stdin %s, want %s", create, want)
	}
	if want := `{"psp_reference":"` + psp + `"}` + "\n"; string(find) != want {
		t.Errorf("find's stdin %s, want %s", find, want)
	}
}
