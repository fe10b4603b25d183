package refund_test

// What operators and broken networks do that a rerun of the same batch with
// the same journal does not: new batch names, restored or resharded journals,
// gateways, clocks, edited plans, lying answers. Each of these once sent a
// second refund with exit 0. Partial amounts throughout, so that Stripe's own
// "already refunded" check cannot hide a second refund.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/provider/stripe"
	"github.com/refundkit/refundkit/refund/sim/stripesim"
)

// liveRefundsByCharge counts the simulator's live refunds per charge.
func (s *sim) liveRefundsByCharge() map[string]int {
	n := map[string]int{}
	for _, r := range s.Refunds() {
		if r.Status != "canceled" && r.Status != "failed" {
			n[r.Charge]++
		}
	}
	return n
}

func wantOneRefundPerCharge(t *testing.T, s *sim, charges int) {
	t.Helper()
	got := s.liveRefundsByCharge()
	for i := 1; i <= charges; i++ {
		ch := fmt.Sprintf("ch_sim%07d", i)
		if got[ch] != 1 {
			t.Errorf("charge %s has %d live refunds, want 1", ch, got[ch])
		}
	}
}

func TestNewBatchIDOnRefundedChargesIsHeld(t *testing.T) {
	const n = 6
	s := newSim(t, n, stripesim.Faults{})
	dir := t.TempDir()
	if o := run(t, s, filepath.Join(dir, "day1.jsonl"), planLines("day-1", n, 100), runOpts{}); o.err != nil {
		t.Fatal(o.err)
	}
	for _, journalName := range []string{"day1.jsonl", "day2.jsonl"} { // the same journal or a new one
		t.Run(journalName, func(t *testing.T) {
			path := filepath.Join(dir, journalName)
			creates := s.Creates()
			o := run(t, s, path, planLines("day-2", n, 100), runOpts{})
			if o.err != nil {
				t.Fatal(o.err)
			}
			wantStatus(t, o, n, refund.StatusFailed)
			for _, r := range o.results {
				if r.Code != refund.CodeRefundedByOtherBatch || !strings.Contains(r.Message, "day-1") {
					t.Errorf("item %s: code %q message %q, want %s naming batch day-1", r.Item, r.Code, r.Message, refund.CodeRefundedByOtherBatch)
				}
			}
			if got := s.Creates() - creates; got != 0 {
				t.Errorf("%d create calls for charges another batch refunded, want 0", got)
			}
			wantOneRefundPerCharge(t, s, n)
			state, _, err := journal.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if st, _ := state.Lookup("day-2", "i1"); st.Status != journal.StatusFailed || st.Code != refund.CodeRefundedByOtherBatch {
				t.Errorf("journal state %+v, want failed %s", st, refund.CodeRefundedByOtherBatch)
			}
		})
	}

	// An explicit flag says more refunds are intended: the held items go.
	path := filepath.Join(dir, "day2.jsonl")
	o := run(t, s, path, planLines("day-2", n, 100), runOpts{cfg: func(c *refund.Config) { c.AllowRefundedCharges = true }})
	if o.err != nil {
		t.Fatal(o.err)
	}
	wantStatus(t, o, n, refund.StatusRefunded)
	if got := s.liveRefundsByCharge()["ch_sim0000001"]; got != 2 {
		t.Errorf("%d live refunds on ch_sim0000001 after the allowed second batch, want 2", got)
	}
	// ...and once only.
	before := s.calls()
	o = run(t, s, path, planLines("day-2", n, 100), runOpts{cfg: func(c *refund.Config) { c.AllowRefundedCharges = true }})
	if o.err != nil {
		t.Fatal(o.err)
	}
	wantStatus(t, o, n, refund.StatusSkipped)
	if got := s.calls() - before; got != 0 {
		t.Errorf("%d API calls on a finished batch, want 0", got)
	}
}

