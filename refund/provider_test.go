package refund_test

// A provider held in memory, run end to end through the engine, the JSONL
// journal and audit: adding a provider is a type with Provider's methods,
// and nothing in journal/, the engine or audit changes for it.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/refundkit/refundkit/journal"
	"github.com/refundkit/refundkit/refund"
	"github.com/refundkit/refundkit/refund/audit"
	"github.com/refundkit/refundkit/refund/provider/paypal"
	"github.com/refundkit/refundkit/refund/provider/stripe"
)

// memProvider keeps refunds and the answers saved under idempotency keys.
type memProvider struct {
	noLookup bool             // Find says ErrNoLookup
	keyTTL   time.Duration    // Facts.KeyTTL
	now      func() time.Time // the run's clock; nil is time.Now
	pending  bool             // new refunds are pending until settle

	mu      sync.Mutex
	refunds []refund.Refund          // oldest first
	saved   map[string]refund.Answer // by idempotency key
	creates int
}

func (p *memProvider) Facts() refund.Facts {
	return refund.Facts{Name: "Mem", KeyTTL: p.keyTTL, Backoff: refund.Backoff{Base: time.Millisecond, Max: time.Millisecond}}
}

func (p *memProvider) Create(_ context.Context, it *refund.Item, attempt int) (refund.Answer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.creates++
	key := refund.IdempotencyKey(it.Batch, it.Item, attempt)
	if a, ok := p.saved[key]; ok {
		a.Replayed = true
		return a, nil
	}
	r := p.add(it.Charge, it.Amount, map[string]string{refund.MetaBatch: it.Batch, refund.MetaItem: it.Item, refund.MetaAttempt: strconv.Itoa(attempt)})
	if it.Capture != "" || it.PSPReference != "" {
		r.Charge, r.Capture, r.PSPReference = "", it.Capture, it.PSPReference
		p.refunds[len(p.refunds)-1] = r
	}
	if p.saved == nil {
		p.saved = map[string]refund.Answer{}
	}
	p.saved[key] = refund.Answer{Refund: r, HTTPStatus: 200}
	return p.saved[key], nil
}

// add makes a refund on charge, as a run or a person would (full: 1000).
func (p *memProvider) add(charge string, amount int64, meta map[string]string) refund.Refund {
	if amount == 0 {
		amount = 1000
	}
	r := refund.Refund{ID: fmt.Sprintf("mre_%d", len(p.refunds)+1), Charge: charge, Amount: amount, Currency: "eur",
		Status: refund.RefundSucceeded, Created: int64(len(p.refunds)), Metadata: meta}
	if p.pending {
		r.Status = refund.RefundPending
	}
	p.refunds = append(p.refunds, r)
	return r
}