func TestRefundsWithoutMetadataHoldOnlyWhenAsked(t *testing.T) {
	s := newSim(t, 0, stripesim.Faults{})
	err := s.AddCharges(stripesim.Charge{ID: "ch_goodwill", Amount: 1000, Refunds: []stripesim.SeedRefund{{Amount: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	plan := `{"batch":"b1","item":"i1","charge":"ch_goodwill","amount":300}` + "\n"
	dir := t.TempDir()
	o := run(t, s, filepath.Join(dir, "strict.jsonl"), plan, runOpts{cfg: func(c *refund.Config) { c.AllRefunds = true }})
	if o.err != nil {
		t.Fatal(o.err)
	}
	if r := o.results["i1"]; r.Status != refund.StatusFailed || r.Code != refund.CodeRefundedOutside {
		t.Fatalf("result %+v, want failed %s", r, refund.CodeRefundedOutside)
	}
	if s.Creates() != 0 {
		t.Fatalf("%d creates, want 0", s.Creates())
	}
	o = run(t, s, filepath.Join(dir, "lenient.jsonl"), plan, runOpts{})
	if o.err != nil {
		t.Fatal(o.err)
	}
	if r := o.results["i1"]; r.Status != refund.StatusRefunded {
		t.Fatalf("result %+v, want refunded (refunds without metadata hold the item only with AllRefunds)", r)
	}
}

// A journal restored from an older copy, or a reshard that moves items to
// other journals, after Stripe forgot the keys: only the look-up before the
// first call stands between the rerun and a second refund.
func TestLostOrReshardedJournalAfterKeysForgotten(t *testing.T) {
	const n = 12
	s := newSim(t, n, stripesim.Faults{})
	dir := t.TempDir()
	full := filepath.Join(dir, "j.jsonl")
	if o := run(t, s, full, planLines("b1", n, 100), runOpts{}); o.err != nil {
		t.Fatal(o.err)
	}
	s.ForgetKeys()
	creates := s.Creates()
	for _, name := range []string{"restored-empty.jsonl", "shard-1-of-3.jsonl"} {
		o := run(t, s, filepath.Join(dir, name), planLines("b1", n, 100), runOpts{})
		if o.err != nil {
			t.Fatal(o.err)
		}
		wantStatus(t, o, n, refund.StatusRefunded)
	}
	if got := s.Creates() - creates; got != 0 {
		t.Errorf("%d create calls for items refunded under journals the run did not have, want 0", got)
	}
	wantExactlyOnce(t, s, "b1", n)
}

// gateway is a proxy in front of the simulator that answers the first
// create call of each key with status and body at once, while the call goes
// on behind it: the simulator holds it in its create hook until release is
// closed, then makes the refund. wait returns once every such call is done.
func gateway(t *testing.T, s *sim, status int, body string, release <-chan struct{}) (url string, hits *atomic.Int64, wait func()) {
	t.Helper()
	hits = new(atomic.Int64)
	var (
		mu       sync.Mutex
		seen     = map[string]bool{}
		inFlight sync.WaitGroup
	)
	s.SetCreateHook(func(string) { <-release })
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		first := r.Method == http.MethodPost && key != "" && !seen[key]
		seen[key] = true
		mu.Unlock()
		if !first {
			proxyTo(w, r, s.URL)
			return
		}
		hits.Add(1)
		req := r.Clone(context.WithoutCancel(r.Context()))
		sent, _ := io.ReadAll(r.Body)
		req.Body = io.NopCloser(bytes.NewReader(sent))
		inFlight.Add(1)
		go func() {
			defer inFlight.Done()
			proxyRecord(httptest.NewRecorder(), req, s.URL)
		}()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(ts.Close)
	return ts.URL, hits, inFlight.Wait
}

func proxyTo(w http.ResponseWriter, r *http.Request, base string) {
	rec := httptest.NewRecorder()
	proxyRecord(rec, r, base)
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
}

func proxyRecord(rec *httptest.ResponseRecorder, r *http.Request, base string) {
	body, _ := io.ReadAll(r.Body)
	req, err := http.NewRequest(r.Method, base+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		panic(err)
	}
	req.Header = r.Header.Clone()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		rec.WriteHeader(http.StatusBadGateway)
		return
	}
	defer res.Body.Close()
	for k, v := range res.Header {
		rec.Header()[k] = v
	}
	rec.WriteHeader(res.StatusCode)
	io.Copy(rec, res.Body)
}

// TestGatewayErrorsNeverBurnTheKey: a gateway answers 502 or 504 while the
// refund is still being made behind it. The look-up finds nothing yet; only
// the same key (409 while in flight, then the replay) keeps a retry from
// making a second refund.
func TestGatewayErrorsNeverBurnTheKey(t *testing.T) {
	const stripeShaped = `{"error":{"type":"api_error","message":"An unknown error occurred"}}`
	for _, tc := range []struct {
		name   string
		status int
		body   string
	}{
		{"502 html", 502, "<html>bad gateway</html>"},
		{"504 stripe-shaped", 504, stripeShaped},
		{"502 stripe-shaped", 502, stripeShaped},
		// A 500 that did not come from Stripe (no Request-Id) is no saved answer.
		{"500 without request id", 500, stripeShaped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 4
			s := newSim(t, n, stripesim.Faults{})
			release := make(chan struct{})
			var once sync.Once
			free := func() { once.Do(func() { close(release) }) }
			// The originals finish once a retry was told their key is in use.
			s.OnAnswer(func(status int) {
				if status == http.StatusConflict {
					free()
				}
			})
			url, hits, wait := gateway(t, s, tc.status, tc.body, release)
			path := filepath.Join(t.TempDir(), "j.jsonl")
			o := run(t, s, path, planLines("b1", n, 100), runOpts{url: url})
			free()
			wait()
			if o.err != nil {
				t.Fatal(o.err)
			}
			if hits.Load() != n {
				t.Fatalf("gateway answered %d calls, want %d", hits.Load(), n)
			}
			wantStatus(t, o, n, refund.StatusRefunded)
			for _, r := range o.results {
				if r.Attempt != 1 {
					t.Errorf("item %s: attempt %d, want 1 (the same key, replayed)", r.Item, r.Attempt)
				}
			}
			wantExactlyOnce(t, s, "b1", n)
		})
	}
}

func TestOldFailureRecordsBurnOnlyStripes500(t *testing.T) {
	s := newSim(t, 1, stripesim.Faults{})
	path := filepath.Join(t.TempDir(), "j.jsonl")
	appendIntent(t, path, "b1", "i1", "ch_sim0000001", 1, time.Now())
	id := refundDirect(t, s, "b1", "i1", "ch_sim0000001", 1)
	// Journaled by an older version: a gateway's 504 recorded as an answer.
	appendRecord(t, path, &journal.Record{V: journal.Version, Type: journal.TypeFailed, Time: time.Now(), Batch: "b1", Item: "i1",
		Charge: "ch_sim0000001", Attempt: 1, Key: refund.IdempotencyKey("b1", "i1", 1), HTTPStatus: 504, Code: "api_error"})
	state, _, err := journal.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := state.Lookup("b1", "i1"); st.KeyBurned {
		t.Fatalf("a 504 burned the key: %+v", st)
	}
	o := run(t, s, path, planLines("b1", 1, 0), runOpts{})
	if o.err != nil || o.results["i1"].Refund != id {
		t.Fatalf("result %+v err %v, want refund %s adopted", o.results["i1"], o.err, id)
	}
}

// TestOldKeyIsReusedWhateverTheClock: the journal's intent looks a day old
// (the clock jumped, or the process was paused) while its call is still in
// flight at Stripe. Only the same key keeps the two from both refunding.
func TestOldKeyIsReusedWhateverTheClock(t *testing.T) {
	s := newSim(t, 1, stripesim.Faults{})
	path := filepath.Join(t.TempDir(), "j.jsonl")
	appendIntent(t, path, "b1", "i1", "ch_sim0000001", 1, time.Now().Add(-49*time.Hour))

	release, orig := inFlight(t, s, refund.Item{Batch: "b1", Item: "i1", Charge: "ch_sim0000001"}, 1)
	// Release the original once the resume has been told the key is in use.
	s.OnAnswer(func(status int) {
		if status == http.StatusConflict {
			release()
		}
	})
	o := run(t, s, path, planLines("b1", 1, 0), runOpts{})
	release()
	if err := <-orig; err != nil {
		t.Fatal(err)
	}
	if o.err != nil {
		t.Fatal(o.err)
	}
	if r := o.results["i1"]; r.Status != refund.StatusRefunded || r.Attempt != 1 {
		t.Fatalf("result %+v, want refunded under attempt 1", r)
	}
	wantExactlyOnce(t, s, "b1", 1)
}

func TestEditedPlanIsAnInputError(t *testing.T) {
	for _, tc := range []struct {
		name     string
		refunded bool   // the journal holds the outcome, not only the intent
		line     string // the edited plan line for i1
		want     string
	}{
		{"charge of an in-doubt item", false, `{"batch":"b1","item":"i1","charge":"ch_sim0000002","amount":100}`, `"ch_sim0000002"`},
		{"charge of a refunded item", true, `{"batch":"b1","item":"i1","charge":"ch_sim0000002","amount":100}`, `"ch_sim0000001"`},
		{"payment intent instead", true, `{"batch":"b1","item":"i1","payment_intent":"pi_sim0000001","amount":100}`, "payment_intent"},
		{"amount", false, `{"batch":"b1","item":"i1","charge":"ch_sim0000001","amount":700}`, "700"},
		{"full instead of partial", true, `{"batch":"b1","item":"i1","charge":"ch_sim0000001"}`, "100"},
		{"currency", false, `{"batch":"b1","item":"i1","charge":"ch_sim0000001","amount":100,"currency":"eur"}`, "eur"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t, 2, stripesim.Faults{})
			path := filepath.Join(t.TempDir(), "j.jsonl")
			orig := `{"batch":"b1","item":"i1","charge":"ch_sim0000001","amount":100,"currency":"usd"}` + "\n"
			if tc.refunded {
				if o := run(t, s, path, orig, runOpts{}); o.err != nil {
					t.Fatal(o.err)
				}
			} else {
				appendRecord(t, path, &journal.Record{V: journal.Version, Type: journal.TypeIntent, Time: time.Now(), Batch: "b1", Item: "i1",
					Charge: "ch_sim0000001", Attempt: 1, Key: refund.IdempotencyKey("b1", "i1", 1), Amount: 100, Currency: "usd"})
				refundDirect(t, s, "b1", "i1", "ch_sim0000001", 1) // made, not journaled
			}
			before := s.calls()
			o := run(t, s, path, tc.line+"\n", runOpts{})
			var ie *refund.InputError
			if !errors.As(o.err, &ie) || ie.Line != 1 {
				t.Fatalf("err %v, want an input error at line 1", o.err)
			}
			if !strings.Contains(ie.Error(), tc.want) {
				t.Errorf("error %q does not name %s", ie, tc.want)
			}
			if len(o.results) != 0 {
				t.Errorf("results %+v for an edited item, want none", o.results)
			}
			if got := s.calls() - before; got != 0 {
				t.Errorf("%d API calls for an edited item, want 0", got)
			}
		})
	}
}

func TestTwoLiveRefundsForOneItemAreReported(t *testing.T) {
	s := newSim(t, 1, stripesim.Faults{})
	path := filepath.Join(t.TempDir(), "j.jsonl")
	appendRecord(t, path, &journal.Record{V: journal.Version, Type: journal.TypeIntent, Time: time.Now(), Batch: "b1", Item: "i1",
		Charge: "ch_sim0000001", Attempt: 2, Key: refund.IdempotencyKey("b1", "i1", 2), Amount: 100})
	first := refundPartial(t, s, "b1", "i1", "ch_sim0000001", 1, 100)
	second := refundPartial(t, s, "b1", "i1", "ch_sim0000001", 2, 100)
	o := run(t, s, path, planLines("b1", 1, 100), runOpts{})
	if o.err != nil {
		t.Fatal(o.err)
	}
	r := o.results["i1"]
	if r.Status != refund.StatusRefunded || r.Refund != first || r.Code != refund.CodeDuplicateRefunds || !strings.Contains(r.Message, second) {
		t.Fatalf("result %+v, want refunded %s with code %s naming %s", r, first, refund.CodeDuplicateRefunds, second)
	}
	if o.summary.Duplicates != 1 {
		t.Errorf("summary counts %d duplicates, want 1", o.summary.Duplicates)
	}
	if s.Creates() != 2 {
		t.Errorf("%d creates, want only the 2 made before the run", s.Creates())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{first, second} {
		if !bytes.Contains(data, []byte(`"refund":"`+id+`"`)) {
			t.Errorf("journal does not record refund %s", id)
		}
	}
}

// TestAnswersAreVerified: an answer naming another charge, amount or item is
// not this item's refund; the run halts with the item in doubt.
func TestAnswersAreVerified(t *testing.T) {
	for _, tc := range []struct{ name, from, to string }{
		{"charge", `"charge":"ch_sim0000001"`, `"charge":"ch_sim0000002"`},
		{"amount", `"amount":100`, `"amount":1000`},
		{"item", `"refundkit_item":"i1"`, `"refundkit_item":"i9"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t, 2, stripesim.Faults{})
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPost {
					proxyTo(w, r, s.URL)
					return
				}
				rec := httptest.NewRecorder()
				proxyRecord(rec, r, s.URL)
				for k, v := range rec.Header() {
					w.Header()[k] = v
				}
				body := strings.Replace(rec.Body.String(), tc.from, tc.to, 1)
				w.Header().Del("Content-Length")
				w.WriteHeader(rec.Code)
				io.WriteString(w, body)
			}))
			t.Cleanup(ts.Close)
			path := filepath.Join(t.TempDir(), "j.jsonl")
			o := run(t, s, path, planLines("b1", 1, 100), runOpts{url: ts.URL, workers: 1})
			var h *refund.HaltError
			if !errors.As(o.err, &h) || h.Journal {
				t.Fatalf("err %v, want a halt for a mismatched answer", o.err)
			}
			if r := o.results["i1"]; r.Status != refund.StatusInDoubt || r.Code != refund.CodeAnswerMismatch {
				t.Fatalf("result %+v, want in doubt %s", r, refund.CodeAnswerMismatch)
			}
			state, _, err := journal.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if st, _ := state.Lookup("b1", "i1"); st.Status != journal.StatusInDoubt || st.Code != refund.CodeAnswerMismatch {
				t.Fatalf("journal state %+v, want in doubt %s", st, refund.CodeAnswerMismatch)
			}
		})
	}
}

// TestTwoBatchesInPlanAndJournal runs with -race: the feed and the workers
// once raced on the journal state's batch cache.
func TestTwoBatchesInPlanAndJournal(t *testing.T) {
	const n = 40
	s := newSim(t, n, stripesim.Faults{})
	path := filepath.Join(t.TempDir(), "j.jsonl")
	var plan strings.Builder
	for i := 1; i <= n; i++ {
		batch := []string{"a", "b"}[i%2]
		fmt.Fprintf(&plan, `{"batch":%q,"item":"i%d","charge":"ch_sim%07d"}`+"\n", batch, i, i)
		appendIntent(t, path, batch, fmt.Sprintf("i%d", i), fmt.Sprintf("ch_sim%07d", i), 1, time.Now())
	}
	o := run(t, s, path, plan.String(), runOpts{workers: 8})
	if o.err != nil {
		t.Fatal(o.err)
	}
	wantStatus(t, o, n, refund.StatusRefunded)
	wantOneRefundPerCharge(t, s, n)
}

// refundPartial makes a partial refund with the item's key and metadata
// straight at the simulator, as a run whose outcome was lost.
func refundPartial(t *testing.T, s *sim, batch, item, charge string, attempt int, amount int64) string {
	t.Helper()
	c := stripe.New(s.URL, testKey, 1)
	r, err := c.Create(t.Context(), &refund.Item{Batch: batch, Item: item, Charge: charge, Amount: amount}, attempt)
	if err != nil {
		t.Fatal(err)
	}
	return r.ID
}

func appendRecord(t *testing.T, path string, rec *journal.Record) {
	t.Helper()
	w, _, _, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Append(rec); err != nil {
		t.Fatal(err)
	}
}

// TestGatewayThatNeverLetsThroughHaltsSayingSo: every call meets a gateway's
// HTML 504. The run halts after enough of them, saying a gateway answered,
// and journals the item as no answer (http_status 0, code gateway_504).
func TestGatewayThatNeverLetsThroughHaltsSayingSo(t *testing.T) {
	s := newSim(t, 1, stripesim.Faults{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			proxyTo(w, r, s.URL)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusGatewayTimeout)
		io.WriteString(w, "<html>504 Gateway Time-out</html>")
	}))
	t.Cleanup(ts.Close)
	path := filepath.Join(t.TempDir(), "j.jsonl")
	o := run(t, s, path, planLines("b1", 1, 100), runOpts{url: ts.URL, workers: 1})
	var h *refund.HaltError
	if !errors.As(o.err, &h) || !strings.Contains(h.Error(), "a gateway in front of it answered 504") {
		t.Fatalf("err %v, want a halt that names the gateway's 504", o.err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(`"code":"gateway_504"`)) || bytes.Contains(data, []byte(`"http_status":504`)) {
		t.Errorf("journal:\n%s\nwant the failure as code gateway_504 with no http_status", data)
	}
	if st, _ := mustLoad(t, path).Lookup("b1", "i1"); st.KeyBurned {
		t.Errorf("a gateway's 504 burned the key: %+v", st)
	}
}

func mustLoad(t *testing.T, path string) *journal.State {
	t.Helper()
	st, _, err := journal.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// inFlight makes the call of item it under attempt's key, as a killed run left it:
// sent, held at the simulator until release (idempotent) is called, its
// error then on the channel. It returns once the call is held.
func inFlight(t *testing.T, s *sim, it refund.Item, attempt int) (release func(), done <-chan error) {
	t.Helper()
	key := refund.IdempotencyKey(it.Batch, it.Item, attempt)
	held, freed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(freed) }) }
	s.SetCreateHook(func(k string) {
		if k != key {
			return
		}
		select {
		case <-held: // a retry of it: not held
		default:
			close(held)
			<-freed
		}
	})
	errs := make(chan error, 1)
	go func() {
		_, err := stripe.New(s.URL, testKey, 1).Create(context.Background(), &it, attempt)
		errs <- err
	}()
	<-held
	return release, errs
}