func (p *memProvider) Find(_ context.Context, pay refund.Payment) ([]refund.Refund, error) {
	if p.noLookup {
		return nil, refund.ErrNoLookup
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []refund.Refund
	for i := len(p.refunds) - 1; i >= 0; i-- {
		if r := p.refunds[i]; r.Charge == pay.Charge && r.Capture == pay.Capture && r.PSPReference == pay.PSPReference {
			out = append(out, p.refunds[i])
		}
	}
	return out, nil
}

func (p *memProvider) Payment(context.Context, refund.Payment) (refund.PaymentInfo, error) {
	return refund.PaymentInfo{}, refund.ErrNoLookup
}

func (p *memProvider) Cancel(_ context.Context, id string) (refund.Refund, error) {
	return refund.Refund{}, &refund.Failure{Class: refund.ClassFinal, Status: 400, Code: "not_cancelable", Err: errors.New("refunds here cannot be canceled")}
}

func (p *memProvider) Get(_ context.Context, id string) (refund.Refund, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.refunds {
		if r.ID == id {
			return r, nil
		}
	}
	return refund.Refund{}, &refund.Failure{Class: refund.ClassFinal, Status: 404, Code: "resource_missing", Err: fmt.Errorf("no refund %s", id)}
}

// loseOutcomes is a checkpoint that loses every outcome, as a crash between
// a call and the fsync of its answer does.
type loseOutcomes struct{ refund.Checkpoint }

func (l loseOutcomes) Append(recs ...*journal.Record) error {
	if recs[0].Type != journal.TypeIntent {
		return errors.New("crashed")
	}
	return l.Checkpoint.Append(recs...)
}

// memRun runs the plan lines against p with the journal at path.
func memRun(t *testing.T, p *memProvider, path, plan string, lose bool) map[string]refund.Result {
	t.Helper()
	w, state, _, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	cp := refund.Journal(w, state)
	if lose {
		cp = loseOutcomes{cp}
	}
	res := map[string]refund.Result{}
	_, err = refund.Run(context.Background(), refund.Config{Provider: p, Checkpoint: cp, Workers: 2, Now: p.now,
		OnResult: func(r refund.Result) { res[r.Item] = r }}, strings.NewReader(plan), "plan.jsonl")
	var h *refund.HaltError
	if err != nil && !(lose && errors.As(err, &h) && h.Journal) {
		t.Fatalf("run: %v", err)
	}
	return res
}

func TestAProviderInMemoryRunsTheEngineEndToEnd(t *testing.T) {
	plan := `{"batch":"b1","item":"crash","charge":"ch_1","amount":500}` + "\n"
	t.Run("crash and rerun: one refund", func(t *testing.T) {
		for _, p := range []*memProvider{{}, {noLookup: true}} {
			path := filepath.Join(t.TempDir(), "j.jsonl")
			memRun(t, p, path, plan, true)
			res := memRun(t, p, path, plan, false)
			if r := res["crash"]; r.Status != refund.StatusRefunded || r.Refund != "mre_1" || len(p.refunds) != 1 {
				t.Errorf("no look-up %v: rerun %+v, %d refunds at the provider; want mre_1 only", p.noLookup, r, len(p.refunds))
			}
			if want := map[bool]int{false: 1, true: 2}[p.noLookup]; p.creates != want { // adopted, or replayed under its key
				t.Errorf("no look-up %v: %d creates, want %d", p.noLookup, p.creates, want)
			}
		}
	})
	// A provider that keeps keys for a time (PayPal: 45 days) and cannot
	// look up: the same key again only while it surely keeps it.
	for _, tc := range []struct {
		name  string
		later time.Duration // from the crashed run to the rerun, by the clock
		sent  bool
	}{
		{"key kept: the same key again, one refund", 10 * time.Minute, true},
		{"key maybe forgotten: in doubt, nothing sent", 40 * time.Minute, false},
		{"clock went back: in doubt, nothing sent", -2 * time.Hour, false},
	} {
		t.Run("no look-up, "+tc.name, func(t *testing.T) {
			p := &memProvider{noLookup: true, keyTTL: time.Hour}
			path := filepath.Join(t.TempDir(), "j.jsonl")
			start := time.Now()
			p.now = func() time.Time { return start }
			memRun(t, p, path, plan, true)
			p.now = func() time.Time { return start.Add(tc.later) }
			r := memRun(t, p, path, plan, false)["crash"]
			switch {
			case tc.sent && (r.Status != refund.StatusRefunded || p.creates != 2 || len(p.refunds) != 1):
				t.Errorf("rerun %+v after %d creates, %d refunds; want refunded by the same key, 1 refund", r, p.creates, len(p.refunds))
			case !tc.sent && (r.Status != refund.StatusInDoubt || r.Code != refund.CodeNoLookup || p.creates != 1):
				t.Errorf("rerun %+v after %d creates, want in doubt (%s) after 1", r, p.creates, refund.CodeNoLookup)
			}
		})
	}

	p := &memProvider{}
	p.add("ch_2", 700, map[string]string{refund.MetaBatch: "b1", refund.MetaItem: "adopt", refund.MetaAttempt: "1"})
	p.add("ch_3", 300, map[string]string{refund.MetaBatch: "b0", refund.MetaItem: "x"})
	plan = `{"batch":"b1","item":"adopt","charge":"ch_2","amount":700}
{"batch":"b1","item":"held","charge":"ch_3","amount":300}
`
	path := filepath.Join(t.TempDir(), "j.jsonl")
	res := memRun(t, p, path, plan, false)
	if r := res["adopt"]; r.Status != refund.StatusRefunded || !r.Found || r.Refund != "mre_1" {
		t.Errorf("look-up: %+v, want mre_1 adopted", r)
	}
	if r := res["held"]; r.Status != refund.StatusFailed || r.Code != refund.CodeRefundedByOtherBatch {
		t.Errorf("held: %+v, want failed %s", r, refund.CodeRefundedByOtherBatch)
	}
	if p.creates != 0 {
		t.Errorf("%d creates, want none", p.creates)
	}

	// Audit asks the same provider: the adopted refund is the item's, and
	// the held item is reported for a person to decide.
	a := audit.New()
	if err := a.AddPlan(strings.NewReader(plan), "plan.jsonl"); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := a.AddJournal(f, path); err != nil {
		t.Fatal(err)
	}
	var got []string
	if _, err := a.Run(context.Background(), audit.Options{Provider: p}, func(f *audit.Finding) {
		got = append(got, f.Finding+" "+f.Item+" "+f.Code)
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"failed held " + refund.CodeRefundedByOtherBatch}; !slices.Equal(got, want) {
		t.Errorf("audit findings %q, want %q", got, want)
	}
}

// settle ends refund id as status, as the provider does for a pending one.
func (p *memProvider) settle(id, status string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.refunds {
		if p.refunds[i].ID == id {
			p.refunds[i].Status = status
		}
	}
}

// A pending refund is journaled pending and settled by later runs, which
// ask how it ended and never send a second one.
func TestPendingRefundsSettleOnRerun(t *testing.T) {
	plan := `{"batch":"b1","item":"ok","charge":"ch_1","amount":500}
{"batch":"b1","item":"bad","charge":"ch_2","amount":300}
`
	for _, noLookup := range []bool{false, true} {
		p := &memProvider{pending: true, noLookup: noLookup}
		path := filepath.Join(t.TempDir(), "j.jsonl")
		res := memRun(t, p, path, plan, false)
		for _, item := range []string{"ok", "bad"} {
			if r := res[item]; r.Status != refund.StatusPending || r.Refund == "" {
				t.Fatalf("first run: %s %+v, want pending with its refund", item, r)
			}
		}
		ok, bad := res["ok"].Refund, res["bad"].Refund

		// Still pending at the provider: still pending, nothing sent.
		res = memRun(t, p, path, plan, false)
		if r := res["ok"]; r.Status != refund.StatusPending || r.Refund != ok {
			t.Errorf("second run: %+v, want still pending %s", r, ok)
		}
		p.settle(ok, refund.RefundSucceeded)
		p.settle(bad, refund.RefundFailed)
		res = memRun(t, p, path, plan, false)
		if r := res["ok"]; r.Status != refund.StatusRefunded || r.Refund != ok {
			t.Errorf("settled: %+v, want refunded %s", r, ok)
		}
		if r := res["bad"]; r.Status != refund.StatusFailed || r.Code != "refund_failed" || r.Refund != bad {
			t.Errorf("failed at the provider: %+v, want failed refund_failed with %s", r, bad)
		}
		// Settled for good: a fourth run skips both without a call.
		res = memRun(t, p, path, plan, false)
		if res["ok"].Status != refund.StatusSkipped || res["bad"].Status != refund.StatusFailed {
			t.Errorf("fourth run: %+v %+v, want skipped and failed", res["ok"], res["bad"])
		}
		if p.creates != 2 || len(p.refunds) != 2 {
			t.Errorf("no look-up %v: %d creates, %d refunds; want 2 and 2 (none sent again)", noLookup, p.creates, len(p.refunds))
		}
	}
}

// Items of different captures are locked apart, and no charges of a
// payment intent are asked for them: every capture item once took the
// lock of the payment intent "" and a list of its charges.
func TestCaptureItemsLockTheirOwnCapture(t *testing.T) {
	p := &memProvider{noLookup: true}
	path := filepath.Join(t.TempDir(), "j.jsonl")
	w, state, _, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	plan := `{"batch":"b","item":"c1","capture":"CAP1"}
{"batch":"b","item":"c2","capture":"CAP2"}
`
	sum, err := refund.Run(context.Background(), refund.Config{Provider: p, Checkpoint: refund.Journal(w, state), Workers: 2,
		OnResult: func(refund.Result) {}}, strings.NewReader(plan), "plan.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if sum.ByStatus[refund.StatusRefunded] != 2 || sum.RefundLists != 0 {
		t.Errorf("summary %+v: want 2 refunded and no list call", sum)
	}
}

// Items of Adyen payments, named by psp_reference, run as captures do: a
// run killed after its calls and rerun refunds each payment once, its lost
// answers found by a look-up of the payment, and each item locks its own.
func TestPSPReferenceItemsRunEndToEnd(t *testing.T) {
	plan := `{"batch":"b","item":"a1","psp_reference":"8815658961765250","amount":500}
{"batch":"b","item":"a2","psp_reference":"QFQTPCQ8HXSKGK82"}
`
	p := &memProvider{}
	path := filepath.Join(t.TempDir(), "j.jsonl")
	memRun(t, p, path, plan, true)
	res := memRun(t, p, path, plan, false)
	if len(p.refunds) != 2 {
		t.Fatalf("%d refunds at the provider, want 2: %+v", len(p.refunds), p.refunds)
	}
	for item, psp := range map[string]string{"a1": "8815658961765250", "a2": "QFQTPCQ8HXSKGK82"} {
		if r := res[item]; r.Status != refund.StatusRefunded || r.PSPReference != psp || r.Charge != "" {
			t.Errorf("rerun: %s is %+v, want refunded on psp_reference %s", item, r, psp)
		}
	}
	st, _, err := journal.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := st.Lookup("b", "a1"); got.PSPReference != "8815658961765250" || got.Status != journal.StatusRefunded {
		t.Errorf("journal: a1 is %+v, want refunded, bound to its psp_reference", got)
	}
}

// withFacts is a provider with another provider's facts.
type withFacts struct {
	*memProvider
	facts refund.Facts
}

func (w withFacts) Facts() refund.Facts { return w.facts }

// A provider refuses, as bad input naming the field and line, a plan item
// naming a kind of payment it does not refund (a plan for another
// provider), before anything is sent for it.
func TestAProviderRefusesAnotherKindOfPayment(t *testing.T) {
	stripeFacts, paypalFacts := (*stripe.Client)(nil).Facts(), (*paypal.Client)(nil).Facts()
	adyenFacts := refund.Facts{Name: "Adyen", Payments: []string{"psp_reference"}}
	const psp = `{"batch":"b","item":"a1","psp_reference":"8815658961765250"}`
	for _, tc := range []struct {
		name  string
		facts refund.Facts
		line  string
		want  string // "" when accepted
	}{
		{"stripe: psp_reference", stripeFacts, psp, "plan.jsonl:1: psp_reference: Stripe refunds a charge or payment_intent, not a psp_reference: is this the plan for another provider (--provider)?"},
		{"paypal: psp_reference", paypalFacts, psp, "plan.jsonl:1: psp_reference: PayPal refunds a capture, not a psp_reference"},
		{"adyen: capture", adyenFacts, `{"batch":"b","item":"c1","capture":"2GG279541U471931P"}`, "plan.jsonl:1: capture: Adyen refunds a psp_reference, not a capture"},
		{"adyen: charge", adyenFacts, `{"batch":"b","item":"c1","charge":"ch_1"}`, "plan.jsonl:1: charge: Adyen refunds a psp_reference, not a charge"},
		{"adyen: psp_reference", adyenFacts, psp, ""},
		{"any: psp_reference", refund.Facts{Name: "Mem"}, psp, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.facts.Backoff = refund.Backoff{Base: time.Millisecond, Max: time.Millisecond}
			mem := &memProvider{}
			w, state, _, err := journal.Open(filepath.Join(t.TempDir(), "j.jsonl"), journal.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			plan := tc.line + "\n"
			_, err = refund.Run(context.Background(), refund.Config{Provider: withFacts{mem, tc.facts}, Checkpoint: refund.Journal(w, state), Workers: 1,
				OnResult: func(refund.Result) {}}, strings.NewReader(plan), "plan.jsonl")
			var ie *refund.InputError
			switch {
			case tc.want == "" && (err != nil || mem.creates != 1):
				t.Errorf("run: %v after %d creates, want the item refunded", err, mem.creates)
			case tc.want != "" && (!errors.As(err, &ie) || !strings.HasPrefix(err.Error(), tc.want)):
				t.Errorf("run: %v, want bad input %q", err, tc.want)
			case tc.want != "" && mem.creates != 0:
				t.Errorf("%d creates, want none", mem.creates)
			}
		})
	}
}
